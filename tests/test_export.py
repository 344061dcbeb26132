"""Export to sentence-transformers: the exported folder embeds exactly as ``cselab.load(ckpt).encode``."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys

import lightning as L
import pytest
import torch

pytest.importorskip("sentence_transformers")

from sentence_transformers import SentenceTransformer  # noqa: E402

import cselab  # noqa: E402
from cselab.cli.export import main  # noqa: E402
from cselab.export import ExportError, describe, export, model_code_files  # noqa: E402
from tests.conftest import PROMPTBERT_PROMPT  # noqa: E402

TRAIN = [
    "a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
    "a woman is slicing an onion", "it is raining today", "the dog ran", "a cat sat", "birds fly",
]
#: what is compared: punctuation (the period rule), a quote, a long one (padding), spaces, the empty sentence
PROBES = [
    "a man is playing a guitar", "The cat sat on the mat.", "two dogs are running in the park?",
    'he said "it is raining"', "birds fly", "a cat sat and the dog ran to the park while the man is playing",
    "cat", "a woman is slicing an onion.", "  two  spaces ", "",
]
TOL = 1e-5

COT_PROMPT = {
    "name": "cot_bert",
    "templates": {
        "bert": {
            "anchor": 'The sentence of "[X]" means [MASK] , so it can be summarized as [MASK] .',
            "positive": 'The sentence : "[X]" means [MASK] , so it can be summarized as [MASK] .',
            "negative": 'The sentence : "[X]" does not mean [MASK] , so it cannot be summarized as [MASK] .',
        },
    },
    "train_views": ["anchor", "positive", "negative"],
    "eval_view": "anchor",
    "mask_index": -1,
    "add_period_at_eval": True,
}
MANUAL = {**copy.deepcopy(PROMPTBERT_PROMPT), "train_views": ["view1", "view1"],
          "templates": {"bert": {"view1": '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'}}}


def _prefix(**kw):
    return {"name": "prefix", "pre_seq_len": 4, "variant": "deep", "dropout": 0.1, **kw}


def _perturb(m, scale: float = 0.05) -> None:
    """Make every trained tensor (prompts, heads) clearly non-trivial after the short fit."""
    torch.manual_seed(7)
    with torch.no_grad():
        for p in m.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * scale)


def _checkpoint(m, tmp_path) -> str:
    """Train 2 steps, perturb the trained tensors, save a checkpoint as the pipeline does."""
    loader = torch.utils.data.DataLoader(TRAIN, batch_size=4, collate_fn=m.train_collate())
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(m, loader)
    _perturb(m)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    return str(path)


def _roundtrip(ckpt: str, out) -> tuple[float, dict]:
    info = export(ckpt, out, verify=PROBES)
    # a plain folder loads without remote code: trust_remote_code=False is what a refusing pipeline passes
    model = SentenceTransformer(str(out), device="cpu", trust_remote_code=info["trust_remote_code"])
    theirs = model.encode(PROBES, convert_to_tensor=True, batch_size=3).float().cpu()
    ours = cselab.load(ckpt).encode(PROBES)
    assert theirs.shape == ours.shape
    diff = float((theirs - ours).abs().max())
    print(f"max abs diff {diff:.3g}  {info['modules']}")
    return diff, info


# ------------------------------------------------------------------------------------------------ the five methods


PLAIN_TOL = 1e-6
TRANSFORMER, POOLING, DENSE = ("sentence_transformers.base.modules.transformer.Transformer",
                               "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
                               "sentence_transformers.base.modules.dense.Dense")


def _plain(out) -> None:
    """The folder holds sentence-transformers' own modules and no code at all."""
    assert not list(out.glob("*.py")) and not (out / "cselab_model.json").exists()
    assert "trust_remote_code" not in (out / "README.md").read_text().split("## Usage")[1]
    assert "Plain sentence-transformers modules" in (out / "README.md").read_text()


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_simcse_sup_cls_and_mlp_exports_plain_modules(make_method, tmp_path, family):
    """SimCSE with its MLP at test: Transformer + Pooling(cls) + Dense(Tanh), no remote code, <= 1e-6."""
    m = make_method("simcse", family, pooler="cls", head="mlp", mlp_only_train=False)
    diff, info = _roundtrip(_checkpoint(m, tmp_path), tmp_path / "st")
    assert diff <= PLAIN_TOL
    assert info["modules"] == [TRANSFORMER, POOLING, DENSE] and not info["trust_remote_code"]
    assert info["st_module_reason"] is None and info["use_head"]
    config = json.loads((tmp_path / "st" / "2_Dense" / "config.json").read_text())
    assert config["activation_function"] == "torch.nn.modules.activation.Tanh"
    _plain(tmp_path / "st")


def test_simcse_unsup_tests_without_the_mlp_plain(make_method, tmp_path):
    """Unsup SimCSE trains with the MLP and tests without it ([CLS] of the last layer): Transformer + Pooling."""
    m = make_method("simcse", "bert", pooler="cls", head="mlp", mlp_only_train=True)
    diff, info = _roundtrip(_checkpoint(m, tmp_path), tmp_path / "st")
    assert diff <= PLAIN_TOL
    assert info["modules"] == [TRANSFORMER, POOLING] and not info["trust_remote_code"]
    assert info["pooler"] == "cls_before_pooler" and not info["use_head"]
    assert json.loads((tmp_path / "st" / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "cls"
    _plain(tmp_path / "st")


def test_avg_pooled_exports_plain_modules_and_truncates_as_the_test_encoder(make_method, tmp_path):
    m = make_method("simcse", "bert", pooler="avg", head="none", eval_max_seq_len=8)  # long probes are cut
    ckpt = _checkpoint(m, tmp_path)
    diff, info = _roundtrip(ckpt, tmp_path / "st")
    assert diff <= PLAIN_TOL
    assert info["modules"] == [TRANSFORMER, POOLING] and not info["trust_remote_code"]
    assert json.loads((tmp_path / "st" / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "mean"
    assert cselab.load(ckpt).model.spec.eval_max_seq_len == 8
    assert SentenceTransformer(str(tmp_path / "st"), device="cpu").max_seq_length == 8
    full = make_method("simcse", "bert", pooler="avg", head="none")  # the cut matters for the long probes
    full.load_state_dict(cselab.load(ckpt).state_dict())
    assert float((full.eval().encode(PROBES) - cselab.load(ckpt).encode(PROBES)).abs().max()) > 1e-3
    _plain(tmp_path / "st")


def test_promptbert_unsup_template_and_period_rule(make_method, tmp_path):
    m = make_method("promptbert", "bert", pooler="mask", denoise="position", prompt="promptbert")
    diff, info = _roundtrip(_checkpoint(m, tmp_path), tmp_path / "st")
    assert diff < TOL
    assert info["add_period"] and info["denoise"] == "none"
    assert not info["use_head"]  # unsup PromptBERT: MLP in training only
    assert info["modules"] == ["st_module.CselabEmbedding"] and info["trust_remote_code"]
    assert "template" in info["st_module_reason"] and "period rule" in info["st_module_reason"]
    card = (tmp_path / "st" / "README.md").read_text()
    assert "st_module.CselabEmbedding" in card and info["st_module_reason"] in card
    shipped = {p.name: p.read_text() for p in model_code_files()}
    assert {"embedding.py", "st_module.py", "template_input.py", "backbone.py", "pooling.py"} <= set(shipped)
    for name, text in shipped.items():  # the exported code IS the runtime modules' code
        assert (tmp_path / "st" / name).read_text() == text, name


def test_dcpcse_prefix_is_included(make_method, tmp_path):
    m = make_method("dcpcse", "bert", pooler="cls", tuning=_prefix(), mlp_only_train=False)  # head applied at test
    ckpt = _checkpoint(m, tmp_path)
    diff, info = _roundtrip(ckpt, tmp_path / "st")
    assert diff < TOL
    assert info["prompt_kind"] == "prefix" and info["use_head"]
    # the prompt matters: the same backbone without it (what the official PromCSE export gives) differs
    plain = make_method("simcse", "bert", pooler="cls", mlp_only_train=False)
    plain.head.load_state_dict(cselab.load(ckpt).head.state_dict())
    assert float((plain.eval().encode(PROBES) - cselab.load(ckpt).encode(PROBES)).abs().max()) > 1e-3


# ------------------------------------------------------------------------------------------------ more variants


@pytest.mark.parametrize("tuning", [
    _prefix(variant="layer_shared", prefix_positions="unshifted"),
    _prefix(variant="input_layer"),
    _prefix(prefix_projection=True, prefix_hidden_size=16),
], ids=["layer_shared-unshifted", "input_layer", "projection"])
def test_promcse_prefix_variants_on_roberta(make_method, tmp_path, tuning):
    m = make_method("promcse", "roberta", pooler="cls", tuning=tuning, mlp_only_train=False)
    diff, _ = _roundtrip(_checkpoint(m, tmp_path), tmp_path / "st")
    assert diff < TOL


def test_promptbert_sup_template_bias_and_mlm_transform_head(make_method, tmp_path):
    m = make_method("promptbert", "bert", setting="sup", pooler="mask", denoise="position", prompt="promptbert",
                    head="mlm_transform", head_on="each", mlp_only_train=False, denoise_at_eval=True)
    loader_rows = [{"sent0": a, "sent1": b, "hard_neg": c} for a, b, c in zip(TRAIN, TRAIN[1:], TRAIN[2:], strict=False)]
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(m, torch.utils.data.DataLoader(loader_rows, batch_size=4, collate_fn=m.train_collate()))
    _perturb(m)
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    diff, info = _roundtrip(str(tmp_path / "m.ckpt"), tmp_path / "st")
    assert diff < TOL
    assert info["denoise"] == "position" and info["head_on"] == "each"


def test_promptbert_roberta_sup_difference_head(make_method, tmp_path):
    m = make_method("promptbert", "roberta", pooler="mask", denoise="position", prompt="promptbert",
                    head="mlp", head_on="difference", mlp_only_train=False, denoise_at_eval=True)
    diff, _ = _roundtrip(_checkpoint(m, tmp_path), tmp_path / "st")
    assert diff < TOL


@pytest.mark.parametrize("pooler", ["avg", "avg_first_last", "avg_top2", "cls"])
def test_baseline_poolers(make_method, tmp_path, pooler):
    m = make_method("baseline", "roberta", pooler=pooler, head="none", train=False)
    path = _checkpoint(m, tmp_path)
    diff, info = _roundtrip(path, tmp_path / "st")
    assert diff < TOL
    assert info["pooler"] == pooler and info["head"] == "none"


def test_simcse_sup_applies_the_head_at_test(make_method, tmp_path):
    m = make_method("simcse", "roberta", pooler="cls", head="mlp", mlp_only_train=False)
    diff, info = _roundtrip(_checkpoint(m, tmp_path), tmp_path / "st")
    assert diff < TOL
    assert info["use_head"] and info["head"] == "MLPHead"


# ------------------------------------------------------------------------------------------------ refusals, CLI


def test_analysis_representations_are_refused(make_method, tmp_path):
    m = make_method("baseline", "bert", pooler="static_avg", train=False)
    with pytest.raises(ExportError, match="static_avg"):
        describe(m)
    with pytest.raises(ExportError, match="cannot be exported"):
        export(m, tmp_path / "st", verify=False)
    assert not (tmp_path / "st").exists()


def test_non_empty_output_is_refused(make_method, tmp_path):
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "x").write_text("keep")
    m = make_method("simcse", "bert", pooler="cls")
    with pytest.raises(ExportError, match="not empty"):
        export(m, tmp_path / "st", verify=False)
    assert (tmp_path / "st" / "x").read_text() == "keep"


def test_non_empty_output_is_refused_before_the_checkpoint_loads(tmp_path, monkeypatch):
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "x").write_text("keep")
    monkeypatch.setattr(cselab, "load", lambda *a, **k: pytest.fail("the checkpoint was loaded first"))
    with pytest.raises(ExportError, match="not empty"):
        export(tmp_path / "best.ckpt", tmp_path / "st", verify=False)


def test_exported_folder_gets_the_process_umask(make_method, tmp_path):
    old = os.umask(0o022)
    try:
        export(make_method("simcse", "bert", pooler="cls"), tmp_path / "st", verify=False)
    finally:
        os.umask(old)
    assert (tmp_path / "st").stat().st_mode & 0o777 == 0o755  # not mkdtemp's 0700
    modes = {p.relative_to(tmp_path / "st").as_posix(): p.stat().st_mode & 0o777 for p in (tmp_path / "st").rglob("*")}
    assert modes["model.safetensors"] == 0o644  # not mkstemp's 0600 (issue #40)
    assert {m for name, m in modes.items() if (tmp_path / "st" / name).is_file()} == {0o644}


def test_cli_and_folder_loads_without_cselab(make_method, tmp_path, capsys):
    m = make_method("dcpcse", "bert", pooler="cls", tuning=_prefix(), mlp_only_train=False)
    ckpt = _checkpoint(m, tmp_path)
    out = tmp_path / "st"
    assert main([ckpt, str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["max_abs_diff"] < TOL
    for path in model_code_files():  # the runtime files, with no import of cselab outside the package
        assert (out / path.name).read_text() == path.read_text()
        assert not [line for line in path.read_text().splitlines() if "import cselab" in line or "from cselab" in line]
    expected = cselab.load(ckpt).encode(PROBES)
    code = (
        "import sys, json; sys.modules['cselab'] = None\n"  # any `import cselab` now fails
        "from sentence_transformers import SentenceTransformer\n"
        f"m = SentenceTransformer({str(out)!r}, device='cpu', trust_remote_code=True)\n"
        f"print(json.dumps(m.encode({PROBES!r}).tolist()))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    assert float((got - expected).abs().max()) < TOL
    assert main([ckpt, str(out)]) == 2  # exists: refused without --overwrite
    assert main([ckpt, str(out), "--overwrite", "--no-verify"]) == 0
    assert main([ckpt, str(tmp_path / "new" / "nested"), "--no-verify"]) == 0  # parents created
    assert sorted(p.name for p in tmp_path.iterdir() if "export" in p.name) == []  # no staging folder left


def test_whitened_export_checks_like_with_like_and_the_card_says_what(make_method, tmp_path, capsys):
    """Issue #40: a whitening kernel fitted on few sentences has huge singular values, so two encodings of the same
    sentence padded differently (batches of 4 vs the default) differed by ~4e-3 after whitening and the export
    exited 1 ("max abs difference ... > 1e-5", "st_module ... for None").  The check encodes each probe sentence alone
    on both sides; the CLI names the whitening module; the card and cselab_export.json record the check."""
    from cselab.model.whitening import Whitening

    method = make_method("simcse", "bert", pooler="avg")
    words = sorted(set(" ".join(TRAIN + PROBES).lower().replace(".", "").replace("?", "").split()))
    draw = random.Random(0)
    corpus = [" ".join(draw.choice(words) for _ in range(draw.randint(3, 12))) for _ in range(40)]
    ckpt = _checkpoint(method, tmp_path)
    whitening = Whitening.fit(cselab.load(ckpt).encode(corpus))  # fitted on the trained model, as a run does
    assert float(torch.linalg.svdvals(whitening.kernel)[0]) > 1e4  # ill-conditioned: it amplifies rounding
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    saved["state_dict"].update({f"model.whitening.{k}": v for k, v in whitening.state_dict().items()})
    torch.save(saved, ckpt)
    assert cselab.load(ckpt).model.whitening is not None
    out = tmp_path / "st"
    assert main([ckpt, str(out)]) == 0
    printed, err = capsys.readouterr()
    result = json.loads(printed)
    assert result["check"] == {"sentences": 6, "batch_size": 1, "max_abs_diff": result["max_abs_diff"],
                               "tolerance": TOL, "passed": True}
    assert "for None" not in err and "st_module.CselabWhitening (trust_remote_code=True)" in err
    card = (out / "README.md").read_text()
    assert "## Export check" in card and "6 probe sentences, each encoded alone" in card
    assert "within the tolerance 1e-05" in card
    assert json.loads((out / "cselab_export.json").read_text())["check"]["passed"] is True
    loaded = SentenceTransformer(str(out), device="cpu", trust_remote_code=True)
    single = torch.cat([loaded.encode([s], convert_to_tensor=True).float().cpu() for s in PROBES])
    assert float((single - cselab.load(ckpt).encode(PROBES, batch_size=1)).abs().max()) <= TOL
