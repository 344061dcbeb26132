"""``torch.compile`` of the training step (``compile.*``): the repeated transformer block compiled once and reused by
every layer, the loss in its own graph, and inductor's / AOTAutograd's on-disk caches under ``compile.cache_dir``.

On a GPU the eager step is bound by the host: thousands of small kernels each cost 5-12 us of Python and launch
time (pytorch/pytorch#41383), longer than the device takes to run them at the batch sizes of these papers.  Compiled
code fuses the element-wise work (LayerNorm, GELU, dropout, the loss) and launches far fewer kernels; with
``compile.mode=reduce-overhead`` the graphs are also replayed as CUDA graphs.

What is compiled (:func:`compile_training`), PyTorch's *regional compilation* recipe
(https://docs.pytorch.org/tutorials/recipes/regional_compilation.html): each layer of the backbone's repeated block
(:func:`repeated_layers`: BERT's ``encoder.layer``, a decoder's ``layers``) is compiled in place
(``nn.Module.compile``); the layers share their code, and dynamo passes parameters as graph inputs, so ONE graph
(forward + backward) serves all L layers: compiling a 12-layer model costs one layer's compilation, not twelve.  The
loss module (``method.loss_fn``) is its own graph.  The embeddings, pooling and head stay eager (a few dozen ops).
Nothing is wrapped: parameter names, checkpoints and exports do not change; the cached step
(``trainer.cached_step``) runs the same compiled layers chunk by chunk; evaluation (``encode``) runs them too.  A
backbone with deep prefixes (``tuning=prefix``, the key/values of every layer in a cache indexed by the layer's
number) would compile the block once per layer: there the whole training forward
(:meth:`cselab.methods.base.ContrastiveMethod.forward_loss`) is compiled instead, as one graph.

Before compiling, :func:`use_tracing_settings` makes dynamo trace each graph once (float attributes constant, no
duck sizing) and adds :class:`cselab.methods.sibling_linears.FuseSiblingLinears`, which runs the query, key and
value projections as one matmul.

Widths vary from batch to batch: ``compile.dynamic=true`` traces them symbolically (one graph for all widths), and
``data.pad_to_multiple_of`` (8 on a GPU) bounds the distinct shapes for ``dynamic=false`` and CUDA graphs.
:func:`compile_report` counts the graphs and recompilations of a run (logged once, at the end of fit; the goal is at
most :data:`MAX_RECOMPILATIONS`).

The compiled artefacts (inductor's FX graph cache, AOTAutograd's cache, Triton's kernels on a GPU) are kept on disk
under ``compile.cache_dir`` (``TORCHINDUCTOR_CACHE_DIR``; default ``~/.cache/cselab/torch_compile``): a second
process with the same model shapes and options (a sweep's next job, another seed, a resumed run) loads them
instead of compiling.  Deleting the folder only costs the next run its compilation.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cselab.model.spec import ConfigError

log = logging.getLogger(__name__)

ENABLED = ("auto", True, False)
#: ``torch.compile`` modes (``compile.mode``)
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: the recompilations a run should stay within (issue #41): more are logged as a warning, with what to change
MAX_RECOMPILATIONS = 4
#: ``compile.cache_dir`` when the config gives none (``~`` expanded)
DEFAULT_CACHE_DIR = "~/.cache/cselab/torch_compile"


@dataclass(frozen=True)
class CompileOptions:
    """The ``compile`` node: ``enabled`` (``auto``: on when training on a CUDA GPU), ``backend`` (``inductor``;
    ``eager``: dynamo's tracing only, for checks), ``mode`` (:data:`MODES`), ``dynamic`` (symbolic widths),
    ``cache_dir`` (the on-disk compile caches, :meth:`use_cache_dir`; None: :data:`DEFAULT_CACHE_DIR`).

    Raises:
        ConfigError: an unknown ``enabled`` / ``mode`` / ``backend`` (names the ``compile.*`` key).
    """

    enabled: str | bool = "auto"
    backend: str = "inductor"
    mode: str | None = None
    dynamic: bool = True
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if self.enabled not in ENABLED:
            raise ConfigError(f"compile.enabled={self.enabled!r}: expected auto, true or false")
        if self.mode not in MODES:
            raise ConfigError(f"compile.mode={self.mode!r}: expected one of {[m for m in MODES if m]} or null")
        if self.backend in ("inductor", "eager", "aot_eager"):  # known without importing dynamo (2 s)
            return
        known = torch._dynamo.list_backends(exclude_tags=())
        if self.backend not in known:
            raise ConfigError(f"compile.backend={self.backend!r}: expected one of {sorted(known)}")

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> CompileOptions:
        """From the ``compile`` node (missing keys: the defaults; ``None``: disabled)."""
        if node is None:
            return cls(enabled=False)
        return cls(**{k: node[k] for k in ("enabled", "backend", "mode", "dynamic", "cache_dir") if k in node})

    @property
    def cache_path(self) -> Path:
        """``cache_dir`` (or :data:`DEFAULT_CACHE_DIR`), ``~`` expanded, absolute."""
        return Path(os.path.expanduser(self.cache_dir or DEFAULT_CACHE_DIR)).resolve()

    def use_cache_dir(self) -> Path:
        """Point inductor's on-disk caches at :attr:`cache_path` (``TORCHINDUCTOR_CACHE_DIR``, read by
        ``torch._inductor.runtime.cache_dir_utils.cache_dir`` at each use): the FX graph cache
        (``torch._inductor.config.fx_graph_cache``), AOTAutograd's cache (``torch._functorch.config.
        enable_autograd_cache``, the backward graphs too) and, on a GPU, Triton's kernels (``<dir>/triton``, unless
        ``TRITON_CACHE_DIR`` is set); both caches are switched on (their default).  Returns the folder, created.

        Raises:
            ConfigError: the folder cannot be created (names ``compile.cache_dir``).
        """
        import torch._functorch.config
        import torch._inductor.config

        path = self.cache_path
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(f"compile.cache_dir={str(path)!r}: cannot create it ({err.strerror}); set "
                              "compile.cache_dir to a writable folder") from None
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
        torch._inductor.config.fx_graph_cache = True
        torch._functorch.config.enable_autograd_cache = True
        return path

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


def repeated_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer's repeated block: the layers of the longest ``nn.ModuleList`` in ``model`` whose entries
    are all of one class (BERT / RoBERTa ``encoder.layer``, LLaMA / Qwen2 ``layers``, OPT ``decoder.layers``,
    GPT-2 ``h``); [] when there is none."""
    best: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > len(best) and len({type(m) for m in module}) == 1:
            best = list(module)
    return best


def use_tracing_settings() -> None:
    """Dynamo's two settings for these models and the fusion pass, process-wide (all part of the compile caches'
    keys):

    * ``torch._dynamo.config.specialize_float = True``: a module's Python float attributes (dropout ``p``,
      LayerNorm ``eps``, the attention ``scaling``, the loss's temperature) are constants of the graph.  With
      ``dynamic=True`` dynamo otherwise traces them as symbolic floats, which its ``_tensorify_python_scalars`` pass
      then specialises by restarting the analysis after AOTAutograd has traced the joint graph once: the layer was
      traced twice, cold and warm (bert-base shape, this repo's 2-core CPU: 9.2 of a warm start's 13.0 s compiling;
      the cold compile 74.6 s before, 38.0 s after, with the next setting).
    * ``torch.fx.experimental._config.use_duck_shape = False``: sizes that happen to be equal (rows = width at 16
      sentences of 32 tokens; rows = hidden size, 128 on ``splade_tiny``) get symbols of their own.  Duck sizing
      gave them one, so specialising the hidden size specialised the batch too, and a batch of another size
      recompiled.
    * ``torch._inductor.config.pre_grad_custom_pass``:
      :class:`cselab.methods.sibling_linears.FuseSiblingLinears`.
    """
    import torch._dynamo.config
    import torch._inductor.config
    import torch.fx.experimental._config

    from cselab.methods.sibling_linears import FuseSiblingLinears  # (here: it imports inductor, 2 s)

    torch._dynamo.config.specialize_float = True
    torch.fx.experimental._config.use_duck_shape = False
    torch._inductor.config.pre_grad_custom_pass = FuseSiblingLinears()


def compile_training(method, options: CompileOptions) -> str:
    """Compile ``method``'s training step with ``options``, in place (nothing wrapped: the state dict's keys are
    unchanged), after pointing the on-disk caches at ``compile.cache_dir`` (:meth:`CompileOptions.use_cache_dir`) and
    setting :func:`use_tracing_settings`:
    regionally (each layer of :func:`repeated_layers` and the loss module, ``nn.Module.compile``), or, for a
    backbone with deep prefixes or without a repeated block, the whole training forward (:meth:`forward_loss`,
    ``method.compiled_forward_loss``).  Returns what was compiled, also kept as ``method.compile_scope``:
    ``"layers"`` or ``"forward"``.

    Raises:
        ConfigError: ``compile.cache_dir`` cannot be created.
    """
    options.use_cache_dir()
    use_tracing_settings()
    kwargs = options.kwargs()
    encoder = method.encoder
    layers = repeated_layers(encoder.base_model)
    deep_prefix = encoder.tuning == "prefix" and encoder.prefix_variant != "input_layer"
    if deep_prefix or not layers:  # the prefix cache is indexed by layer number: one graph per layer otherwise
        if method.cached_step is not None:
            encoder.base_model.compile(**kwargs)  # the module the prefix forward calls (cselab.model.backbone)
        else:
            method.compiled_forward_loss = torch.compile(method.forward_loss, **kwargs)
        method.compile_scope = "forward"
        return method.compile_scope
    for layer in layers:
        layer.compile(**kwargs)
    method.loss_fn.compile(**kwargs)
    method.compile_scope = "layers"
    return method.compile_scope


def compile_report(regions: int = 2) -> dict[str, Any]:
    """What dynamo compiled in this process so far (``torch._dynamo.utils.counters``): ``graphs`` (distinct
    graphs), ``recompilations`` (graphs beyond the first of each of the ``regions`` compiled code objects: the
    layer and the loss, or the one forward), ``graph_breaks``, ``compile_s`` (dynamo + inductor, forward and
    backward, seconds: ``calculate_time_spent``'s ``total_wall_time``) and the on-disk caches' ``fx_cache_hits`` /
    ``fx_cache_misses`` (inductor) and ``aot_cache_hits`` / ``aot_cache_misses`` (AOTAutograd)."""
    from torch._dynamo.utils import calculate_time_spent, counters

    graphs = int(counters["stats"]["unique_graphs"])
    return {"graphs": graphs, "recompilations": max(0, graphs - regions),
            "graph_breaks": int(sum(counters["graph_break"].values())),
            "compile_s": round(float(calculate_time_spent().get("total_wall_time", 0.0)), 2),
            "fx_cache_hits": int(counters["inductor"]["fxgraph_cache_hit"]),
            "fx_cache_misses": int(counters["inductor"]["fxgraph_cache_miss"]),
            "aot_cache_hits": int(counters["aot_autograd"]["autograd_cache_hit"]),
            "aot_cache_misses": int(counters["aot_autograd"]["autograd_cache_miss"])}


def log_compile_report(scope: str, options: CompileOptions) -> dict[str, Any]:
    """Log :func:`compile_report` once (the run calls it at the end of fit), a warning when the recompilations
    exceed :data:`MAX_RECOMPILATIONS` (with the keys that bound them); returns the report."""
    report = compile_report(regions=2 if scope == "layers" else 1)
    log.info("torch.compile (%s): %d graphs, %d recompilations, %d graph breaks, %.1f s compiling; caches in %s: "
             "FX graphs %d hits / %d misses, AOTAutograd %d hits / %d misses", scope, report["graphs"],
             report["recompilations"], report["graph_breaks"], report["compile_s"], options.cache_path,
             report["fx_cache_hits"], report["fx_cache_misses"], report["aot_cache_hits"], report["aot_cache_misses"])
    if report["recompilations"] > MAX_RECOMPILATIONS:
        log.warning("torch.compile recompiled %d times (more than %d): set compile.dynamic=true, or bucket the widths "
                    "with data.pad_to_multiple_of (TORCH_LOGS=recompiles names the guards that failed)",
                    report["recompilations"], MAX_RECOMPILATIONS)
    return report
