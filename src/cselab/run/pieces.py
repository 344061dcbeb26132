"""The typed pieces of a run (:class:`cselab.run.spec.RunSpec` holds them): plain frozen values, each default
written once, here; :meth:`RunSpec.from_config` makes them from the config and checks their rules."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from cselab.evaluation.stats import DEFAULT_BOOTSTRAP, BootstrapOptions
from cselab.evaluation.transfer import TransferProtocol
from cselab.methods.compiled import CompileOptions


@dataclass(frozen=True)
class RunNames:
    """What the run is called: the loggers' tags and name, the console table's title."""

    method: str
    backbone: str  # backbone.name (else its name_or_path)
    name_or_path: str
    setting: str
    loss: str
    tuning: str
    prompt: str | None = None  # None: prompt=none
    variant: str | None = None


@dataclass(frozen=True)
class InputFiles:
    """Every input file of the run (``data_dir``; ``data.path`` when training: the unsup corpus or the NLI
    triplets of ``setting``), checked by :func:`cselab.run.inputs.check_inputs` before the backbone loads."""

    data_dir: str
    test_tasks: tuple[str, ...]
    dev_task: str | None
    train_path: str | None = None  # None: nothing trained
    setting: str = "unsup"
    whitening_corpus: str | None = None  # eval.whitening's corpus file (relative to data_dir); None: none read
    soft_negatives: str | None = None  # SNCSE's soft-negative file (relative to the working directory)
    teachers: tuple[str, ...] = ()  # RankCSE's method.teachers[i].path
    max_undecodable_share: float = 0.01
    max_control_share: float = 0.01
    transfer_tasks: tuple[str, ...] = ()
    transfer_mode: str = "test"


@dataclass(frozen=True)
class EvalSpec:
    """The test phase (``eval``): STS tasks and aggregation, SentEval transfer
    (``eval.transfer_mode`` -> ``transfer.<mode>``), the bootstrap intervals and the backbone the test scores
    (``module.backbone`` with ``eval.test_backbone``'s keys over it, resolved once)."""

    test_backbone: dict[str, Any]
    test_backbone_keys: dict[str, Any] | None = None  # eval.test_backbone as given (None: the trained backbone)
    aggregation: str = "all"
    batch_size: int | None = None
    transfer_tasks: tuple[str, ...] = ()
    transfer: TransferProtocol | None = None
    bootstrap: BootstrapOptions = DEFAULT_BOOTSTRAP
    reloads_backbone: bool = False  # the test backbone is not the trained one: the best tensors are reloaded on it


@dataclass(frozen=True)
class TrainSpec:
    """What only a training run has: the ``trainer`` node (without the module's ``cached_step``) and its
    resolved ``precision`` and progress bars, the ``data.datamodule`` node with its resolved ``auto`` values,
    activation checkpointing, ``torch.compile`` of the training forward, and ``checkpointing.keep_last``."""

    trainer: dict[str, Any]
    datamodule: dict[str, Any]
    precision: str = "32-true"
    progress_bar: bool = True
    num_workers: int = 0
    pad_to_multiple_of: int | None = None
    activation_checkpointing: bool = False
    compile: CompileOptions = CompileOptions()
    compiled: bool = False  # compile.enabled resolved on this machine
    keep_last: bool = True


#: DataLoader worker processes that ``data.num_workers: auto`` starts on a GPU (tokenising and collating the next
#: batches while the device runs the step); 0 on CPU, where a worker would take a core from the step itself
AUTO_WORKERS_GPU = 4
#: ``data.pad_to_multiple_of: auto`` on a GPU: widths in buckets of 8 tokens (few shapes for a compiled forward,
#: tensor-core friendly); none on CPU
AUTO_PAD_MULTIPLE_GPU = 8


def resolve_num_workers(value: int | str, cuda: bool) -> int:
    """``data.num_workers``: an int as given; ``auto`` -> :data:`AUTO_WORKERS_GPU` on a GPU (at most the CPUs but
    one), 0 on CPU.

    Raises:
        ValueError: neither ``auto`` nor an int >= 0 (names ``data.num_workers``).
    """
    if value == "auto":
        return max(0, min(AUTO_WORKERS_GPU, (os.cpu_count() or 1) - 1)) if cuda else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"data.num_workers={value!r}: expected auto or an integer >= 0")
    return value


def resolve_pad_to_multiple_of(value: int | str | None, cuda: bool) -> int | None:
    """``data.pad_to_multiple_of``: ``auto`` -> :data:`AUTO_PAD_MULTIPLE_GPU` on a GPU, None on CPU; null / an
    int >= 1 as given.

    Raises:
        ValueError: anything else (names ``data.pad_to_multiple_of``).
    """
    if value == "auto":
        return AUTO_PAD_MULTIPLE_GPU if cuda else None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"data.pad_to_multiple_of={value!r}: expected auto, null or an integer >= 1")
    return value


def resolve_precision(precision: str) -> str:
    """``auto`` -> ``bf16-mixed`` on a CUDA GPU that supports it, else ``32-true``."""
    if precision != "auto":
        return precision
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"
