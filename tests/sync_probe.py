"""A Lightning callback that counts, for each training batch, the host syncs from one batch start to the next:
``aten._local_scalar_dense`` calls (``.item()``, ``bool(tensor)``, ``if tensor:``) seen by a ``TorchDispatchMode``
outside the optimizer's own step and the DataLoader's fetch (host tensors: :func:`_host_side`), and
``torch.cuda.synchronize`` calls (:func:`count_cuda_syncs` patches it with a counter that names each caller).

Used as ``+callbacks.sync_probe._target_=tests.sync_probe.SyncProbe`` (the documented way to add a callback)."""

from __future__ import annotations

import os
import sys
from collections import Counter

import lightning as L
import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: what a host sync looks like to the dispatcher
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "_assert_async")


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()
        self.where: Counter = Counter()  # "op at file:line" of each counted op (what a failing GPU run names)
        self.seen = 0  # every op dispatched (a probe that sees none proves nothing)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """True: ``torch.compile`` compiles under this mode and runs the compiled graphs with it on (it sees their
        ATen calls, e.g. the matmuls inductor leaves to ATen, and every op of a graph break).  A mode without it
        makes dynamo skip every frame ("non-infra torch dispatch mode present"): the compiled step would run
        eagerly under the probe, and the probe would check the eager step instead of the compiled one."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen += 1
        name = func.__name__.split(".")[0]
        if name in SYNC_OPS and not _host_side():
            self.ops[name] += 1
            devices = sorted({str(a.device) for a in args if hasattr(a, "device")})
            self.where[f"{name} on {','.join(devices)} at {_caller()}"] += 1
        return func(*args, **(kwargs or {}))


def _caller() -> str:
    """The innermost Python frame outside this file and ``torch/`` (the code that asked for the read), then the
    innermost ``torch/`` frame below it, as ``path:line``."""
    frame, torch_frame = sys._getframe(2), None
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and f"{os.sep}torch{os.sep}" not in name:
            break
        if name != __file__ and torch_frame is None:
            torch_frame = frame
        frame = frame.f_back
    where = lambda f: f"{'/'.join(f.f_code.co_filename.split(os.sep)[-3:])}:{f.f_lineno}"  # noqa: E731
    return " < ".join(where(f) for f in (torch_frame, frame) if f is not None) or "?"


def count_cuda_syncs(patch) -> None:
    """Replace ``torch.cuda.synchronize`` (with ``patch``, a ``pytest.MonkeyPatch``) by a counter of its calls,
    :attr:`SyncProbe.cuda_syncs`, that records each caller (``path:line``, as the dispatch mode's ``where``) in
    :attr:`SyncProbe.cuda_where` and calls the real one when CUDA is there.  Code that bound the function before the
    patch (inductor's benchmarker, through ``torch._dynamo.device_interface``) is not counted."""
    real = torch.cuda.synchronize

    def counted(*args, **kwargs):
        SyncProbe.cuda_syncs += 1
        SyncProbe.cuda_where[_caller()] += 1
        if torch.cuda.is_available():
            real(*args, **kwargs)

    patch.setattr(torch.cuda, "synchronize", counted)


def _graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far (0 when dynamo was never imported)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    return 0 if dynamo is None else int(dynamo.counters["stats"]["unique_graphs"])


def _host_side() -> bool:
    """The call reads a host tensor, not the device: it comes from the optimizer's own step (the innermost Python
    frame outside this file is in ``torch/optim/``, e.g. the step count of the non-fused AdamW), or from the
    DataLoader fetching the next batch (the collate works on CPU tensors, in worker processes when
    ``data.num_workers`` > 0: a frame in ``torch/utils/data/``)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is not None and f"{os.sep}torch{os.sep}optim{os.sep}" in frame.f_code.co_filename:
        return True
    while frame is not None:
        if f"{os.sep}torch{os.sep}utils{os.sep}data{os.sep}" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


class SyncProbe(L.Callback):
    """``windows``: one dict per training batch: ``step`` (global step at its start), ``syncs`` (the counted ops),
    ``where`` (each counted op's devices and caller: ``op on cuda:0 at torch/file.py:N < cselab/file.py:M``),
    ``cuda_syncs`` (calls of ``torch.cuda.synchronize``, counted by :func:`count_cuda_syncs` in :attr:`cuda_syncs`),
    ``cuda_where`` (their callers), ``compiled`` (graphs dynamo compiled in the window: a compiled step's first
    call, or a recompilation; on CUDA inductor also tunes its Triton kernels there), ``validated`` (a validation ran
    in the window), ``logging`` (a logging step), ``ops`` (ops seen).

    One mode is entered at the start of training and left at its end (other modes, e.g. the FLOP counter's, nest
    inside it); a window is the difference of its counters between two batch starts."""

    #: incremented by the patched ``torch.cuda.synchronize`` (:func:`count_cuda_syncs`)
    cuda_syncs = 0
    #: ``path:line`` of each counted ``torch.cuda.synchronize`` call -> calls
    cuda_where: Counter = Counter()

    def __init__(self) -> None:
        self.windows: list[dict] = []
        self._mode: _Count | None = None
        self._start = None
        self._validated = self._logging = False

    def _snapshot(self) -> tuple:
        return (dict(self._mode.ops), self._mode.seen, SyncProbe.cuda_syncs, dict(self._mode.where),
                dict(SyncProbe.cuda_where), _graphs_compiled())

    def _close(self, trainer) -> None:
        if self._start is None:
            return
        step, (ops, seen, cuda, where, cuda_where, graphs) = self._start
        now_ops, now_seen, now_cuda, now_where, now_cuda_where, now_graphs = self._snapshot()
        since = lambda now, then: {k: v - then.get(k, 0) for k, v in now.items() if v - then.get(k, 0)}  # noqa: E731
        self.windows.append({"step": step, "syncs": since(now_ops, ops), "cuda_syncs": now_cuda - cuda,
                             "validated": self._validated, "logging": self._logging, "ops": now_seen - seen,
                             "where": since(now_where, where), "cuda_where": since(now_cuda_where, cuda_where),
                             "compiled": now_graphs - graphs})
        self._start = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._mode = _Count()
        self._mode.__enter__()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._close(trainer)
        self._start, self._validated, self._logging = (trainer.global_step, self._snapshot()), False, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        from cselab.io.progress import is_logging_step

        self._logging = is_logging_step(trainer)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._validated = True

    def on_train_end(self, trainer, pl_module) -> None:
        self._close(trainer)
        self._leave()

    def on_exception(self, trainer, pl_module, exception) -> None:
        """A run stopped in training (a signal, an error) never reaches ``on_train_end``: leave the mode here, or
        every later op of this process would go through it (the suite's tests after a stopped run ran 5-25x slower)."""
        self._leave()

    def _leave(self) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
