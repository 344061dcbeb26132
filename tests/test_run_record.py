"""What a run records is what it did: the test backbone of the decoder paper rows (fp32, unquantised), the
encoder behind the reported STS-B dev score, a best checkpoint for every run that trained (issue 25, items 5-7)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests import forked

CONF = Path(__file__).resolve().parents[1] / "conf"
PROMPTEOL_ROWS = sorted(p.stem for p in (CONF / "experiment" / "prompteol").glob("*.yaml"))


def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)
    from cselab.model.loading import register_family_resolver

    register_family_resolver()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("row", PROMPTEOL_ROWS)
def test_decoder_paper_rows_test_fp32_weights(row, monkeypatch):
    """Every PromptEOL paper row is tested on float32, unquantised weights with float32 arithmetic, as the official
    "16-bit" path (kongds/scaling_sentemb evaluation.py:104-109; eval_checkpoints.sh:46-49 for the adapters), even
    on a GPU, where backbone.dtype=auto would load bf16 weights."""
    from cselab.model.loading import resolve_dtype
    from cselab.run.spec import evaluation_spec

    assert len(PROMPTEOL_ROWS) >= 18
    cfg = _compose(f"experiment=prompteol/{row}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on the GPU the rows need
    tested = evaluation_spec(cfg).test_backbone
    assert resolve_dtype(tested["dtype"]) == torch.float32, row
    assert tested["load_in_4bit"] is False, row
    assert cfg.eval.precision == "32"
    if cfg.method.train:  # fine-tuned rows still train in 4-bit (the official QLoRA); only the test changes
        assert cfg.backbone.load_in_4bit is True and cfg.tuning.name == "lora"


def test_test_backbone_refuses_unknown_keys():
    from cselab.model.spec import ConfigError
    from cselab.run.spec import evaluation_spec

    cfg = _compose("eval.test_backbone={dtyp: float32}")
    with pytest.raises(ConfigError, match=r"eval.test_backbone: unknown key\(s\) \['dtyp'\]"):
        _ = evaluation_spec(cfg).test_backbone


def test_lora_run_is_tested_on_the_reloaded_fp32_backbone(tmp_path, tiny_decoder_dirs, sts_data_dir):
    """Trained in bfloat16 weights, tested (eval.test_backbone) on the float32 base reloaded with the best
    checkpoint's adapter: the tested model's weights are float32 and its LoRA tensors are the checkpoint's."""
    from cselab.methods.loading import load
    from tests.conftest import run

    cfg = _compose("method=prompteol", "backbone=auto", f"backbone.name_or_path={tiny_decoder_dirs['opt']}",
                   "data=nli_sample", "data.batch_size=4",
        "data.drop_last=true", "trainer.enable_progress_bar=false", "tuning.r=4", "eval.test_tasks=[stsb]",
        "backbone.dtype=bfloat16", "eval.test_backbone={dtype: float32}", f"data_dir={sts_data_dir}")
    results = run(cfg, tmp_path)
    assert results["test_backbone"] == {"dtype": "float32", "load_in_4bit": False}
    ckpt = torch.load(results["best_checkpoint"], map_location="cpu", weights_only=False)
    assert ckpt["hyper_parameters"]["backbone"]["dtype"] == "bfloat16"  # trained in bf16
    tested = load(results["best_checkpoint"], backbone={"dtype": "float32"})
    assert {p.dtype for p in tested.parameters()} == {torch.float32}
    state = tested.state_dict()
    for key, value in ckpt["state_dict"].items():  # the adapter: the checkpoint's (bf16 -> fp32 exactly)
        assert torch.equal(state[key], value.float()), key
    scores = tested.encode(["a cat sits on the mat", "a dog runs"])
    assert scores.dtype == torch.float32


def test_untrained_promptbert_scores_dev_with_the_test_encoder(tmp_path, tiny_bert_dir, sts_data_dir):
    """method.train=false: STS-B dev goes through the test encoder, the official evaluation.py --mode dev rule
    (PromptBERT's period rule, no template-bias subtraction), not the in-training dev batcher."""
    from conftest import compose_tiny_run

    from cselab.evaluation.sts import STSEvaluator
    from tests.conftest import build_method, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "method=promptbert", "method.train=false",
                           "eval.test_tasks=[stsb]")
    assert cfg.module.model.dev_encoder  # the method has an in-training dev encoder that differs from the test one
    results = run(cfg, tmp_path / "run")
    method = build_method(cfg)
    rule = STSEvaluator(str(sts_data_dir)).evaluate(lambda s: method.encode(s, encoder="test"), tasks=("stsb",),
                                                    split="dev")["stsb"]
    in_training = STSEvaluator(str(sts_data_dir)).evaluate(lambda s: method.encode(s, encoder="dev"),
                                                           tasks=("stsb",), split="dev")["stsb"]
    assert results["dev"]["stsb"] == pytest.approx(rule, abs=1e-6)
    assert abs(in_training - rule) > 1e-3  # the two encoders differ here, so the test can tell them apart
    assert results["dev_encoder"] == "test"
    assert results["test_backbone"] == {"dtype": "float32", "load_in_4bit": False}


def test_trained_run_says_its_dev_score_is_the_in_training_encoders(tmp_path, tiny_bert_dir, sts_data_dir, capsys):
    """A trained PromptBERT run reports the dev score the checkpoint was selected on; results.json and the
    console name that encoder.  Training shorter than trainer.val_check_interval still validates once, at its
    last step, and records that best checkpoint."""
    from conftest import compose_tiny_run

    from tests.conftest import run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "method=promptbert", "eval.test_tasks=[stsb]",
                           "trainer.max_steps=3", "trainer.val_check_interval=125")
    results = run(cfg, tmp_path / "run")
    assert results["dev_encoder"] == "in_training"
    assert "in-training dev encoder" in capsys.readouterr().out
    assert [p["step"] for p in results["val_curve"]] == [3]
    assert results["best_checkpoint"] and Path(results["best_checkpoint"]).name == "best-step3.ckpt"
    assert Path(results["best_checkpoint"]).is_file()
    assert results["best_dev"] == pytest.approx(results["val_curve"][0]["stsb_dev"])
    assert results["dev"]["stsb"] == pytest.approx(results["best_dev"], abs=1e-3)  # the tested checkpoint's
    assert OmegaConf.select(cfg, "trainer.val_check_interval") == 125


def test_sweep_job_directories_name_the_swept_values():
    """`-m` job directories say what differs between the jobs (was `<n>_prompteol_tiny_opt_sup` for every job)."""
    from cselab.io.config import job_dir_name, swept_keys

    argv = ["method=prompteol", "prompt=prompteol,pretcot", "backbone=auto",
            "backbone.name_or_path=/tmp/x/models/tiny_opt", "method.train=false", "seed=range(0,2)",
            "hydra.sweep.dir=/tmp/s"]
    swept = swept_keys(argv, {"method.denoise": "none,pad"})
    assert swept == {"prompt", "seed", "method.denoise"}
    names = [job_dir_name(n, ["method=prompteol", f"prompt={p}", "backbone=auto",
                              "backbone.name_or_path=/tmp/x/models/tiny_opt", "method.train=false", f"seed={s}",
                              "method.denoise=pad"], swept, "prompteol", "tiny_opt", "sup")
             for n, (p, s) in enumerate([("prompteol", 0), ("pretcot", 0), ("prompteol", 1)])]
    assert names == ["0_method.denoise=pad+prompt=prompteol+seed=0", "1_method.denoise=pad+prompt=pretcot+seed=0",
                     "2_method.denoise=pad+prompt=prompteol+seed=1"]
    # a sweep over folders: each by its last part
    swept = swept_keys(["backbone.name_or_path=models/tiny_opt,models/tiny_llama"])
    assert job_dir_name(1, ["backbone.name_or_path=models/tiny_llama"], swept, "m", "b", "s") == \
        "1_backbone.name_or_path=tiny_llama"
    # nothing known to be swept (another process's command line): every override of the job but output-only keys
    assert job_dir_name(0, ["method=simcse", "logger=wandb"], set(), "simcse", "minilm_l6", "unsup") == \
        "0_method=simcse"
    assert job_dir_name(0, [], set(), "simcse", "minilm_l6", "unsup") == "0_simcse_minilm_l6_unsup"


def test_slash_less_hub_ids_go_through_backbone_auto():
    """`backbone=bert-base-uncased` (a hub id without a slash) is written as backbone=auto; the conf/backbone
    options never have a `-`, so a dashed value is never an option typed wrong; an option typo stays Hydra's."""
    from cselab.io.config import backbone_path_overrides

    options = {p.stem for p in (CONF / "backbone").glob("*.yaml")}
    assert not any("-" in o for o in options)
    assert backbone_path_overrides(["backbone=bert-base-uncased", "seed=1"], options) == [
        "backbone=auto", "backbone.name_or_path=bert-base-uncased", "seed=1"]
    assert backbone_path_overrides(["-m", "backbone=roberta-base,bert-base-cased"], options) == [
        "-m", "backbone=auto", "backbone.name_or_path=roberta-base,bert-base-cased"]
    assert backbone_path_overrides(["backbone=gpt2", "backbone=bert_bsae"], options) == ["backbone=gpt2",
                                                                                         "backbone=bert_bsae"]


def test_a_missing_folder_is_named_as_a_folder(tmp_path, monkeypatch):
    """`backbone=models/nonexistent` with a models/ folder here: "no such folder" and what models/ holds, not the
    hub's offline message; a path that cannot be a hub id (two slashes) the same; `org/name` with no such folder
    and the hub offline: both readings in one message."""
    from cselab.model.loading import BackboneUnavailableError, load_backbone

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "models" / "tiny_opt").mkdir(parents=True)
    (tmp_path / "models" / "tiny_opt" / "config.json").write_text("{}")
    with pytest.raises(BackboneUnavailableError, match=r"'models/nonexistent': no such folder \(.*models/nonexistent "
                                                       r"does not exist; models/ holds the model folders \['tiny_opt'\]"):
        load_backbone("models/nonexistent")
    with pytest.raises(BackboneUnavailableError, match="'a/b/c': no such folder"):
        load_backbone("a/b/c")
    with pytest.raises(BackboneUnavailableError, match="'someorg/somemodel': no folder 'someorg/somemodel' here .*"
                                                       "as a hub id it is not in the Hugging Face cache"):
        load_backbone("someorg/somemodel")


def test_help_shows_the_output_layout():
    import sys

    root = CONF.parent
    out = forked.run([sys.executable, str(root / "run.py"), "--help"], cwd=root, capture_output=True, text=True,
                         timeout=120).stdout
    assert "outputs/<run_name>/" in out and "multirun/<run_name>/<n>_<swept values>/" in out
    assert "<date>" not in out and "<time>" not in out


def test_readme_quick_commands_test_on_stsb_only():
    """The README's commands meant to be quick (a quick sweep, the tiny decoders, CI-sized) score STS-B test only:
    the 7-task test alone takes minutes on a 2-core CPU."""
    import re

    text = (CONF.parent / "README.md").read_text(encoding="utf-8")
    commands = re.sub(r"\\\n\s*", " ", text).splitlines()
    quick = [c for c in commands if c.startswith("python run.py") and re.search(r"quick|CI-sized|tiny_", c)]
    assert len(quick) >= 3, quick
    for command in quick:
        assert "eval.test_tasks=[stsb]" in command, command


def test_test_phase_reuses_the_best_dev_score_and_one_task_has_no_avg(tmp_path, tiny_bert_dir, sts_data_dir,
                                                                      monkeypatch):
    """Issue #40: the test phase encoded STS-B dev again for the best checkpoint's score, which its validation had
    already computed; and with one test task the console printed test/avg while results.json had no avg (the
    papers' Avg is the mean of all 7).  Now: one dev evaluation per validation, no test/avg anywhere."""
    from conftest import compose_tiny_run

    from cselab.evaluation.callback import STSCallback
    from tests.conftest import run

    splits = []
    original = STSCallback._score

    def spy(self, trainer, pl_module, tasks, split, *args, **kwargs):
        splits.append(split)
        return original(self, trainer, pl_module, tasks, split, *args, **kwargs)

    monkeypatch.setattr(STSCallback, "_score", spy)
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]")
    results = run(cfg, tmp_path / "run")
    assert len(results["val_curve"]) == 2  # validations at steps 2 and 4
    assert splits == ["dev", "dev", "test"]  # no third STS-B dev encoding in the test phase
    assert results["dev"]["stsb"] == results["best_dev"]
    assert "avg" not in results["test"]
    metrics = (tmp_path / "run" / "csv" / "metrics.csv")
    logged = next(iter(metrics.parent.rglob("metrics.csv")), metrics).read_text().splitlines()[0].split(",")
    assert "test/stsb" in logged and "test/avg" not in logged
