"""``torch.compile`` of the training forward: token ids -> backbone (+ prompt module) -> pooling (- template bias)
-> head -> loss, as one graph (``compile.*``).

On a GPU the eager step is bound by the host: thousands of small kernels each cost 5-12 us of Python and launch
time (pytorch/pytorch#41383), longer than the device takes to run them at the batch sizes of these papers.  One
compiled graph fuses the element-wise work (LayerNorm, GELU, dropout, the loss) and launches far fewer kernels;
with ``compile.mode=reduce-overhead`` the graph is also replayed as a CUDA graph (one launch).

What is compiled: :meth:`cselab.methods.base.ContrastiveMethod.forward_loss` (the method's views embedded, the DDP
gather, the loss and the MLM auxiliary loss), through ``torch.compile`` on the bound method: no module is wrapped, so
parameter names, checkpoints and exports do not change, and evaluation (``encode``) stays eager.  Under the cached
step (``trainer.cached_step``) the backbone is compiled in place instead (``nn.Module.compile``), since the step
runs it chunk by chunk.  Widths vary from batch to batch: ``compile.dynamic=true`` traces them symbolically (one
graph for all widths), and ``data.pad_to_multiple_of`` (8 on a GPU) bounds the distinct shapes for
``dynamic=false`` and CUDA graphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from cselab.model.spec import ConfigError

ENABLED = ("auto", True, False)
#: ``torch.compile`` modes (``compile.mode``)
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class CompileOptions:
    """The ``compile`` node: ``enabled`` (``auto``: on when training on a CUDA GPU), ``backend`` (``inductor``;
    ``eager``: dynamo's tracing only, for checks), ``mode`` (:data:`MODES`), ``dynamic`` (symbolic widths).

    Raises:
        ConfigError: an unknown ``enabled`` / ``mode`` / ``backend`` (names the ``compile.*`` key).
    """

    enabled: str | bool = "auto"
    backend: str = "inductor"
    mode: str | None = None
    dynamic: bool = True

    def __post_init__(self) -> None:
        if self.enabled not in ENABLED:
            raise ConfigError(f"compile.enabled={self.enabled!r}: expected auto, true or false")
        if self.mode not in MODES:
            raise ConfigError(f"compile.mode={self.mode!r}: expected one of {[m for m in MODES if m]} or null")
        known = torch._dynamo.list_backends(exclude_tags=())
        if self.backend not in known:
            raise ConfigError(f"compile.backend={self.backend!r}: expected one of {sorted(known)}")

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> CompileOptions:
        """From the ``compile`` node (missing keys: the defaults; ``None``: disabled)."""
        if node is None:
            return cls(enabled=False)
        return cls(**{k: node[k] for k in ("enabled", "backend", "mode", "dynamic") if k in node})

    def active(self, cuda: bool, quantized: bool = False) -> bool:
        """Whether to compile: ``enabled``, with ``auto`` meaning on a CUDA device (``cuda``) and not a 4-bit
        backbone (``quantized``: bitsandbytes' kernels are opaque to dynamo; ``true`` still tries)."""
        return (cuda and not quantized) if self.enabled == "auto" else bool(self.enabled)

    def check(self, *, cuda: bool, activation_checkpointing: bool, cached_step: bool) -> None:
        """The combinations that cannot hold, refused by name: CUDA graphs (``reduce-overhead``) need a CUDA
        device, replay fixed RNG offsets (activation checkpointing recomputes dropout from a saved RNG state, which
        a replayed graph does not restore) and run one whole forward (the cached step runs the backbone in
        chunks, each with its restored generator state).

        Raises:
            ConfigError: names the keys and what to use instead.
        """
        if self.mode != "reduce-overhead" or not self.active(cuda):
            return
        if not cuda:
            raise ConfigError("compile.mode=reduce-overhead replays CUDA graphs: it needs a CUDA GPU (use "
                              "compile.mode=null on this device)")
        if activation_checkpointing:
            raise ConfigError("compile.mode=reduce-overhead with activation_checkpointing=true: the recomputed "
                              "layers restore their dropout RNG state, which a replayed CUDA graph does not; use "
                              "compile.mode=null or activation_checkpointing=false")
        if cached_step:
            raise ConfigError("compile.mode=reduce-overhead with trainer.cached_step: each chunk restores its "
                              "generator state for its second pass, which a replayed CUDA graph does not; use "
                              "compile.mode=null or trainer.cached_step.chunk_size=null")

    def kwargs(self) -> dict[str, Any]:
        """``torch.compile``'s keyword arguments."""
        out: dict[str, Any] = {"backend": self.backend, "dynamic": self.dynamic}
        if self.mode:
            out["mode"] = self.mode
        return out


def compile_training(method, options: CompileOptions) -> None:
    """Compile ``method``'s training forward (:meth:`ContrastiveMethod.forward_loss`) with ``options``; with the
    cached step, its backbone in place.  Nothing is wrapped: the state dict's keys are unchanged."""
    if method.cached_step is not None:
        method.encoder.model.compile(**options.kwargs())
        return
    method.compiled_forward_loss = torch.compile(method.forward_loss, **options.kwargs())
