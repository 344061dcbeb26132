"""Shared fixtures: tiny random BERT / RoBERTa backbones saved to disk, and method builders.

Everything is built here from configs (no network, no real weights):

* ``tiny_bert_dir``: a 2-layer, 32-wide ``BertModel`` with a WordPiece ``BertTokenizerFast`` over a small
  uncased vocabulary (letters and ``##`` letters included, so no word of the tests becomes ``[UNK]``);
* ``tiny_roberta_dir``: a 2-layer, 32-wide ``RobertaModel`` with a byte-level BPE tokenizer trained here on a
  small corpus, saved so that ``AutoTokenizer`` returns a RoBERTa tokenizer whose ``<mask>`` has
  ``lstrip=True`` (as ``roberta-base``).

Both folders load with :func:`cselab.model.loading.load_backbone`.
"""

from __future__ import annotations

import copy
import os
import string
from pathlib import Path

import pytest
import torch

# The models here are tiny: intra-op threading only adds overhead (up to ~100x per forward on small CPU boxes).
torch.set_num_threads(1)

# pytest-xdist runs one worker per core: the processes a test starts (run.py as a user runs it) get their worker's
# share of the cores, not every core each.  Two concurrent MiniLM evaluations on this 2-core box took 110 s with two
# threads each and 82 s with one (docs/testing.md).  An OMP_NUM_THREADS of the caller's is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _CORES // _WORKERS)))

# ------------------------------------------------------------------------------------------ test text

#: sentences used across the tests (every word is in the BERT vocabulary and the RoBERTa corpus)
SENTENCES = [
    "a man is playing a guitar",
    "the cat sat on the mat",
    "two dogs are running in the park",
    "a woman is slicing an onion",
    "it is raining today",
    "cat and the cat",
    "the dog ran",
    "a cat sat",
    "birds fly",
]

_TEMPLATE_WORDS = (
    "this sentence of means the : so it can be summarized as does not cannot mean , . \" ' ? !"
).split()

_WORDS = sorted(
    {w for s in SENTENCES for w in s.split()}
    | set(_TEMPLATE_WORDS)
    | set(
        """
        a an and are as at be because but by can could day did do does dog dogs down each even for from good
        had has have he her here him his how if in into is it its just know like little long look made make
        many may me more most much my new no not now of off old on one only or other our out over people
        said same see she should so some such take than that the their them then there these they thing
        think this those three through time to too two up us very was water way we well were what when where
        which while who why will with woman women work would year you your man men boy girl child children
        guitar piano playing plays play sings singing dance dancing running runs run ran walking walks
        eating eats food onion slicing slices cutting cuts cat cats sat sitting mat park street car cars
        bike riding rides horse raining rain today tomorrow sun sunny bird birds fly flying flies sky blue
        red green big small happy sad house tree trees river sea beach ball game team player match
        sentence sentences word words means mean meaning summarized summary cannot different similar
        """.split()
    )
)
_SUBWORDS = ["##s", "##ing", "##ed", "##er", "##ly", "##es", "##est", "##y"]

#: the BERT vocabulary: specials at the BERT ids (pad 0, unk 1, cls 2, sep 3, mask 4), punctuation, words,
#: subwords, then single letters / digits and their ``##`` forms so every lowercase word can be tokenized
BERT_VOCAB = list(
    dict.fromkeys(
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        + list(".,:\"'?!;-()")
        + _WORDS
        + _SUBWORDS
        + list(string.ascii_lowercase + string.digits)
        + [f"##{c}" for c in string.ascii_lowercase + string.digits]
    )
)

#: PromptBERT's prompt config as ``conf/prompt/promptbert.yaml`` (official mini-language)
PROMPTBERT_PROMPT = {
    "name": "promptbert",
    "templates": {
        "bert": {
            "view1": '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*',
            "view2": '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*',
        },
        "roberta": {
            "view1": "*cls*_This_sentence_:_'*sent_0*'_means*mask*.*sep+*",
            "view2": "*cls*_The_sentence_:_'*sent_0*'_means*mask*.*sep+*",
        },
    },
    "train_views": ["view1", "view2"],
    "sup_view": "view1",
    "eval_view": "view1",
    "mask_index": -1,
    "add_period_at_eval": True,
}

_ROBERTA_CORPUS = [
    *SENTENCES,
    *(s.capitalize() for s in SENTENCES),
    "This sentence : 'a cat sat' means <mask>.",
    "The sentence : 'the dog ran' means <mask>.",
    "This sentence of \"a man is playing a guitar\" means <mask>.",
    "so it can be summarized as <mask> .",
    "it does not mean that, so it cannot be summarized as this",
    "cat sat on the mat and the cat ran to the park",
    "In This sentence the cat is This cat, The cat and The dog.",
    "Is it raining? Yes! It is.",
    "man woman dogs birds fly guitar onion slicing playing running today",
]


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(autouse=True)
def no_leaked_dispatch_mode():
    """Every test leaves the process's dispatch-mode stack as it found it.  A ``TorchDispatchMode`` left entered
    (a probe whose run stopped by a signal before ``on_train_end``) runs its Python on every later op of the
    pytest-xdist worker: the tests after it ran 5-25x slower, and nothing failed.  Now the test that leaks fails
    at teardown, naming the modes, and they are left here so that the next tests run as they should."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    before = len(_get_current_dispatch_mode_stack())
    yield
    left = _get_current_dispatch_mode_stack()[before:]
    for _ in left:
        _pop_mode()
    assert not left, f"the test left {len(left)} dispatch mode(s) entered: {[type(m).__name__ for m in left]}"


@pytest.fixture
def fresh_dynamo(monkeypatch, tmp_path):
    """dynamo's caches and counters cleared (a frame skipped by another test stays skipped otherwise), before and
    after the test, and ``TORCHINDUCTOR_CACHE_DIR`` restored after it (``compile_training`` sets it; a folder under
    the test's ``tmp_path`` until then, never the working directory)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "unused_cache"))
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def quick_kernel_link():
    """Inductor's C++ kernels (its CPU backend's) built without linking libtorch, for the test: a kernel's few torch
    symbols resolve in the process that loads it, which has torch loaded (``aot_inductor.link_libtorch``, the flag
    AOTInductor's packages use; the generated code is the same, only g++'s link line changes).  g++ takes about 2.2 s
    per kernel on the 2-core machine, 0.75 s of it linking libtorch: the inductor contract rows of cot_bert and
    rankcse_listmle compiled cold in 62 s instead of 78 s.  A user's compiled run keeps inductor's defaults."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"aot_inductor.link_libtorch": False}):
        yield


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random BERT (model + WordPiece tokenizer)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    d = tmp_path_factory.mktemp("tiny_bert")
    assert len(set(BERT_VOCAB)) == len(BERT_VOCAB), "duplicate vocabulary entries"
    (d / "vocab.txt").write_text("\n".join(BERT_VOCAB) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(d / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(d)
    torch.manual_seed(1234)
    config = BertConfig(
        vocab_size=len(BERT_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny random RoBERTa (model + byte-level BPE tokenizer trained on a small corpus)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AddedToken, RobertaConfig, RobertaModel, RobertaTokenizer

    d = tmp_path_factory.mktemp("tiny_roberta")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        _ROBERTA_CORPUS * 4,
        vocab_size=600,
        min_frequency=1,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        show_progress=False,
    )
    raw = d / "bpe"
    raw.mkdir()
    bpe.save_model(str(raw))
    mask = AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)
    tokenizer = RobertaTokenizer(vocab=str(raw / "vocab.json"), merges=str(raw / "merges.txt"), mask_token=mask)
    tokenizer.save_pretrained(d)
    torch.manual_seed(4321)
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    RobertaModel(config).save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def backbone_dirs(tiny_bert_dir: Path, tiny_roberta_dir: Path) -> dict[str, Path]:
    """``{"bert": tiny_bert_dir, "roberta": tiny_roberta_dir}``."""
    return {"bert": tiny_bert_dir, "roberta": tiny_roberta_dir}


@pytest.fixture(scope="session")
def bert_tokenizer(tiny_bert_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_bert_dir))


@pytest.fixture(scope="session")
def roberta_tokenizer(tiny_roberta_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_roberta_dir))


@pytest.fixture
def make_method(backbone_dirs: dict[str, Path]):
    """Factory: ``make_method("promptbert", "bert", pooler="mask", ...)`` -> a method on a tiny backbone.

    ``prompt="promptbert"`` (or a dict) gives :data:`PROMPTBERT_PROMPT`; the embedding settings (``pooler``,
    ``head``, ``denoise`` ...) go to the method's ``model``, ``lr`` / ``weight_decay`` / ``warmup_*`` to its
    ``optim``, other kwargs to the method.
    """
    from cselab.methods.checks import split_legacy
    from cselab.methods.registry import method_class

    def build(name: str, family: str, **kwargs):
        prompt = kwargs.pop("prompt", None)
        if prompt == "promptbert":
            prompt = copy.deepcopy(PROMPTBERT_PROMPT)
        backbone = {"name_or_path": str(backbone_dirs[family]), "family": family}
        torch.manual_seed(0)
        return method_class(name)(**split_legacy({"backbone": backbone, "prompt": prompt, **kwargs}))

    return build


@pytest.fixture
def promptbert_method(make_method):
    """``PromptBERT(pooler="mask", prompt=promptbert, denoise="position")`` on the tiny BERT."""
    return make_method("promptbert", "bert", pooler="mask", denoise="position", prompt="promptbert")


@pytest.fixture(scope="session")
def tiny_mlm_dir(tiny_bert_dir, tmp_path_factory):
    """A tiny random BertForMaskedLM (MLM head included) with the tiny BERT tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    path = tmp_path_factory.mktemp("tiny_mlm")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    BertForMaskedLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def sts_data_dir() -> Path:
    """The data directory holding ``senteval/downstream`` ($CSELAB_DATA_DIR, ./data or ../shared/data); skips
    the test when there is none (run ``make data``)."""
    root = Path(__file__).resolve().parents[1]
    for cand in (os.environ.get("CSELAB_DATA_DIR"), root / "data", root.parent / "shared" / "data"):
        if cand and (Path(cand) / "senteval" / "downstream").is_dir():
            return Path(cand).resolve()
    pytest.skip("no SentEval data (run `make data`)")


#: STS-B pairs kept in each split of :func:`short_stsb_data_dir`
SHORT_STSB_PAIRS = 120


def make_short_stsb_data_dir(real: Path, out: Path, pairs: int = SHORT_STSB_PAIRS) -> Path:
    """``out``: a data directory like ``real`` whose STS-B splits (dev, test, train) are their first ``pairs``
    pairs; every other entry (the wiki sample, the NLI head, the other STS tasks, ...) is a link to ``real``'s.
    For tests about a run rather than about the data: on the embedded MiniLM, STS-B dev and test in full are 5,460
    sentences to encode, about 45 s of one core in each run that validates and tests."""
    src, dst = real, out
    for part in ("senteval", "downstream", "STS", "STSBenchmark"):  # each level: the siblings linked, then down
        dst.mkdir(parents=True, exist_ok=True)
        for entry in src.iterdir():
            if entry.name != part:
                (dst / entry.name).symlink_to(entry.resolve())
        src, dst = src / part, dst / part
    dst.mkdir()
    for entry in src.iterdir():
        lines = entry.read_text(encoding="utf-8").splitlines(keepends=True) if entry.suffix == ".csv" else None
        if lines is None:
            (dst / entry.name).symlink_to(entry.resolve())
        else:  # sts-dev.csv, sts-test.csv, sts-train.csv
            (dst / entry.name).write_text("".join(lines[:pairs]), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def short_stsb_data_dir(tmp_path_factory: pytest.TempPathFactory, sts_data_dir: Path) -> Path:
    """:func:`sts_data_dir` with STS-B cut to its first :data:`SHORT_STSB_PAIRS` pairs of each split (the end-to-end
    runs on the embedded MiniLM that validate and test on STS-B only: the run is the subject, not the score)."""
    return make_short_stsb_data_dir(sts_data_dir, tmp_path_factory.mktemp("short_stsb_data"))


#: the short run on the embedded MiniLM that the end-to-end tests of the comparison methods share: 4 steps of 16
#: sentences of the embedded wiki sample, STS-B dev once (step 4), STS-B test
MINILM_SHORT_RUN = ["backbone=minilm_l6", "seed=7", "trainer.max_steps=4", "trainer.val_check_interval=4",
                    "data.batch_size=16", "eval.test_tasks=[stsb]", "trainer.enable_progress_bar=false"]


def run_py(run_dir: Path, *overrides: str, data_dir: Path | None = None, timeout: int = 1200) -> dict:
    """``python run.py <overrides> hydra.run.dir=<run_dir>`` as a user runs it (offline, W&B offline, the data
    under ``data_dir``); returns its results.json.  Fails the test with the run's stderr when it exits non-zero."""
    import json
    import sys

    from tests import forked

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           **({"CSELAB_DATA_DIR": str(data_dir)} if data_dir else {})}
    proc = forked.run([sys.executable, str(root / "run.py"), *overrides, f"hydra.run.dir={run_dir}"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads((run_dir / "results.json").read_text())


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test session that every pytest-xdist worker sees: the parent of the workers' temporary
    roots under xdist (``.../pytest-N``), the session's own temporary root without it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def minilm_simcse_run(tmp_path_factory: pytest.TempPathFactory, short_stsb_data_dir: Path) -> Path:
    """The folder of one SimCSE run of :data:`MINILM_SHORT_RUN`, made once per test session and shared by the
    pytest-xdist workers (a file lock in the session's temporary root): the run that the SNCSE and RankCSE
    end-to-end tests compare with on the same seed, and RankCSE's teacher."""
    from filelock import FileLock  # (a dependency of torch)

    root = session_root(tmp_path_factory)
    out = root / "minilm_simcse_short_run"
    with FileLock(str(root / "minilm_simcse_short_run.lock")):
        if not (out / "results.json").is_file():
            run_py(out, "method=simcse", *MINILM_SHORT_RUN, data_dir=short_stsb_data_dir)
    return out


def loss_and_grads(method, batch, seed: int = 1) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One training step's loss and every parameter's gradient (``method.training_step`` outside a Trainer, the
    RNG seeded with ``seed`` first so that two calls draw the same dropout masks)."""
    import warnings

    method.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log() without a Trainer
        loss = method.training_step(batch, 0)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in method.named_parameters() if p.grad is not None}


def no_dropout(model: torch.nn.Module) -> None:
    """Every dropout of ``model`` at p = 0 (for comparisons whose two sides draw random numbers differently, e.g.
    inductor against eager): ``nn.Dropout`` modules, the float rates that functional dropouts read (BERT attention's
    ``dropout_prob``, OPT's ``dropout`` / ``attention_dropout`` / ``activation_dropout``), the configs' rates and
    a prefix's dropout draw (``Encoder.prompt_draw``)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for attr in ("dropout", "dropout_prob", "attention_dropout", "activation_dropout", "hidden_dropout"):
            if isinstance(getattr(module, attr, None), float):
                setattr(module, attr, 0.0)
        if getattr(module, "prompt_draw", None) is not None:
            module.prompt_draw.dropout = 0.0
        config = getattr(module, "config", None)
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if hasattr(config, key):
                setattr(config, key, 0.0)


def compose_tiny_run(tmp_path: Path, tiny_bert_dir: Path, sts_data_dir, *overrides: str):
    """The config of a 4-step SimCSE run on the tiny BERT and a 40-line corpus in ``tmp_path`` (validation every 2
    steps, no progress bars), with ``overrides`` after the defaults."""
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence number {i} is here\n" for i in range(40)))
    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        return compose("config", overrides=[
            "method=simcse", f"backbone.name_or_path={tiny_bert_dir}", f"data.path={corpus}", "data.batch_size=8",
            "trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.enable_progress_bar=false",
            f"data_dir={sts_data_dir}", *overrides])


# ------------------------------------------------------------------------------------------ decoder LLMs

#: the first 300 lines of the embedded wiki1m sample (data/wiki1m_sample, PROVENANCE.md), kept with the tests so
#: the tiny decoders' BPE is trained on the same text with or without `make data`
WIKI_HEAD = Path(__file__).resolve().parent / "data" / "wiki1m_head300.txt"


@pytest.fixture(scope="session")
def tiny_decoder_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random decoders (2 layers, 32 wide) with a byte-level BPE trained here on the wiki sample:
    ``{"opt": ..., "llama": ..., "qwen2": ...}`` folders (:func:`cselab.cli.tiny_decoders.build_tiny_decoder`)."""
    from cselab.cli.tiny_decoders import KINDS, build_tiny_decoder, read_corpus

    lines = read_corpus(WIKI_HEAD, limit=None)
    root = tmp_path_factory.mktemp("tiny_decoders")
    return {kind: build_tiny_decoder(kind, root / f"tiny_{kind}", lines, seed=0) for kind in KINDS}


def run(cfg, output_dir: str | Path) -> dict:
    """``run.py``'s two steps in one call: the composed config read into a :class:`cselab.run.spec.RunSpec`, then
    :func:`cselab.run.flow.run` (``results.json``'s dict)."""
    import time

    from cselab.run import flow
    from cselab.run.spec import RunSpec

    return flow.run(RunSpec.from_config(cfg, output_dir), output_dir, time.perf_counter())


def build_method(cfg, backbone: dict | None = None):
    """The composed config's method, as the run builds it (:func:`cselab.run.assemble.build_method` of its
    ``module`` node)."""
    from cselab.run import assemble
    from cselab.run.spec import module_node

    return assemble.build_method(module_node(cfg), backbone)
