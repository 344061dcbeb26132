"""BERT-whitening (Su et al. 2021, bojone/BERT-whitening): the fitted mean and matrix against the official numpy
functions run on fixed inputs, k truncation, the transform applied by ``encode`` at test, the state-dict /
checkpoint / export round trips, and short runs of the pipeline (tiny BERT; the embedded MiniLM in the
integration tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cselab.evaluation.whitening import (
    WhiteningFit,
    WhiteningOptions,
    is_whitening_key,
    read_sentences,
    target_sentences,
)
from cselab.model.spec import ConfigError
from cselab.model.whitening import Whitening, compute_kernel_bias
from tests import forked

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path("/work/.mirror/bojone+BERT-whitening/repo")

# bojone/BERT-whitening eng/utils.py:194-212 (commit 2bfea5a), verbatim: run below with numpy on fixed inputs
OFFICIAL_SOURCE = '''def compute_kernel_bias(vecs):
    """计算kernel和bias
    最后的变换：y = (x + bias).dot(kernel)
    """
    vecs = np.concatenate(vecs, axis=0)
    mu = vecs.mean(axis=0, keepdims=True)
    cov = np.cov(vecs.T)
    u, s, vh = np.linalg.svd(cov)
    W = np.dot(u, np.diag(1 / np.sqrt(s)))
    return W, -mu


def transform_and_normalize(vecs, kernel=None, bias=None):
    """应用变换，然后标准化
    """
    if not (kernel is None or bias is None):
        vecs = (vecs + bias).dot(kernel)
    norms = (vecs**2).sum(axis=1, keepdims=True)**0.5
    return vecs / np.clip(norms, 1e-8, np.inf)'''

#: a fixed (8, 3) input and what the official functions returned for it (numpy 2, run once; pinned here)
X = np.array([[1., 2., 0.], [2., 1., 1.], [0., 3., 1.], [4., 0., 2.], [3., 3., 0.], [1., 1., 3.], [2., 4., 1.],
              [0., 0., 0.]])
OFFICIAL_W = np.array([[-0.262211953119, -0.633244982432, -0.231538700541],
                       [0.533994487895, -0.331833168475, 0.302808779491],
                       [-0.231864572573, -0.048099971016, 0.95922560121]])
OFFICIAL_BIAS = np.array([-1.625, -1.75, -1.])
#: transform_and_normalize(X, W[:, :2], bias) (eval.py:99 then :104)
OFFICIAL_Y2 = np.array([[0.826176133205, 0.563411924726], [-0.999738589947, 0.022863765473],
                        [0.871885835997, 0.48970918818], [-0.878829017623, -0.477136833397],
                        [0.399233788396, -0.916849160006], [-0.787309147592, 0.616558436904],
                        [0.746230336896, -0.665687827961], [-0.164529916164, 0.986372093425]])


def _official():
    namespace = {"np": np}
    exec(OFFICIAL_SOURCE, namespace)  # noqa: S102 - the official functions, verbatim
    return namespace["compute_kernel_bias"], namespace["transform_and_normalize"]


def _signs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Column signs that align ``a`` to ``b`` (SVD's singular vectors are defined up to sign)."""
    return np.sign((a * b).sum(axis=0))


def test_the_transcribed_source_is_the_official_one():
    if not MIRROR.is_dir():
        pytest.skip("no local snapshot of bojone/BERT-whitening")
    import ast

    src = subprocess.check_output(["git", "--git-dir", str(MIRROR), "show", "HEAD:eng/utils.py"]).decode()
    funcs = {n.name: ast.get_source_segment(src, n) for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)}
    assert OFFICIAL_SOURCE == funcs["compute_kernel_bias"] + "\n\n\n" + funcs["transform_and_normalize"]


def test_mean_and_matrix_equal_the_official_numbers():
    compute, _ = _official()
    w, bias = compute([X[:4], X[4:]])  # eval.py passes a list of arrays (a and b sentences)
    np.testing.assert_allclose(w, OFFICIAL_W, atol=1e-10)
    np.testing.assert_allclose(bias[0], OFFICIAL_BIAS, atol=1e-12)
    kernel, mean = compute_kernel_bias(torch.tensor(X))
    assert kernel.dtype == torch.float64
    np.testing.assert_allclose(mean.numpy(), -OFFICIAL_BIAS, atol=1e-12)
    ours = kernel.numpy()
    np.testing.assert_allclose(ours * _signs(ours, OFFICIAL_W), OFFICIAL_W, atol=1e-10)


def test_random_embeddings_against_the_official_functions():
    """Anisotropic random embeddings (as BERT's): same W up to column signs, same whitened cosines, the whitened
    embeddings have the identity (unbiased) covariance."""
    compute, transform = _official()
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(200, 16, generator=g, dtype=torch.float64) @ torch.randn(16, 16, generator=g,
                                                                             dtype=torch.float64)) + 3.0
    w_off, bias_off = compute([x.numpy()])
    kernel, mean = compute_kernel_bias(x)
    np.testing.assert_allclose(kernel.numpy() * _signs(kernel.numpy(), w_off), w_off, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(-mean.numpy(), bias_off[0], atol=1e-12)
    y = (x - mean) @ kernel
    np.testing.assert_allclose(np.cov(y.numpy().T), np.eye(16), atol=1e-8)
    # the transform applied (float64 buffers): the official transform_and_normalize, up to the column signs
    whitening = Whitening(mean, kernel)
    ours = whitening(x).numpy()
    theirs = transform(x.numpy(), w_off, bias_off)
    np.testing.assert_allclose(ours * _signs(ours, theirs), theirs, atol=1e-10)
    np.testing.assert_allclose(ours @ ours.T, theirs @ theirs.T, atol=1e-10)  # cosines: sign-free


def test_k_truncation_keeps_the_first_k_columns():
    _, transform = _official()
    full = Whitening.fit(torch.tensor(X), dtype=torch.float64)
    two = Whitening.fit(torch.tensor(X), k=2, dtype=torch.float64)
    assert (two.in_features, two.out_features, full.out_features) == (3, 2, 3)
    assert torch.equal(two.kernel, full.kernel[:, :2])
    y = two(torch.tensor(X)).numpy()
    np.testing.assert_allclose(y * _signs(y, OFFICIAL_Y2), OFFICIAL_Y2, atol=1e-10)
    np.testing.assert_allclose(transform(X, OFFICIAL_W[:, :2], OFFICIAL_BIAS[None]), OFFICIAL_Y2, atol=1e-10)
    raw = Whitening.fit(torch.tensor(X), k=2, normalize=False, dtype=torch.float64)(torch.tensor(X))
    assert not torch.allclose(raw.norm(dim=1), torch.ones(8, dtype=torch.float64))  # normalize=false: not unit


def test_too_few_sentences_and_bad_options_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot whiten 3 dimensions"):
        Whitening.fit(torch.randn(3, 3))
    with pytest.raises(ValueError, match="k=5 must be in"):
        Whitening.fit(torch.randn(10, 3), k=5)
    assert WhiteningOptions.from_config(None) is None
    assert WhiteningOptions.from_config({"enabled": False, "fit_on": "nli"}) is None
    for node, key in (({"fit_on": "flow"}, "fit_on"), ({"k": 0}, "k"), ({"n_sentences": "all"}, "n_sentences"),
                      ({"normalize": "yes"}, "normalize"), ({"kk": 3}, "unknown"), ({"fit_on": "target", "file": "x"},
                                                                                       "file")):
        with pytest.raises(ConfigError, match=key):
            WhiteningOptions.from_config({"enabled": True, **node})
    with pytest.raises(ConfigError, match=r"eval.whitening.n_sentences=8 cannot whiten k=8 .* n_sentences >= 9"):
        WhiteningOptions.from_config({"n_sentences": 8, "k": 8})  # the fit's rank rule, before training
    assert WhiteningOptions.from_config({"n_sentences": 9, "k": 8}).k == 8
    (tmp_path / "bad.csv").write_text("a,b\nx,y\n")
    with pytest.raises(ConfigError, match="no sentence column"):
        read_sentences(tmp_path / "bad.csv")
    with pytest.raises(FileNotFoundError, match="eval.whitening.file"):
        read_sentences(tmp_path / "missing.txt")


def test_corpora(tmp_path, sts_data_dir):
    (tmp_path / "nli.csv").write_text('sent0,sent1,hard_neg\n"a, b",c,d\ne,f,g\n')
    assert read_sentences(tmp_path / "nli.csv") == ["a, b", "c", "d", "e", "f", "g"]
    (tmp_path / "mnli.tsv").write_text("index\tsentence1\tsentence2\tgold_label\n0\tp \"q\tr\tneutral\n")
    assert read_sentences(tmp_path / "mnli.tsv") == ['p "q', "r"]
    target = target_sentences(sts_data_dir, ["stsb"])
    from cselab.data.sts import load_task, task_splits

    pairs = sum(len(p) for s in task_splits("stsb") for p in load_task(sts_data_dir, "stsb", s).values())
    assert len(target) == 2 * pairs and len(task_splits("stsb")) == 3  # train, dev and test, as eval.py:25-30
    options = WhiteningOptions(fit_on="wiki", file=str(tmp_path / "nli.csv"), n_sentences=4)
    assert WhiteningFit(options, tmp_path, ["stsb"]).corpus() == ["a, b", "c", "d", "e"]


SENTENCES = ["a man is playing a guitar", "the cat sat on the mat", "two dogs run in the park", "birds fly",
             "a woman is slicing an onion", "the sun is shining"]


def _corpus(tmp_path: Path, n: int = 80) -> Path:
    words = ["man", "woman", "cat", "dog", "guitar", "park", "sun", "onion", "plays", "runs", "sat", "the", "a"]
    rng = np.random.default_rng(0)
    path = tmp_path / "corpus.txt"
    path.write_text("".join(" ".join(rng.choice(words, size=6)) + "\n" for _ in range(n)))
    return path


def _fit(method, tmp_path, **options):
    fit = WhiteningFit(WhiteningOptions(fit_on="wiki", file=str(_corpus(tmp_path)), **options), tmp_path, [])
    return fit(method)


def test_encode_at_test_equals_the_transform_of_the_raw_embeddings(make_method, tmp_path):
    method = make_method("simcse", "bert", pooler="cls", head="mlp", mlp_only_train=False)
    raw_test, raw_dev = method.encode(SENTENCES), method.encode(SENTENCES, encoder="dev")
    corpus = read_sentences(_corpus(tmp_path))
    whitening = _fit(method, tmp_path, k=8)
    reference = Whitening.fit(_raw(method, corpus), k=8)  # the same fit on the raw test embeddings
    assert torch.equal(whitening.kernel, reference.kernel) and torch.equal(whitening.mean, reference.mean)
    expected = reference(raw_test)
    out = method.encode(SENTENCES)
    assert out.shape == (len(SENTENCES), 8)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(len(SENTENCES)))
    assert torch.equal(method.encode(SENTENCES, encoder="dev"), raw_dev)  # validation is never whitened
    method.train()
    batch = method.model.collate("test")(SENTENCES)
    assert method.model(batch).shape[-1] == 32  # the training forward neither
    assert method.describe()["whitening"] == {"dim": 32, "k": 8, "normalize": True}


def _raw(method, sentences):
    kept = method.model.whitening
    method.model.set_whitening(None)
    try:
        return method.encode(sentences)
    finally:
        method.model.set_whitening(kept)


def test_state_dict_and_saved_model_round_trip(make_method, tmp_path):
    from cselab.model.embedding import EmbeddingModel

    method = make_method("simcse", "bert", pooler="avg")
    _fit(method, tmp_path, k=5, normalize=False)
    state = method.state_dict()
    assert sorted(k for k in state if is_whitening_key(k)) == [
        "model.whitening.kernel", "model.whitening.mean", "model.whitening.normalized"]
    other = make_method("simcse", "bert", pooler="avg")
    other.load_state_dict(state)  # strict: the keys install the transform with their shapes
    assert other.model.whitening.out_features == 5 and not other.model.whitening.normalize
    torch.testing.assert_close(other.encode(SENTENCES), method.encode(SENTENCES))
    method.model.save(tmp_path / "saved")
    loaded = EmbeddingModel.load(tmp_path / "saved")
    torch.testing.assert_close(loaded.encode(SENTENCES), method.encode(SENTENCES))
    plain = make_method("simcse", "bert", pooler="avg").state_dict()
    other.load_state_dict(plain)  # a state without whitening: the loaded model is unwhitened
    assert other.model.whitening is None


@pytest.mark.parametrize("pooler,prompt", [("avg", None), ("mask", "promptbert")])
def test_export_ships_the_whitening_module(make_method, tmp_path, pooler, prompt):
    from cselab.export import WHITENING_TYPE, export
    from cselab.methods.exported import describe_folder, load_exported

    method = make_method("promptbert" if prompt else "simcse", "bert", pooler=pooler, prompt=prompt)
    _fit(method, tmp_path, k=6)
    result = export(method, tmp_path / "out")
    assert result["max_abs_diff"] < 1e-5 and result["trust_remote_code"]
    assert (result["st_module_reason"] is None) == (prompt is None)  # plain Transformer + Pooling, or st_module
    modules = json.loads((tmp_path / "out" / "modules.json").read_text())
    assert modules[-1]["type"] == WHITENING_TYPE
    assert describe_folder(tmp_path / "out")["whitening"] == {"dim": 32, "k": 6, "normalize": True}
    torch.testing.assert_close(load_exported(tmp_path / "out").encode(SENTENCES), method.encode(SENTENCES),
                               atol=1e-5, rtol=1e-5)
    assert "BERT-whitening" in (tmp_path / "out" / "README.md").read_text()


def test_token_representations_are_refused(tmp_path):
    from cselab.evaluation.whitening import embedding_model_of

    with pytest.raises(ConfigError, match="eval.whitening needs the embedding model"):
        embedding_model_of(object())


# ------------------------------------------------------------------------------------------ the pipeline

def test_whitened_baseline_run_checkpoint_and_export_score_the_same(tmp_path, tiny_bert_dir, sts_data_dir):
    """method=baseline + whitening (fit_on=target): the run's checkpoint (best-step0.ckpt) and its export score
    what the run scored."""
    import cselab
    from cselab.evaluation.callback import STSCallback
    from cselab.export import export
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "method=baseline", "method.pooler=avg_first_last",
                           "eval.test_tasks=[stsb]", "eval.whitening.enabled=true", "eval.whitening.fit_on=target",
                           "eval.whitening.k=16")
    results = run(cfg, tmp_path / "run")
    ckpt = tmp_path / "run" / "checkpoints" / "best-step0.ckpt"
    assert ckpt.is_file()
    loaded = cselab.load(tmp_path / "run")
    assert loaded.model.whitening.out_features == 16
    assert loaded.encode(SENTENCES).shape == (len(SENTENCES), 16)
    export(str(ckpt), tmp_path / "out")
    sts = STSCallback(str(sts_data_dir), test_tasks=["stsb"])
    for model in (loaded, cselab.load(tmp_path / "out")):
        sts.evaluate_encoder(model)
        assert sts.test_scores["stsb"] == pytest.approx(results["test"]["stsb"], abs=1e-3)
    unwhitened = run(compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "method=baseline",
                                      "method.pooler=avg_first_last", "eval.test_tasks=[stsb]"), tmp_path / "raw")
    assert unwhitened["test"]["stsb"] != pytest.approx(results["test"]["stsb"], abs=1e-3)
    assert not (tmp_path / "raw" / "checkpoints").exists()


def test_whitened_simcse_run_writes_the_whitening_into_its_best_checkpoint(tmp_path, tiny_bert_dir, sts_data_dir):
    import cselab
    from cselab.evaluation.callback import STSCallback
    from tests.conftest import compose_tiny_run, run

    corpus = _corpus(tmp_path, n=60)
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                           "eval.whitening.enabled=true", "eval.whitening.fit_on=wiki",
                           f"eval.whitening.file={corpus}")
    results = run(cfg, tmp_path / "run")
    best = torch.load(results["best_checkpoint"], map_location="cpu", weights_only=False)
    assert best["state_dict"]["model.whitening.kernel"].shape == (32, 32)
    # the dev score stays the one the checkpoint was selected on (the dev encoder is not whitened)
    assert results["dev"]["stsb"] == pytest.approx(results["best_dev"], abs=1e-3)
    sts = STSCallback(str(sts_data_dir), test_tasks=["stsb"])
    sts.evaluate_encoder(cselab.load(results["best_checkpoint"]), dev_encoder="dev")
    assert sts.test_scores["stsb"] == pytest.approx(results["test"]["stsb"], abs=1e-3)


def test_a_k_above_the_embedding_width_is_refused_before_the_first_step(tmp_path, tiny_bert_dir, sts_data_dir):
    """eval.whitening.k > D was refused by the fit, after the whole training; the STS callback now refuses it at
    fit start (the run's one line, with failed.json), before any step."""
    from cselab.model.spec import ConfigError
    from tests.conftest import compose_tiny_run, run

    corpus = _corpus(tmp_path, n=60)
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                           "eval.whitening.enabled=true", "eval.whitening.fit_on=wiki", "eval.whitening.k=33",
                           f"eval.whitening.file={corpus}")
    with pytest.raises(ConfigError, match=r"eval.whitening.k=33: this model's embeddings are 32-d, so k <= 32"):
        run(cfg, tmp_path / "run")
    assert not list((tmp_path / "run").rglob("*.ckpt"))  # no step was taken


def test_too_few_sentences_for_all_dimensions_is_refused_before_the_first_step(tiny_bert_dir):
    """k null keeps all D dimensions: n_sentences < D + 1 was refused by the fit after training; the model's D is
    known at fit start, where :meth:`WhiteningFit.check` refuses it (as k > D above)."""
    import cselab

    model = cselab.load(tiny_bert_dir)
    fit = lambda **o: WhiteningFit(WhiteningOptions(fit_on="wiki", **o), ".", ["stsb"])  # noqa: E731
    with pytest.raises(ConfigError, match=r"eval.whitening.n_sentences=32 cannot whiten all 32 dimensions"):
        fit(n_sentences=32).check(model)
    fit(n_sentences=33).check(model)
    fit(n_sentences=32, k=31).check(model)


# ------------------------------------------------------------------------------------------ the embedded MiniLM

@pytest.mark.integration
def test_minilm_baseline_and_simcse_with_whitening_and_compare(tmp_path, short_stsb_data_dir):
    """The embedded MiniLM: method=baseline (first-last avg) + whitening on 1,000 wiki-sample sentences, a 4-step
    SimCSE + whitening, then ``cselab compare`` of the two runs (STS-B only, its first 120 pairs, to stay short)."""
    common = ["eval.whitening.enabled=true", "eval.whitening.fit_on=wiki", "eval.whitening.n_sentences=1000",
              "eval.test_tasks=[stsb]", f"data_dir={short_stsb_data_dir}"]
    from tests.conftest import run_py

    base = run_py(tmp_path / "base", "method=baseline", "method.pooler=avg_first_last", *common)
    simcse = run_py(tmp_path / "simcse", "method=simcse", "trainer.max_steps=4", "trainer.val_check_interval=4",
                    "data.batch_size=16", *common)
    assert base["config"]["eval"]["whitening"]["enabled"]
    assert (tmp_path / "base" / "checkpoints" / "best-step0.ckpt").is_file()
    best = torch.load(simcse["best_checkpoint"], map_location="cpu", weights_only=False)
    assert best["state_dict"]["model.whitening.kernel"].shape == (384, 384)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    proc = forked.run([sys.executable, "-m", "cselab", "compare", str(tmp_path / "simcse"), str(tmp_path / "base")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| STS-B |" in proc.stdout


@pytest.mark.parametrize("experiment,backbone,avg", [("whitening/unsup_bert_base", "bert_base", 66.28),
                                                     ("whitening/unsup_roberta_base", "roberta_base", 61.73)])
def test_the_experiments_map_to_their_published_rows(experiment, backbone, avg):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import cselab.io.config  # noqa: F401  (resolvers)
    from cselab.report.published import load_published, lookup, variant_of

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={experiment}"])
        simcse = compose("config", overrides=["experiment=simcse/unsup_bert_base", "eval.whitening.enabled=true"])
    config = OmegaConf.to_container(cfg, resolve=True)
    assert (config["method"]["pooler"], config["eval"]["max_seq_len"]) == ("avg_first_last", 64)
    assert variant_of(config) == "first-last avg. (layer 1) + whitening (NLI)"
    row = lookup(load_published(), "baseline", backbone, "unsup", variant_of(config))
    assert row is not None and row.scores["avg"] == avg
    assert variant_of(OmegaConf.to_container(simcse, resolve=True)) == "whitening (target)"  # the default corpus
    assert variant_of({**config, "eval": {"whitening": {**config["eval"]["whitening"], "k": 256}}}).endswith(
        "whitening (NLI), k=256")


def test_a_frozen_backbone_checkpoint_keeps_the_whitening(make_method, tmp_path):
    """A frozen backbone's checkpoint keeps only the trained tensors -- and the whitening buffers."""
    method = make_method("baseline", "bert", pooler="avg", tuning={"name": "frozen"})
    _fit(method, tmp_path, k=4)
    ckpt = {"state_dict": method.state_dict()}
    method.on_save_checkpoint(ckpt)
    kept = set(ckpt["state_dict"])
    assert {"model.whitening.kernel", "model.whitening.mean", "model.whitening.normalized"} <= kept
    assert not any(k.startswith("model.backbone.") for k in kept)
