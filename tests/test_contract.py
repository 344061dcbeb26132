"""One contract for every registered method (issue #43, item 3).

The rows are the registry's methods (:func:`cselab.methods.registry.known_methods`), each on its own default config
(``conf/method/<name>.yaml``) on a tiny random model, plus :data:`VARIANTS` (settings whose code paths differ).  A
method registered tomorrow gets a row by registering; without an entry in :data:`DEFAULTS` (its setting, backbone
family and the inputs it needs) that row FAILS, it is not skipped.  The contracts:

1. every trainable parameter gets a gradient from one training step (what lets ``trainer=ddp`` be plain ``ddp``);
2. the cached step (``trainer.cached_step.chunk_size``) gives the uncached step's loss and gradients;
3. ``cselab.load`` of the run's checkpoint and its sentence-transformers export embed as the trained model's
   ``encode``;
4. a run stopped by SIGTERM mid-epoch (``last.ckpt``) and resumed with the same command ends bit for bit where the
   uninterrupted run ends;
5. the compiled step (dynamo, ``eager`` backend) gives the eager step's loss and gradients, uncached and cached; with
   inductor (the default backend: its kernels, the tracing settings and the QKV fusion) too, every dropout off;
6. no host sync on a training step that neither logs nor validates (``tests/sync_probe.py``), eager and compiled
   with what a GPU changes in a run stood in for (:data:`GPU_SETTINGS`);
7. the non-finite policy: ``stop`` raises with the batch saved, ``skip`` trains on without applying a step;

and two more of the training step that every method shares: the bf16-autocast step is close to float32 with finite
gradients, and activation checkpointing gives the same loss and gradients.

The step contracts (1, 2, 5, 7, bf16, activation checkpointing) take the method as a run builds it (:class:`RunSpec`, ``build_run_method``) and its
first training batch from the run's own DataModule inside a Lightning fit (so each method's hooks ran: RankCSE's
teachers loaded, ESimCSE's repetitions drawn, SNCSE's soft negatives joined); the run contracts (3, 4, 6) share one
short in-process run per row (``cselab.run.flow.run``), observed by :class:`tests.contract_probe.ContractProbe`.
A method that trains nothing (``method.train=false``: ``baseline``) holds all but 3 because its run has no
training step (asserted) and is exported as it is built.
"""

from __future__ import annotations

import copy
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import pytest
import torch
import torch._dynamo
from hydra import compose, initialize_config_dir

import cselab
import cselab.io.config  # noqa: F401  (resolvers)
from cselab.methods.cached_step import CachedStep
from cselab.methods.compiled import CompileOptions, compile_report, compile_training
from cselab.methods.nonfinite import NonFiniteLossError
from cselab.methods.registry import known_methods
from cselab.model.spec import ConfigError
from cselab.run import assemble
from cselab.run.flow import run
from cselab.run.signals import StoppedBySignal
from cselab.run.spec import RunSpec
from tests.conftest import SENTENCES, loss_and_grads, make_short_stsb_data_dir, no_dropout
from tests.contract_probe import PROBES, ContractProbe
from tests.sync_probe import count_cuda_syncs

CONF = str(Path(__file__).resolve().parents[1] / "conf")


@dataclass(frozen=True)
class Row:
    """One row of the matrix: ``method=<method> setting=<setting>`` on the tiny ``family`` backbone (``bert``: the
    tiny masked LM, so MLM heads and DiffCSE's generator exist; ``decoder``: the tiny OPT), with ``overrides`` and
    the extra inputs named in ``needs`` (attributes of :class:`Inputs`)."""

    method: str
    setting: str = "unsup"
    family: str = "bert"
    overrides: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()


#: every registered method's own row: its default config, and the inputs it cannot run without
DEFAULTS: dict[str, Row] = {
    "baseline": Row("baseline"),
    "cot_bert": Row("cot_bert"),
    "dcpcse": Row("dcpcse"),
    "diffcse": Row("diffcse", overrides=("method.rtd.generator=backbone",)),  # the tiny MLM as generator
    "esimcse": Row("esimcse"),
    "optiprompt": Row("optiprompt"),
    "promcse": Row("promcse", setting="sup"),
    "promptbert": Row("promptbert"),
    "prompteol": Row("prompteol", setting="sup", family="decoder", overrides=("tuning.r=4",)),
    "rankcse": Row("rankcse", needs=("teachers",)),
    "scpcse": Row("scpcse"),
    "simcse": Row("simcse"),
    "sncse": Row("sncse", needs=("soft_negatives",)),
}

#: settings of a method whose code paths differ from its default row's
VARIANTS: dict[str, Row] = {
    "simcse_sup": Row("simcse", setting="sup"),  # hard negatives: 3 views
    "simcse_cls_no_head": Row("simcse", overrides=("method.pooler=cls", "method.head=none")),  # the BERT pooler
    "simcse_loss_groups": Row("simcse", overrides=("loss.groups=2",)),
    "promptbert_sup": Row("promptbert", setting="sup"),  # template bias, head on each view
    "dcpcse_mlm": Row("dcpcse", overrides=("method.mlm=${method.mlm_config}",)),  # prefix + auxiliary MLM
    "promcse_energy_hinge": Row("promcse", setting="sup", overrides=("loss=infonce_eh",)),
    "promcse_input_layer": Row("promcse", setting="sup", overrides=("loss=infonce_eh", "tuning.variant=input_layer")),
    "rankcse_listmle": Row("rankcse", overrides=("loss=rankcse_listmle",), needs=("teachers",)),  # a permutation input
}

REGISTERED = sorted(known_methods())
#: the step contracts' rows: every registered method, then the variants
STEP_CASES = [*REGISTERED, *VARIANTS]
#: the run contracts' rows (one short run each): every registered method and the variants the sync probe needs
RUN_CASES = [*REGISTERED, "simcse_sup", "dcpcse_mlm", "promcse_energy_hinge"]
#: the sync-free contract's rows: each run row, uncached and cached (``trainer.cached_step.chunk_size=3``)
SYNC_CASES = [(case, chunk) for case in RUN_CASES for chunk in (None, 3)]
#: what a CUDA machine changes in a run, stood in for on the CPU (issue #41): bf16 autocast (``precision: auto``),
#: widths padded to a multiple of 8 (``data.pad_to_multiple_of: auto``), a loader worker (``data.num_workers: auto``),
#: the compiled step (``compile.enabled: auto``; the ``eager`` backend: dynamo's tracing and the regions' calls), the
#: fused AdamW (on CPU too).  Not stood in for: pinned memory and its copy stream, the CUDA generator's state (read
#: at checkpoints only), inductor's Triton kernels, the throughput callback's ``torch.cuda.synchronize`` (logging
#: steps only: tests/test_throughput.py) and the SDPA CUDA kernels (flash / memory-efficient attention).
GPU_SETTINGS = ("trainer.precision=bf16-mixed", "data.pad_to_multiple_of=8", "data.num_workers=1",
                "compile.enabled=true", "compile.backend=eager")
#: the compiled sync-free contract's rows: each run row uncached, and the cached step of SimCSE (unsup, sup) and
#: PromptBERT (the rows that failed on an H100, and the template's bias rows)
COMPILED_SYNC_CASES = [*((case, None) for case in RUN_CASES), ("simcse", 3), ("simcse_sup", 3), ("promptbert", 3)]
#: contract -> the rows it runs on
CONTRACTS = {"gradients": STEP_CASES, "cached_equals_uncached": STEP_CASES, "load_and_export_equal_encode": RUN_CASES,
             "resume_equals_uninterrupted": REGISTERED, "compiled_equals_eager": STEP_CASES,
             "inductor_equals_eager": STEP_CASES,
             "no_host_sync_uncached": [c for c, k in SYNC_CASES if k is None],
             "no_host_sync_cached": [c for c, k in SYNC_CASES if k],
             "no_host_sync_compiled": [c for c, _ in COMPILED_SYNC_CASES], "nonfinite_policy": REGISTERED,
             "bf16_autocast": STEP_CASES,
             "activation_checkpointing": STEP_CASES}


def row(case: str) -> Row:
    """The case's :class:`Row`; fails (does not skip) for a registered method without a :data:`DEFAULTS` entry."""
    if case in VARIANTS:
        return VARIANTS[case]
    if case not in DEFAULTS:
        pytest.fail(f"method {case!r} is registered but has no row in tests/test_contract.py DEFAULTS: add its "
                    "setting, backbone family and the inputs it needs")
    return DEFAULTS[case]


def test_the_matrix_covers_every_registered_method() -> None:
    """100 % of the registry, for each contract: the methods each contract runs on are the registered ones."""
    registered = set(known_methods())
    assert set(DEFAULTS) == registered, f"DEFAULTS: missing {registered - set(DEFAULTS)}, " \
                                        f"stale {set(DEFAULTS) - registered}"
    for contract, cases in CONTRACTS.items():
        covered = {row(c).method for c in cases}
        assert len(covered) == len(registered) and covered == registered, (contract, registered - covered)


# --------------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Inputs:
    """What the rows read: the unsupervised corpus, NLI triplets, a RankCSE teacher (a cselab model folder on the
    student's tokenizer), SNCSE's soft negatives of the corpus, a small STS-B (the runs' validation and test: the
    contracts compare runs with each other, not with published scores) and the tiny backbones."""

    corpus: Path
    nli: Path
    teachers: str
    soft_negatives: str
    data_dir: Path
    backbones: dict[str, Path]


@pytest.fixture(scope="session")
def inputs(tmp_path_factory, tiny_mlm_dir, tiny_decoder_dirs, sts_data_dir) -> Inputs:
    from cselab.methods.simcse.method import SimCSE
    from cselab.methods.sncse.negation import RuleParser, write_soft_negatives

    root = tmp_path_factory.mktemp("contract_inputs")
    words = "a man is playing the guitar cat sat on mat two dogs are running in park woman slicing onion".split()
    corpus = root / "corpus.txt"  # 40 lines of varied lengths: 10 batches of 4 an epoch
    corpus.write_text("".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 6)) + "\n"
                              for i in range(40)))
    nli = root / "nli.csv"
    nli.write_text("sent0,sent1,hard_neg\n" + "".join(f"{s},{s} today,birds fly\n" for s in SENTENCES * 4))
    soft = root / "soft_negatives.jsonl"
    write_soft_negatives(corpus, soft, RuleParser())
    sts = make_short_stsb_data_dir(sts_data_dir, root / "sts")  # STS-B's first 120 pairs: validation and test
    torch.manual_seed(7)
    teacher = SimCSE({"name_or_path": str(tiny_mlm_dir), "family": "bert"},
                     model={"pooler": "cls", "head": "mlp", "mlp_only_train": True})
    teacher.model.save(root / "teacher")
    return Inputs(corpus, nli, f"[{{path:'{root / 'teacher'}',weight:1.0}}]", str(soft), sts,
                  {"bert": tiny_mlm_dir, "decoder": tiny_decoder_dirs["opt"]})


NEEDS = {"teachers": lambda i: [f"method.teachers={i.teachers}"],
         "soft_negatives": lambda i: [f"data.soft_negatives={i.soft_negatives}"]}


def _config(case: str, inputs: Inputs, *extra: str):
    """The row's config: its method and setting on the tiny backbone, 4-example batches of the tiny corpus, 6 steps
    (a log every 3, one validation at the end: steps 0, 1, 3, 4 are quiet), lr 1e-3 (so that the weights move),
    STS-B only, the last checkpoint kept; then ``extra``."""
    r = row(case)
    data = inputs.nli if r.setting == "sup" else inputs.corpus
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[
            f"method={r.method}", f"setting={r.setting}", f"backbone.name_or_path={inputs.backbones[r.family]}",
            f"backbone.family={r.family}", f"data.path={data}", "data.batch_size=4", f"data_dir={inputs.data_dir}",
            "trainer.max_steps=6", "trainer.val_check_interval=6", "trainer.log_every_n_steps=3",
            "trainer.enable_progress_bar=false", "optim.lr=1e-3", "eval.test_tasks=[stsb]",
            "eval.bootstrap.n_resamples=100", "checkpointing.keep_last=true",
            *r.overrides, *(o for need in r.needs for o in NEEDS[need](inputs)), *extra])


# ------------------------------------------------------------------------------------- step contracts 1, 2, 5, 7


class _Grabbed(Exception):
    pass


class _GrabFirstBatch(L.Callback):
    """Keeps the first training batch (after every fit hook of the method and its DataModule ran) and stops."""

    batch: dict | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.batch = batch
        raise _Grabbed


def _trainer(root: Path, steps: int, *callbacks: L.Callback) -> L.Trainer:
    return L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                     callbacks=list(callbacks), default_root_dir=str(root))


@dataclass
class Prepared:
    """A row's method as the run builds it (``None`` batch: the run trains nothing) and its first training batch."""

    spec: RunSpec
    method: object
    batch: dict | None
    cached_refusal: str | None = None

    def fresh(self, dtype=torch.float64):
        """A copy of the method (train mode, ``dtype``) that no step has touched."""
        method = copy.deepcopy(self.method)
        return method.to(dtype).train()

    def datamodule(self, method):
        return assemble.build_datamodule(self.spec.training, method)


@pytest.fixture(scope="session")
def prepared(inputs, tmp_path_factory):
    """``prepared(case)`` -> :class:`Prepared` (built once a session)."""
    made: dict[str, Prepared] = {}

    def get(case: str) -> Prepared:
        if case not in made:
            spec = RunSpec.from_config(_config(case, inputs))
            torch.manual_seed(0)
            method = assemble.build_run_method(spec)
            batch = None
            if spec.train:
                grab = _GrabFirstBatch()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with pytest.raises(_Grabbed):
                        _trainer(tmp_path_factory.mktemp(f"grab_{case}"), 1, grab).fit(
                            method, datamodule=assemble.build_datamodule(spec.training, method))
                method._trainer = None
                batch = grab.batch
            made[case] = Prepared(spec, method, batch, _cached_refusal(case, inputs))
        return made[case]

    return get


def _cached_refusal(case: str, inputs: Inputs) -> str | None:
    """The message with which the row's config refuses ``trainer.cached_step`` (by name, before anything loads;
    e.g. DiffCSE, whose RTD loss couples the batch), or ``None`` when it takes it."""
    try:
        RunSpec.from_config(_config(case, inputs, "trainer.cached_step.chunk_size=3"))
    except ConfigError as err:
        assert "trainer.cached_step" in str(err), err
        return str(err)
    return None


def _views(batch) -> int:
    return batch["input_ids"].shape[0] * batch["input_ids"].shape[1]


def _assert_same(loss, grads, ref_loss, ref_grads, rtol: float = 1e-10) -> None:
    """Equal losses and gradients (relative to each tensor's largest entry, with a floor of 1e-3 of the largest
    gradient's), the same parameters with a gradient."""
    assert grads.keys() == ref_grads.keys(), sorted(set(grads) ^ set(ref_grads))
    assert ref_grads, "no parameter got a gradient"
    assert abs(float(loss) - float(ref_loss)) <= rtol * abs(float(ref_loss)), (float(loss), float(ref_loss))
    scale = max(float(g.abs().max()) for g in ref_grads.values())
    assert scale > 0
    for name, ref in ref_grads.items():
        err = float((grads[name] - ref).abs().max())
        assert err <= rtol * max(float(ref.abs().max()), 1e-3 * scale), f"{name}: |diff| {err:.3e}"


def _step(method, batch, seed: int = 1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return loss_and_grads(method, batch, seed)


def _trains_nothing(p: Prepared) -> bool:
    """The row's run has no training step (``method.train=false``): asserted where a contract holds for that reason."""
    if p.batch is None:
        assert not p.spec.train and p.spec.training is None
        return True
    return False


@pytest.mark.parametrize("case", STEP_CASES)
def test_every_trainable_parameter_gets_a_gradient(case, prepared) -> None:
    """Contract 1: one training step gives every trainable tensor a gradient (DDP's plain ``ddp`` fails at the
    second step on one that took no part in the loss)."""
    p = prepared(case)
    if _trains_nothing(p):
        return
    method = p.fresh(torch.float32)
    _, grads = _step(method, p.batch)
    trainable = [n for n, t in method.named_parameters() if t.requires_grad]
    assert trainable
    missing = [n for n in trainable if n not in grads]
    assert not missing, f"{case}: trainable but unused in the loss: {missing}"


@pytest.mark.parametrize("case", STEP_CASES)
def test_bf16_autocast_step_matches_float32(case, prepared) -> None:
    """The GPU training precision (bf16-mixed autocast) on CPU: the loss is float32, finite and close to the float32
    loss of the same batch and dropout masks, and every trainable gradient is finite."""
    p = prepared(case)
    if _trains_nothing(p):
        return
    loss32, _ = _step(p.fresh(torch.float32), p.batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss16, grads = _step(p.fresh(torch.float32), p.batch)
    assert loss16.dtype == torch.float32 and torch.isfinite(loss16)
    assert loss16.item() == pytest.approx(loss32.item(), rel=0.05, abs=0.05)
    bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
    assert not bad, f"non-finite bf16 gradients: {bad}"


@pytest.mark.parametrize("case", STEP_CASES)
def test_activation_checkpointing_gives_the_same_loss_and_gradients(case, prepared) -> None:
    """``activation_checkpointing=true`` recomputes each layer in the backward pass with the forward's RNG state
    (the same dropout masks): the loss and every gradient equal those without it (float64); deep prefixes refuse
    it by name."""
    p = prepared(case)
    if _trains_nothing(p):
        return
    ref_loss, ref_grads = _step(p.fresh(), p.batch)
    method = p.fresh()  # (a step changes a method's state: ESimCSE's queue)
    encoder = method.encoder
    if encoder.tuning == "prefix" and encoder.prefix_variant != "input_layer":
        with pytest.raises(ValueError, match="activation_checkpointing=true with tuning=prefix"):
            encoder.enable_activation_checkpointing()
        return
    encoder.enable_activation_checkpointing()
    base = encoder.model.get_base_model() if hasattr(encoder.model, "get_base_model") else encoder.model
    assert base.is_activation_checkpointing
    _assert_same(*_step(method, p.batch), ref_loss, ref_grads, rtol=1e-9)


@pytest.mark.parametrize("case", STEP_CASES)
def test_cached_step_equals_the_uncached_step(case, prepared) -> None:
    """Contract 2 (float64, dropout on): one chunk of all B*V rows draws the uncached step's masks, so the loss and
    every gradient equal the uncached step's to 1e-10; another seed gives another loss (the equality is about the
    same masks).  A method whose loss the chunks cannot reproduce refuses ``trainer.cached_step`` by name instead.
    Smaller chunks (masks drawn chunk by chunk): ``tests/test_cached_step.py``."""
    p = prepared(case)
    if _trains_nothing(p) or p.cached_refusal:
        return
    ref_loss, ref_grads = _step(p.fresh(), p.batch)
    assert ref_loss.dtype == torch.float64
    assert abs(float(_step(p.fresh(), p.batch, seed=2)[0]) - float(ref_loss)) > 1e-6
    cached = p.fresh()
    cached.cached_step = CachedStep(_views(p.batch))
    _assert_same(*_step(cached, p.batch), ref_loss, ref_grads)


@pytest.mark.parametrize("case", STEP_CASES)
def test_compiled_step_equals_the_eager_step(case, prepared, tmp_path, fresh_dynamo) -> None:
    """Contract 5: ``compile_training`` with dynamo's ``eager`` backend (its tracing, the same kernels) gives the
    eager step's loss and gradients (float64, the same dropout masks), uncached and cached (chunks of 3 rows); no
    graph break; deep prefixes compile the whole forward, every other backbone its repeated layer."""
    p = prepared(case)
    if _trains_nothing(p):
        return
    for chunk in (None, 3) if p.cached_refusal is None else (None,):
        eager = p.fresh()
        eager.cached_step = CachedStep(chunk) if chunk else None
        compiled = copy.deepcopy(eager)
        ref_loss, ref_grads = _step(eager, p.batch)
        scope = compile_training(compiled, CompileOptions(enabled=True, backend="eager", cache_dir=str(tmp_path)))
        prefix = compiled.encoder.tuning == "prefix" and compiled.encoder.prefix_variant != "input_layer"
        assert scope == ("forward" if prefix else "layers")
        _assert_same(*_step(compiled, p.batch), ref_loss, ref_grads, rtol=1e-9)
        report = compile_report()
        assert report["graphs"] >= 1 and report["graph_breaks"] == 0, (chunk, report)


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory) -> Path:
    """One compile cache for the inductor rows of every pytest-xdist worker of this session (the session's
    temporary root; inductor writes its entries atomically): the methods that share a backbone share its layer's
    graph."""
    from tests.conftest import session_root

    path = session_root(tmp_path_factory) / "inductor_cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.mark.xdist_group("inductor")  # one worker, one row after another: the shared cache's graphs are reused
@pytest.mark.parametrize("case", STEP_CASES)
def test_inductor_step_equals_the_eager_step(case, prepared, inductor_cache, fresh_dynamo,
                                          quick_kernel_link) -> None:
    """Contract 5 with inductor, the backend a GPU run uses (generated kernels, :func:`cselab.methods.compiled.
    use_tracing_settings` and its QKV fusion pass): float64, every dropout off (inductor draws its own random
    numbers), the eager step's loss and gradients to 1e-5 of each tensor's largest entry."""
    p = prepared(case)
    if _trains_nothing(p):
        return
    eager = p.fresh()
    no_dropout(eager)
    eager.cached_step = None
    compiled = copy.deepcopy(eager)
    ref_loss, ref_grads = _step(eager, p.batch)
    compile_training(compiled, CompileOptions(enabled=True, backend="inductor", cache_dir=str(inductor_cache)))
    _assert_same(*_step(compiled, p.batch), ref_loss, ref_grads, rtol=1e-5)


def _nan_loss(method) -> None:
    real = method.loss_fn.forward
    method.loss_fn.forward = lambda *args, **kwargs: real(*args, **kwargs) * float("nan")


@pytest.mark.parametrize("case", REGISTERED)
def test_nonfinite_policy_stops_or_skips(case, prepared, tmp_path, monkeypatch) -> None:
    """Contract 7, through a Lightning fit on the run's DataModule: a NaN loss under ``stop`` raises at its step with
    the batch's sentences saved; under ``skip`` the run trains on and no trainable weight changes (buffers that a
    method moves every step, e.g. ESimCSE's momentum encoder, are not the optimizer's update)."""
    p = prepared(case)
    if _trains_nothing(p):
        return
    monkeypatch.chdir(tmp_path)
    for policy in ("stop", "skip"):
        method = p.fresh(torch.float32)
        method.nonfinite.policy = policy
        before = {n: t.detach().clone() for n, t in method.named_parameters() if t.requires_grad}
        _nan_loss(method)
        trainer = _trainer(tmp_path / policy, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if policy == "stop":
                with pytest.raises(NonFiniteLossError, match=r"training loss is nan at step 0; the batch's "
                                                              r"sentences are in .*nonfinite_step0.json"):
                    trainer.fit(method, datamodule=p.datamodule(method))
                saved = json.loads(next(tmp_path.rglob("nonfinite_step0.json")).read_text())
                assert saved["step"] == 0 and saved["loss"] == "nan" and len(saved["sentences"]) == 4, saved
                continue
            trainer.fit(method, datamodule=p.datamodule(method))
        assert method.skipped_nonfinite >= 2 and list(tmp_path.rglob("nonfinite_step*.json"))
        changed = [n for n, t in method.named_parameters() if n in before and not torch.equal(t, before[n])]
        assert not changed, f"{case}: trained on a NaN loss: {changed[:5]}"


# ---------------------------------------------------------------------------------------- run contracts 3, 4, 6


@dataclass
class Ran:
    """A row's uninterrupted run: its spec, directory, results and probe (``None``: the run trains nothing)."""

    spec: RunSpec
    out: Path
    results: dict
    probe: ContractProbe | None


PROBE = ["+callbacks.contract_probe._target_=tests.contract_probe.ContractProbe"]
KILL = ["+callbacks.signal_probe._target_=tests.signal_probe.SignalAt", "+callbacks.signal_probe.step=3"]


def _run(cfg, out: Path) -> tuple[dict, ContractProbe | None]:
    """``cselab.run.flow.run`` in this process, ``torch.cuda.synchronize`` counted; the run's probe."""
    ContractProbe.made.clear()
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        count_cuda_syncs(patch)
        warnings.simplefilter("ignore")
        results = run(RunSpec.from_config(cfg, out), out)
    assert len(ContractProbe.made) <= 1
    return results, (ContractProbe.made[0] if ContractProbe.made else None)


@pytest.fixture(scope="session")
def ran(inputs, tmp_path_factory):
    """``ran(case, chunk=None)`` -> :class:`Ran`: the row's 6-step run (``chunk``: with
    ``trainer.cached_step.chunk_size=chunk``), once a session."""
    made: dict[tuple[str, int | None], Ran] = {}

    def get(case: str, chunk: int | None = None) -> Ran:
        if (case, chunk) not in made:
            cfg = _config(case, inputs, *PROBE, *([f"trainer.cached_step.chunk_size={chunk}"] if chunk else []))
            out = tmp_path_factory.mktemp(f"run_{case}_{chunk}") / "run"
            results, probe = _run(cfg, out)
            made[case, chunk] = Ran(RunSpec.from_config(cfg), out, results, probe)
        return made[case, chunk]

    return get


def _quiet_steps_read_nothing(windows: list[dict], label) -> list[dict]:
    """The probe's 6 windows (:class:`tests.sync_probe.SyncProbe`): at least 3 quiet ones (neither logging nor
    validating), each with ops seen and no host read nor ``torch.cuda.synchronize``; returns them."""
    quiet = [w for w in windows if not w["logging"] and not w["validated"]]
    assert len(windows) == 6 and len(quiet) >= 3, windows
    for w in quiet:
        assert w["ops"] > 0 and w["syncs"] == {} and w["cuda_syncs"] == 0, (label, w)
    return quiet


@pytest.mark.parametrize(("case", "chunk"), SYNC_CASES,
                         ids=[f"{c}-{'cached' if k else 'uncached'}" for c, k in SYNC_CASES])
def test_no_host_sync_between_logging_steps(case, chunk, ran, prepared) -> None:
    """Contract 6: from one batch start to the next, no ``.item()`` / ``nonzero`` / ``masked_select`` on a device
    tensor and no ``torch.cuda.synchronize``, on every step that neither logs nor validates (steps 0, 1, 3, 4 of 6),
    uncached and cached (chunks of 3 rows); the probe does see the reads of the logging and validating steps."""
    if chunk and prepared(case).cached_refusal:
        return  # refused by name before anything runs (contract 2)
    r = ran(case, chunk)
    if not r.spec.train:
        assert r.probe is None and r.results["global_step"] == 0  # no training step to sync in
        return
    windows = r.probe.windows
    _quiet_steps_read_nothing(windows, case)
    assert any(w["syncs"] for w in windows if w["logging"] or w["validated"]), windows


@pytest.mark.parametrize(("case", "chunk"), COMPILED_SYNC_CASES,
                         ids=[f"{c}-{'cached' if k else 'uncached'}" for c, k in COMPILED_SYNC_CASES])
def test_the_compiled_step_has_no_host_sync_with_the_gpu_settings(case, chunk, inputs, prepared, tmp_path) -> None:
    """Contract 6, compiled, with :data:`GPU_SETTINGS`: no host read on a quiet step, and the probe watched the
    compiled regions (some window compiled; the FLOP counter's first step of a batch shape runs eagerly) and no
    quiet step after the first compile recompiled.  On CUDA contract 6's own rows run these settings (the CUDA
    defaults), with inductor."""
    if torch.cuda.is_available():
        pytest.skip("on CUDA test_no_host_sync_between_logging_steps runs the compiled step with the GPU defaults")
    if chunk and prepared(case).cached_refusal:
        return  # refused by name before anything runs (contract 2)
    torch._dynamo.reset()  # compiled in this row, whatever this worker compiled before (the windows' `compiled`)
    cfg = _config(case, inputs, *PROBE, *GPU_SETTINGS, *([f"trainer.cached_step.chunk_size={chunk}"] if chunk else []))
    _, probe = _run(cfg, tmp_path / "run")
    if probe is None:  # trains nothing (baseline)
        assert not RunSpec.from_config(cfg).train
        return
    windows = probe.windows
    quiet = _quiet_steps_read_nothing(windows, (case, chunk))
    compiled = [w["compiled"] for w in windows]
    first = next((i for i, n in enumerate(compiled) if n), None)
    assert first is not None, f"{case}: no window compiled: the probe watched an eager step ({compiled})"
    assert all(w["compiled"] == 0 for w in quiet if w["step"] > first), compiled


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.float() - b.float()).abs().max())


@pytest.mark.parametrize("case", RUN_CASES)
def test_load_and_export_equal_encode(case, ran, prepared, tmp_path) -> None:
    """Contract 3: ``cselab.load(<the run's last.ckpt>)`` and ``SentenceTransformer(<its export>)`` embed the probe
    sentences as the trained model's ``encode`` did at the end of fit (1e-5), and training moved those embeddings
    (so a load that missed a trained tensor would show).  A run that trains nothing is exported as it is built."""
    from sentence_transformers import SentenceTransformer

    from cselab.export import export

    r = ran(case)
    if r.spec.train:
        ckpt = r.out / "checkpoints" / "last.ckpt"
        assert torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"] == 6
        trained = r.probe.final
        assert _max_diff(trained, r.probe.initial) > 1e-4, "training did not move the embeddings"
        assert _max_diff(cselab.load(ckpt).encode(PROBES), trained) < 1e-5
        source = str(ckpt)
    else:
        source = prepared(case).method
        trained = source.encode(PROBES)
    info = export(source, tmp_path / "st", verify=PROBES)
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=info["trust_remote_code"])
    exported = model.encode(PROBES, convert_to_tensor=True, batch_size=3).float().cpu()
    assert _max_diff(exported, trained) < 1e-5, info["modules"]
    assert _max_diff(cselab.load(tmp_path / "st").encode(PROBES), trained) < 1e-5


@pytest.mark.parametrize("case", REGISTERED)
def test_a_run_stopped_by_sigterm_resumes_to_the_uninterrupted_run(case, ran, inputs, tmp_path) -> None:
    """Contract 4: SIGTERM at the end of step 3 (mid-epoch: 10 batches an epoch) stops the run with
    ``last.ckpt`` of step 3, exit status 143 and no results; the same command resumes it, and it ends where the
    uninterrupted run ends: every tensor of the last checkpoint bit for bit (weights and optimizer state), so the
    final embeddings (1e-6), the dev curve and the test score (1e-3 points)."""
    straight = ran(case)
    if not straight.spec.train:
        assert straight.results["global_step"] == 0 and not (straight.out / "checkpoints").exists()
        return
    out = tmp_path / "run"
    with pytest.raises(StoppedBySignal) as stopped:
        _run(_config(case, inputs, *PROBE, *KILL), out)
    assert stopped.value.code == 143 and stopped.value.step == 3
    last = out / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 3
    assert not (out / "results.json").exists()
    resumed, probe = _run(_config(case, inputs, *PROBE), out)
    assert resumed["global_step"] == straight.results["global_step"] == 6
    a = torch.load(straight.out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    b = torch.load(last, map_location="cpu", weights_only=False)
    assert a["state_dict"].keys() == b["state_dict"].keys()
    moved = {k: float((a["state_dict"][k].float() - b["state_dict"][k].float()).abs().max()) for k in a["state_dict"]
             if not torch.equal(a["state_dict"][k], b["state_dict"][k])}
    assert not moved, sorted(moved.items())[:8]
    for sa, sb in zip(a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values(),
                      strict=True):
        assert all(torch.equal(sa[k], sb[k]) for k in sa), sorted(sa)
    # the same weights encode alike (PromCSE's encode differs in the last bit between two runs of one process)
    assert _max_diff(probe.final, straight.probe.final) < 1e-6
    assert resumed["test"]["stsb"] == pytest.approx(straight.results["test"]["stsb"], abs=1e-3)
    assert [p["stsb_dev"] for p in resumed["val_curve"]] == pytest.approx(
        [p["stsb_dev"] for p in straight.results["val_curve"]], abs=1e-3)
