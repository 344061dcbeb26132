"""The cached contrastive step (GradCache): the paper's batch size, and so its negatives, on any GPU.

Gao, Zhang, Han, Callan 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup"
(arXiv:2101.06983), Sec. 3: the contrastive loss couples the examples of a batch only through their embeddings,
so the gradient of every parameter is ``sum_i dL/dz_i * dz_i/dtheta``: the embeddings can be computed without a
graph, the loss and ``dL/dz`` taken on all of them, and the graph rebuilt one chunk at a time to push ``dL/dz_i``
through.  Peak activation memory is that of ``chunk_size`` sequences instead of the whole batch, for about one more
forward pass of the backbone per step.  (sentence-transformers' ``CachedMultipleNegativesRankingLoss`` does this
for a plain pooled encoder and one loss.)

What this step keeps exact, for every cselab method (``trainer.cached_step.chunk_size``):

* **the function**: the representations ``h`` (B * V, D) come from :meth:`EmbeddingModel.sequence_states` chunk by
  chunk; the template-bias rows (R, D) once per step (:meth:`EmbeddingModel.bias_states`); then the head, the
  bias subtraction (:meth:`EmbeddingModel.embed_states`), the DDP gather and the loss run WITH a graph on the
  cached ``h`` and bias rows, as the uncached step runs them.  Backward gives the head's gradients and
  ``dL/dh``, ``dL/dbias``;
* **the dropout masks**: the CPU and CUDA generator states are recorded before each chunk's first pass and
  restored for its second (:class:`RNGState`), so both passes draw the same masks (SimCSE's two dropout views stay
  two views of one draw);
* **one prompt draw per step** (``tuning=prefix``): the prefix key/values of all B * V rows are drawn once, first,
  as the uncached step's forward draws them (:meth:`cselab.model.backbone.Encoder.draw_prompt`); each chunk is
  served its rows, the MLM pass of a chunk the same rows; their gradients gather on one leaf and go through the
  prompt encoder once;
* **the MLM auxiliary loss** (DCPCSE), a mean over the batch's masked tokens: each chunk adds its cross-entropy sum
  divided by the batch's masked-token count, in the chunk's second pass (one backward for both losses).  Its
  dropout draws continue the generator after the first pass, as the uncached step's MLM pass follows its
  contrastive pass;
* **DDP with gathered negatives**: the gather's backward (an all-reduce) runs in the loss backward, so each rank's
  ``dL/dh`` already carries the factor that DDP's gradient average removes (:func:`cselab.methods.gather.
  gather_embeddings`);
* **Lightning's loop**: the step returns a scalar whose value is the loss and whose backward hands every trainable
  parameter the cached gradient (times the incoming gradient: Lightning's ``1 / accumulate_grad_batches``), so
  gradient accumulation, clipping, DDP's single all-reduce and non-finite skips work as for the uncached step.

With ``chunk_size >= B * V`` the step draws exactly the uncached step's masks, and its loss and gradients are the
uncached step's (``tests/test_cached_step.py``); with smaller chunks the dropout masks are drawn chunk by chunk
(another draw of the same distribution), and the loss and gradients are those of the uncached graph on those masks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from cselab.model.spec import ConfigError


@dataclass(frozen=True)
class RNGState:
    """The state of the CPU generator and of ``device``'s CUDA generator, to draw the same dropout masks again.

    Raises:
        ConfigError: (``capture``) a device other than CPU or CUDA, whose generator this step cannot restore.
    """

    cpu: torch.Tensor
    device: torch.device
    accelerator: torch.Tensor | None

    @classmethod
    def capture(cls, device: torch.device) -> RNGState:
        """The generators' states now."""
        if device.type not in ("cpu", "cuda"):
            raise ConfigError(f"trainer.cached_step on a {device.type} device: only CPU and CUDA generator states "
                              "can be restored (set trainer.cached_step.chunk_size=null)")
        cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        return cls(torch.get_rng_state(), device, cuda)

    def restore(self) -> None:
        """Set the generators back to this state."""
        torch.set_rng_state(self.cpu)
        if self.accelerator is not None:
            torch.cuda.set_rng_state(self.accelerator, self.device)


class _CachedGradients(torch.autograd.Function):
    """A scalar equal to ``value`` whose backward gives each of ``params`` its cached gradient times the incoming
    gradient (1, or a precision plugin's / Lightning's accumulation factor).  The cached tensors are handed over,
    not copied (autograd may keep them as ``.grad``)."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, grads: list[torch.Tensor], *params: torch.Tensor) -> torch.Tensor:
        ctx.grads = grads
        return value.detach().clone()

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grads, ctx.grads = ctx.grads, None
        out = [g.mul_(grad_out) for g in grads]
        grads.clear()
        return (None, None, *out)


#: Lightning precisions whose loss scaling (GradScaler) would come after the chunks' backward passes
SCALED_PRECISIONS = ("16-mixed", "16")
#: strategies under which the step's own backward passes are local (DDP all-reduces once, at the returned loss)
STRATEGIES = ("auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "ddp_find_unused_parameters_true",
              "ddp_find_unused_parameters_false", "single_device")


def check_options(precision: object = "auto", strategy: object = "auto") -> None:
    """The Trainer settings the cached step composes with, checked from the config (``trainer.precision``,
    ``trainer.strategy``): every precision but float16 with loss scaling, and one device or DDP.

    Raises:
        ConfigError: names the key, its value and what to use instead.
    """
    if str(precision) in SCALED_PRECISIONS:
        raise ConfigError(f"trainer.precision={precision} with trainer.cached_step: the chunks' gradients would be "
                          "taken before the loss scaling of float16 training; use trainer.precision=bf16-mixed or "
                          "32-true, or trainer.cached_step.chunk_size=null")
    name = strategy if isinstance(strategy, str) else None
    if name is not None and name not in STRATEGIES:
        raise ConfigError(f"trainer.strategy={strategy} with trainer.cached_step: the cached step runs its own "
                          f"backward passes inside the step, which only one device or DDP ({', '.join(STRATEGIES)}) "
                          "leave exact; set trainer.cached_step.chunk_size=null")


def check_trainer(trainer) -> None:
    """:func:`check_options` on a built Trainer (its precision plugin and strategy classes).

    Raises:
        ConfigError: a float16 GradScaler, or a strategy other than one device / DDP.
    """
    from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

    if getattr(trainer.precision_plugin, "scaler", None) is not None:
        check_options(precision="16-mixed")
    if not isinstance(trainer.strategy, (SingleDeviceStrategy, DDPStrategy)):
        check_options(strategy=type(trainer.strategy).__name__)


def chunk_rows(n: int, chunk_size: int) -> list[slice]:
    """Rows ``0 .. n-1`` cut into slices of ``chunk_size`` (the last may be shorter)."""
    return [slice(start, min(start + chunk_size, n)) for start in range(0, n, chunk_size)]


def _backward(outputs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> None:
    """``torch.autograd.backward`` outside autocast (the backward ops keep the forward's dtypes)."""
    with torch.autocast(outputs[0].device.type, enabled=False):
        torch.autograd.backward(list(outputs), list(grads))


@dataclass
class CachedStepResult:
    """What one cached step gives the LightningModule: ``loss`` (the value Lightning back-propagates: its backward
    applies the cached gradients), the MLM loss value (detached) and B."""

    loss: torch.Tensor
    mlm: torch.Tensor | None
    batch_size: int


class CachedStep:
    """GradCache for :class:`cselab.methods.base.ContrastiveMethod`: ``trainer.cached_step.chunk_size=N``.

    Args:
        chunk_size: sequences (rows of the flattened B * V views) per forward pass, >= 1.

    Raises:
        ConfigError: ``chunk_size`` is not an integer >= 1 (names ``trainer.cached_step.chunk_size``).
    """

    def __init__(self, chunk_size: int) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ConfigError(f"trainer.cached_step.chunk_size={chunk_size!r}: expected an integer >= 1 (sequences "
                              "per forward pass), or null for the uncached step")
        self.chunk_size = int(chunk_size)

    def __call__(self, method, batch: dict[str, torch.Tensor],
                 extras: Mapping[str, torch.Tensor] | None = None) -> CachedStepResult | None:
        """One training step of ``method`` on ``batch`` (the collate's tensors (B, V, T) ...) and the loss's extra
        inputs ``extras`` (:meth:`cselab.methods.base.ContrastiveMethod.loss_inputs`); None when the
        non-finite policy skips it (no gradient is left behind).  The parameters' ``.grad`` are untouched (they
        get the cached gradients from the returned loss's backward).

        Raises:
            NonFiniteLossError: a NaN / inf loss under ``on_nonfinite=stop``.
        """
        params = [p for p in method.parameters() if p.requires_grad]
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None
        try:
            result = self._step(method, batch, extras)
            if result is None:
                return None
            mlm, total = result
            grads = [p.grad for p in params]
            with_grad = [(p, g) for p, g in zip(params, grads, strict=True) if g is not None]
        finally:
            for p, g in zip(params, saved, strict=True):
                p.grad = g
        loss = _CachedGradients.apply(total, [g for _, g in with_grad], *[p for p, _ in with_grad])
        return CachedStepResult(loss, mlm, int(batch["input_ids"].shape[0]))

    def _step(self, method, batch: dict[str, torch.Tensor], extras: Mapping[str, torch.Tensor] | None):
        """Both passes; the gradients left in the parameters' ``.grad``.  Returns ``(MLM loss or None, total
        loss)`` (detached scalars), or None for a step the non-finite policy skips."""
        model, encoder = method.model, method.encoder
        b, v = batch["input_ids"].shape[:2]
        device = batch["input_ids"].device
        chunks = chunk_rows(b * v, self.chunk_size)

        # first pass, without a graph: the prompt draw of all rows, then each chunk, then the template-bias rows
        prompt = encoder.draw_prompt(b * v)
        prompt_leaf = None if prompt is None else prompt.detach().requires_grad_()
        states, hs = [], []
        with torch.no_grad():
            for rows in chunks:
                states.append(RNGState.capture(device))
                with encoder.one_prompt_draw(_served(prompt_leaf, rows)):
                    hs.append(model.sequence_states(batch, rows))
            bias_state = RNGState.capture(device)
            with encoder.one_prompt_draw(_served(prompt_leaf, None)):
                bias = model.bias_states(batch)
        after_first_pass = RNGState.capture(device)

        # the loss on the cached representations, with a graph from them (head, bias subtraction, gather, loss)
        h = torch.cat(hs).requires_grad_()
        bias = None if bias is None else bias.requires_grad_()
        z = method.gather_embeddings(model.embed_states(h.view(b, v, -1), bias, batch))
        loss = method.contrastive_loss(z, extras)
        done = getattr(method, "flops_forward_done", None)  # cselab.callbacks.flops: the forward's FLOPs end here
        if done is not None:
            done()
        if not method.nonfinite.on_device and method.nonfinite(method, loss.detach(), batch):
            return None  # decided on the host: skip the second pass (on the device: the whole step is recorded)
        _backward([loss], [torch.ones_like(loss)])

        # second pass, chunk by chunk with a graph: dL/dh (and the MLM loss) back-propagated
        aux = method.aux_mlm if method.aux_mlm is not None and "mlm_input_ids" in batch else None
        mlm_total, mlm_state, scale = None, after_first_pass, None
        if aux is not None:  # the masked-token count stays on the device (no host sync); none masked: a zero loss
            masked = (batch["mlm_labels"] != -100).sum().clamp(min=1).to(loss.dtype)
            mlm_total = loss.new_zeros(())
            scale = aux.weight(method.global_step) / masked
        for rows, state in zip(chunks, states, strict=True):
            state.restore()
            with encoder.one_prompt_draw(_served(prompt_leaf, rows)):
                outputs, grads = [model.sequence_states(batch, rows)], [h.grad[rows]]
                if scale is not None:
                    mlm_state.restore()
                    ce_sum = aux.loss_sum(encoder, batch, rows)
                    mlm_state = RNGState.capture(device)
                    mlm_total = mlm_total + ce_sum.detach()
                    outputs.append(ce_sum)
                    grads.append(scale.to(ce_sum.dtype).expand_as(ce_sum))
                _backward(outputs, grads)
        if bias is not None:
            bias_state.restore()
            with encoder.one_prompt_draw(_served(prompt_leaf, None)):
                _backward([model.bias_states(batch)], [bias.grad])
        if prompt is not None and prompt_leaf.grad is not None:
            _backward([prompt], [prompt_leaf.grad])
        mlm_state.restore()  # the generators continue after the step's last draw

        contrastive = loss.detach()
        if aux is None:
            return None, contrastive
        mlm = mlm_total / masked
        total = contrastive + aux.weight(method.global_step) * mlm
        if method.nonfinite(method, total, batch):
            return None
        return mlm, total


def _served(prompt: torch.Tensor | None, rows: slice | None) -> dict | None:
    """The prompt draw a forward on ``rows`` (None: all rows) is served: ``{shape: rows of the draw}``."""
    if prompt is None:
        return None
    part = prompt if rows is None else prompt[rows]
    return {part.shape: part}
