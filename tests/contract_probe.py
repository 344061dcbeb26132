"""The contract matrix's observer (``tests/test_contract.py``), added to a run as
``+callbacks.contract_probe._target_=tests.contract_probe.ContractProbe``: the sync probe's windows
(:class:`tests.sync_probe.SyncProbe`) plus the model's embeddings of :data:`PROBES` at fit start and fit end, so that
one short run serves the sync-free, load / export and resume contracts."""

from __future__ import annotations

import torch

from tests.sync_probe import SyncProbe

#: sentences encoded at fit start and end, and by the loaded checkpoint and the exported folder
PROBES = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park", "birds fly"]


class ContractProbe(SyncProbe):
    """:class:`SyncProbe` plus ``initial`` / ``final``: (len(PROBES), D) float32 embeddings (``encode``, the test
    encoder) at ``on_fit_start`` and ``on_fit_end``.  Each instance is appended to :attr:`made` (the test reads the
    run's probe from there)."""

    made: list[ContractProbe] = []

    def __init__(self) -> None:
        super().__init__()
        self.initial: torch.Tensor | None = None
        self.final: torch.Tensor | None = None
        ContractProbe.made.append(self)

    def on_fit_start(self, trainer, pl_module) -> None:
        self.initial = pl_module.encode(PROBES)

    def on_fit_end(self, trainer, pl_module) -> None:
        self.final = pl_module.encode(PROBES)
