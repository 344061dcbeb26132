"""RankCSE (Liu et al., ACL 2023): SimCSE's unsup step plus ranking consistency and listwise ranking distillation
from frozen teachers.

Official code: perceptiveshawty/RankCSE (``rankcse/models.py``, ``rankcse/trainers.py``, ``run_rankcse.sh``;
docs/fidelity.md "RankCSE").  The student is unsup SimCSE: the sentence twice in one forward pass (two dropout
masks), [CLS] + MLP (Linear + Tanh) in training, tested without the MLP (``--pooler_type cls --mlp_only_train``,
run_rankcse.sh:21-22; ``sentemb_forward``, models.py:343-345).  Each step, before the student's forward, the teachers
(:mod:`cselab.methods.rankcse.teachers`) embed the batch's sentences without gradient and give the targets (N, N); the
loss (:class:`cselab.methods.rankcse.loss.RankCSELoss`) is InfoNCE + consistency + gamma * listNet / listMLE.

The teacher step runs eagerly in :meth:`RankCSE.loss_inputs` (it needs strings), outside the compiled forward
(:mod:`cselab.methods.compiled`): its targets enter the forward as a batch tensor (``teacher_logits``), as does
listMLE's column permutation (``ranking_permutation``, drawn here from the CPU generator as the official draws it,
models.py:95), so that the compiled, uncached and cached (:mod:`cselab.methods.cached_step`) steps compute the same
loss and gradients.  A teacher on the student's vocabulary reads the batch's token ids on the device (the official
rule); one that needs strings (another vocabulary, a template) makes the step read the ids on the host to decode
them, and its ``encode`` returns CPU tensors (the teachers' forward dominates anyway).
The FLOP counter (:class:`cselab.callbacks.flops.FlopCounter`) counts the teachers' forward with the student's (x3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from cselab.methods.base import ContrastiveMethod
from cselab.methods.losses import build_loss
from cselab.methods.options import option
from cselab.methods.rankcse.loss import RankCSELoss
from cselab.methods.rankcse.teachers import TeacherScores, teacher_specs
from cselab.model.spec import ConfigError, EmbeddingSpec


@dataclass(frozen=True)
class RankCSEOptions:
    """RankCSE's options, keys of ``method`` itself (``method.teachers``, ``method.teacher_temperature``).

    Attributes:
        teachers: ``[{path: <run directory | .ckpt | exported folder>, weight: <float>}, ...]``, weights summing to
            1 (official ``--first/second_teacher_name_or_path`` and ``--alpha_``), checked by
            :func:`cselab.methods.rankcse.teachers.teacher_specs` (their paths when training starts).
        teacher_temperature: tau2 (official ``--tau2``, 0.05).
    """

    node: ClassVar[str] = ""
    teachers: Any = option(None, "a list of {path, weight}")
    teacher_temperature: float = option(0.05, "a number > 0 (official tau2 0.05)", lambda v: v > 0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "teachers", _plain(self.teachers))
        teacher_specs(self.teachers, self.teacher_temperature)


class RankCSE(ContrastiveMethod):
    """RankCSE: :class:`ContrastiveMethod` with teacher targets and :class:`RankCSELoss`.

    Args: :class:`ContrastiveMethod`'s; ``options``: :class:`RankCSEOptions` (the teachers, tau2); ``loss`` None:
    :class:`RankCSELoss` with its defaults.

    Raises:
        ConfigError: a malformed ``method.teachers`` / ``teacher_temperature``, a loss other than
            ``loss=rankcse_*``, a prompt (the student is SimCSE's plain sentence), or what the base refuses; at fit
            start, a teacher path that does not exist or cannot be loaded (named).
    """

    method_name = "rankcse"
    settings = ("unsup",)
    tunings = ("full",)
    options_type = RankCSEOptions
    default_loss = {"_target_": "cselab.methods.rankcse.loss.RankCSELoss"}

    def build_own_parts(self) -> None:
        """The teachers' scorer (nothing loaded before fit start)."""
        o = self.options
        self.teacher_scores = TeacherScores(teacher_specs(o.teachers, o.teacher_temperature), o.teacher_temperature)

    @classmethod
    def check_config(cls, *, loss: Mapping[str, Any] | None = None, **kwargs: Any) -> EmbeddingSpec:
        """The base's checks (``method.teachers`` / ``teacher_temperature``: :class:`RankCSEOptions`) and RankCSE's
        loss and prompt rules.

        Raises:
            ConfigError: names the key and what was expected.
        """
        loss = dict(loss or cls.default_loss)
        if int(loss.get("groups", 1) or 1) != 1:
            raise ConfigError(f"method=rankcse with loss.groups={loss['groups']}: the teachers' targets cover the "
                              "whole batch; set loss.groups=1")
        try:
            built = build_loss(loss)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if not isinstance(built, RankCSELoss):
            raise ConfigError(f"method=rankcse with loss={loss.get('name')!r}: RankCSE's loss takes the teachers' "
                              "targets; use loss=rankcse_listnet or loss=rankcse_listmle")
        model = kwargs.get("model")
        if isinstance(model, Mapping) and model.get("prompt"):
            raise ConfigError("method=rankcse with a prompt: RankCSE's student is unsup SimCSE (the plain sentence, "
                              "the teachers read its token ids); use prompt=none")
        return super().check_config(loss=loss, **kwargs)

    # ----------------------------------------------------------------- the teacher step
    def on_fit_start(self) -> None:
        """The base's checks, then the teachers loaded onto the student's device (frozen, eval mode), each reading
        the student's token ids when they fit it (:func:`cselab.methods.rankcse.teachers.teacher_feed`)."""
        super().on_fit_start()
        self.teacher_scores.load(self.device, self.tokenizer)

    @torch.no_grad()
    def teacher_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The teachers' logits (N, N) of the batch (N = the global batch under DDP with ``negatives=global``):
        ``sum_k w_k cos(t_k_i, t_k_j) / tau2`` (:class:`cselab.methods.rankcse.teachers.TeacherScores`) of the batch's first
        view as the student sees it (truncated to ``max_seq_len``): its token ids themselves (official
        trainers.py:476-499), or decoded for a teacher whose vocabulary or input differs."""
        self.teacher_scores.load(self.device, self.tokenizer)
        ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
        embeddings = self.teacher_scores.embeddings(ids, mask, self.tokenizer)
        gathered = [self.gather_embeddings(e.unsqueeze(1)).squeeze(1) for e in embeddings]
        return self.teacher_scores.logits(gathered)

    def loss_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The teacher step (eager, no gradient) before the base's step (uncached, compiled or cached): the
        :class:`RankCSELoss` inputs ``teacher`` (N, N) (:meth:`teacher_targets`) and, for listMLE, its column
        ``permutation`` (N,)."""
        targets = self.teacher_targets(batch)
        if getattr(self.loss_fn, "ranking", None) != "listmle":
            return {"teacher": targets}
        return {"teacher": targets, "permutation": torch.randperm(targets.shape[-1]).to(targets.device)}


def _plain(teachers: Any) -> list[dict[str, Any]] | Any:
    """``method.teachers`` as plain dicts (an OmegaConf ListConfig from a config, or a list)."""
    if teachers is None or isinstance(teachers, (str, Mapping)):
        return teachers
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(teachers, (ListConfig, DictConfig)):
        return OmegaConf.to_container(teachers, resolve=True)
    return [dict(t) if isinstance(t, Mapping) else t for t in teachers]
