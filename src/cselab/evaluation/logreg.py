"""SentEval's PyTorch logistic regression, trained for a whole grid of problems at once.

SentEval scores a transfer task by training ``senteval/tools/classifier.py``'s ``MLP`` (``nhid=0``: one
``nn.Linear``, cross-entropy, Adam or RMSprop with the L2 penalty as ``weight_decay``, early stopping on a
validation split) once per cell of its grid (folds x L2 values), one cell after the other.  The cells are
independent problems of the same shape, so :func:`fit_grid` trains them together as one batched tensor program,
with per-problem early stopping, and gives each problem exactly what the sequential training gives it:

* the same initial weights: every SentEval classifier re-seeds (``classifier.py:27-30``: ``np.random.seed``,
  ``torch.manual_seed``) before building its ``nn.Linear`` (``classifier.py:185-188``), so every cell starts
  from the weights ``nn.Linear(D, C)`` draws after ``torch.manual_seed(seed)``;
* the same mini-batches: each problem owns a ``numpy.random.RandomState(seed)`` (the generator that the global
  ``np.random.seed`` re-seeds), drawing SentEval's validation split (``classifier.py:44-49``) and then one
  ``permutation(n)`` per epoch (``classifier.py:88-95``);
* the same update: the mean cross-entropy of the batch, the L2 term added to the gradient as torch's Adam /
  RMSprop ``weight_decay`` does, and torch's single-tensor Adam (lr 1e-3, betas 0.9 / 0.999, eps 1e-8) /
  RMSprop (lr 1e-2, alpha 0.99, eps 1e-8) step (SentEval's ``utils.get_optimizer`` defaults), skipped for a
  problem that has no batch left in this epoch;
* the same stopping rule (``classifier.py:60-83``): ``epoch_size`` epochs, then the validation accuracy; a
  better one keeps a copy of the weights, otherwise a counter that is never reset stops training once it has
  reached ``tenacity``; at most while ``nepoch <= max_epoch``; the best weights are the result.

:func:`fit_one` is the sequential reference (``nn.Linear`` + ``torch.optim``, line by line the SentEval
classifier on the CPU); ``tests/test_transfer.py`` checks that the grid equals a loop of it (same weights, same
early-stopping epoch).  Only ``nhid=0`` (logistic regression) is implemented: it is what SentEval's ``test`` and
``fasttest`` configurations of SimCSE / PromptBERT use.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

#: torch's defaults that SentEval's ``get_optimizer("adam" | "rmsprop")`` uses (no arguments given)
_ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
_RMSPROP = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8}


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's ``params['classifier']`` (``classifier.py:177-183``) and its seed.

    Attributes:
        optim: ``adam`` | ``rmsprop`` (torch defaults, as ``get_optimizer`` with no arguments).
        batch_size: rows per mini-batch (64 ``test``, 128 ``fasttest``).
        tenacity: validation evaluations without improvement before stopping (5 / 3).
        epoch_size: epochs between two validation evaluations (4 / 2).
        max_epoch: training continues while the epoch count is <= this (SentEval: 200).
        seed: SentEval's seed (1111), for the initial weights and every permutation.
        nhid: hidden units; only 0 (logistic regression) is implemented.

    Raises:
        ValueError: an unknown optimiser, ``nhid`` != 0, or a non-positive size.
    """

    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    seed: int = 1111
    nhid: int = 0

    def __post_init__(self) -> None:
        if self.optim not in ("adam", "rmsprop"):
            raise ValueError(f"transfer.classifier.optim={self.optim!r}: expected 'adam' or 'rmsprop'")
        if self.nhid != 0:
            raise ValueError(f"transfer.classifier.nhid={self.nhid}: only 0 (logistic regression, SentEval's test "
                             "and fasttest configurations) is implemented")
        for key in ("batch_size", "epoch_size"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"transfer.classifier.{key}={getattr(self, key)}: expected a positive integer")


@dataclass(frozen=True)
class Problem:
    """One classifier to train: rows of the shared feature matrix.

    Attributes:
        train: int array of row ids (in SentEval's row order for this cell).
        l2: the L2 penalty (``weight_decay``).
        dev: row ids of the validation data (``validation_data``), or None with ``validation_split``.
        validation_split: the share of ``train`` held out by SentEval's permutation (``validation_split=0.05``).
    """

    train: np.ndarray
    l2: float
    dev: np.ndarray | None = None
    validation_split: float | None = None


@dataclass
class Fitted:
    """A trained classifier: the best weights on the validation rows.

    Attributes:
        weight: (C, D) tensor; bias: (C,) tensor.
        best_accuracy: the validation accuracy of these weights (correct / rows, a python float).
        epochs: SentEval's ``nepoch`` when training stopped.
        best_epoch: ``nepoch`` when the best weights were kept.
    """

    weight: torch.Tensor
    bias: torch.Tensor
    best_accuracy: float
    epochs: int
    best_epoch: int


def initial_weights(dim: int, nclasses: int, seed: int, dtype: torch.dtype = torch.float32):
    """The weights of ``nn.Linear(dim, nclasses)`` built right after ``torch.manual_seed(seed)``, as every
    SentEval classifier starts (the global torch RNG is left as it was).  Returns ``(weight (C, D), bias (C,))``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = nn.Linear(dim, nclasses)
    return layer.weight.detach().to(dtype), layer.bias.detach().to(dtype)


def _split(problem: Problem, rs: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows) of a problem; draws SentEval's split permutation when there is one."""
    if problem.dev is not None:
        return np.asarray(problem.train), np.asarray(problem.dev)
    if not problem.validation_split:
        raise ValueError("a problem needs dev rows or a validation_split")
    rows = np.asarray(problem.train)
    permutation = rs.permutation(len(rows))
    cut = int(problem.validation_split * len(rows))
    return rows[permutation[cut:]], rows[permutation[:cut]]


def fit_grid(X: torch.Tensor, y: torch.Tensor, nclasses: int, problems: Sequence[Problem], config: ClassifierConfig,
             progress: Callable[[int, int], None] | None = None, chunk: int = 64, threads: int | None = 1
             ) -> list[Fitted]:
    """Train every problem of a grid together; each gets what SentEval's sequential training gives it.

    Problems with the same training and validation rows (the L2 values of one fold) draw the same permutations
    (same seed, same row count), so they form one group: each step gathers the group's batch rows once and
    multiplies them by all its members' weights (``(G, bs, D) @ (G, M * C, D)^T``).  A member that has stopped
    keeps being computed with its group (its result is its best copy, kept when it stopped), a group leaves the
    computation when all its members have stopped.

    Args:
        X: (N, D) features (float32 as SentEval, or float64); y: (N,) int64 labels in [0, nclasses).
        nclasses: C.
        problems: P problems over rows of ``X``.
        config: the classifier settings.
        progress: ``progress(done, total)`` as problems finish (``done`` of ``total`` = P).
        chunk: groups per block when scoring validation rows (bounds the memory of the scoring gather).
        threads: torch intra-op threads while training, the previous setting restored on return; ``None`` keeps
            torch's.  1 (default): the grid's tensors are small (a mini-batch of 64-128 rows per problem), so
            extra threads mostly add synchronisation, and on a busy machine they made the stage up to 10x slower;
            one thread also makes the result independent of the machine's thread count (the reduction order is
            fixed).

    Returns:
        P :class:`Fitted`, in the order of ``problems``.

    Raises:
        ValueError: a problem with neither dev rows nor a validation split.
    """
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _fit_grid(X, y, nclasses, problems, config, progress, chunk)
    finally:
        torch.set_num_threads(before)


def _fit_grid(X: torch.Tensor, y: torch.Tensor, nclasses: int, problems: Sequence[Problem], config: ClassifierConfig,
              progress: Callable[[int, int], None] | None, chunk: int) -> list[Fitted]:
    dtype, P, C, D = X.dtype, len(problems), nclasses, X.shape[1]
    keys: dict[tuple, list[int]] = {}
    for i, p in enumerate(problems):
        dev = None if p.dev is None else np.asarray(p.dev).tobytes()
        keys.setdefault((np.asarray(p.train).tobytes(), dev, p.validation_split), []).append(i)
    groups = list(keys.values())
    G, M = len(groups), max(len(g) for g in groups)
    rngs = [np.random.RandomState(config.seed) for _ in groups]
    splits = [_split(problems[g[0]], rs) for g, rs in zip(groups, rngs, strict=True)]
    slot = np.full((G, M), -1, dtype=np.int64)  # (group, member) -> problem index (-1: padding)
    for gi, g in enumerate(groups):
        slot[gi, : len(g)] = g
    w0, b0 = initial_weights(D, C, config.seed, dtype)
    W, B = w0.expand(G, M, C, D).clone(), b0.expand(G, M, C).clone()
    s1 = [torch.zeros_like(W), torch.zeros_like(B)]  # Adam exp_avg / RMSprop square_avg
    s2 = [torch.zeros_like(W), torch.zeros_like(B)]  # Adam exp_avg_sq
    steps = np.zeros(G, dtype=np.int64)  # every member of a group steps together
    l2 = torch.tensor([[problems[k].l2 if k >= 0 else 0.0 for k in row] for row in slot], dtype=dtype)  # (G, M)
    best_correct = np.full(P, -1, dtype=np.int64)
    best_W, best_B = w0.expand(P, C, D).clone(), b0.expand(P, C).clone()
    best_epoch, stop_epoch = np.zeros(P, dtype=np.int64), np.zeros(P, dtype=np.int64)
    count = np.zeros(P, dtype=np.int64)
    stopped = np.zeros(P, dtype=bool)
    bs, nepoch = config.batch_size, 0
    n_train = np.array([len(sp[0]) for sp in splits])
    while not stopped.all() and nepoch <= config.max_epoch:
        active = np.array([gi for gi, g in enumerate(groups) if not stopped[g].all()])
        A = len(active)
        w, b = W[active].view(A, M * C, D), B[active].view(A, M * C)
        m1 = [s1[0][active].view(A, M * C, D), s1[1][active].view(A, M * C)]
        m2 = [s2[0][active].view(A, M * C, D), s2[1][active].view(A, M * C)]
        st = steps[active].copy()
        decay = l2[active].repeat_interleave(C, dim=1)  # (A, M * C)
        buffer = torch.empty(A * bs, D, dtype=dtype)  # reused: a fresh tensor per step costs more in page faults
        for _ in range(config.epoch_size):
            n = n_train[active]
            nb = -(-n // bs)
            rows = np.zeros((A, int(nb.max()) * bs), dtype=np.int64)
            valid = np.zeros(rows.shape, dtype=bool)
            for j, gi in enumerate(active):
                rows[j, : n[j]] = splits[gi][0][rngs[gi].permutation(n[j])]
                valid[j, : n[j]] = True
            rows_t = torch.from_numpy(rows).view(A, -1, bs)
            valid_t = torch.from_numpy(valid).view(A, -1, bs)
            for step in range(int(nb.max())):
                has = torch.from_numpy(step < nb)
                st = st + (step < nb)
                idx, mask = rows_t[:, step], valid_t[:, step].to(dtype)
                xb = torch.index_select(X, 0, idx.reshape(-1), out=buffer).view(A, bs, D)
                logits = torch.baddbmm(b.unsqueeze(1), xb, w.transpose(1, 2)).view(A, bs, M, C)
                grad_logits = torch.softmax(logits, dim=-1)
                target = y[idx].view(A, bs, 1, 1).expand(A, bs, M, 1)
                grad_logits.scatter_add_(3, target, -torch.ones_like(grad_logits[..., :1]))
                scale = (mask / mask.sum(1, keepdim=True).clamp(min=1)).view(A, bs, 1, 1)
                grad_logits = (grad_logits * scale).view(A, bs, M * C)
                gw = torch.bmm(grad_logits.transpose(1, 2), xb)
                gb = grad_logits.sum(1)
                t = torch.from_numpy(st.astype(np.float64))
                for params, grad, k in ((w, gw, 0), (b, gb, 1)):
                    shape = (-1,) + (1,) * (params.dim() - 1)
                    grad = grad + (decay if k else decay.unsqueeze(-1)) * params
                    on = has.view(shape)
                    if config.optim == "adam":
                        m = torch.where(on, m1[k].lerp(grad, 1 - _ADAM["beta1"]), m1[k])
                        v = torch.where(on, m2[k] * _ADAM["beta2"] + (1 - _ADAM["beta2"]) * grad * grad, m2[k])
                        bc1 = 1 - _ADAM["beta1"] ** t
                        bc2_sqrt = (1 - _ADAM["beta2"] ** t) ** 0.5
                        step_size = (_ADAM["lr"] / bc1).to(dtype).view(shape)
                        denom = v.sqrt() / bc2_sqrt.to(dtype).view(shape) + _ADAM["eps"]
                        new = params - step_size * m / denom
                        m1[k], m2[k] = m, v
                    else:
                        sq = torch.where(on, m1[k] * _RMSPROP["alpha"] + (1 - _RMSPROP["alpha"]) * grad * grad, m1[k])
                        new = params - _RMSPROP["lr"] * grad / (sq.sqrt() + _RMSPROP["eps"])
                        m1[k] = sq
                    params.copy_(torch.where(on, new, params))
        nepoch += config.epoch_size
        W[active], B[active] = w.view(A, M, C, D), b.view(A, M, C)
        s1[0][active], s1[1][active] = m1[0].view(A, M, C, D), m1[1].view(A, M, C)
        s2[0][active], s2[1][active] = m2[0].view(A, M, C, D), m2[1].view(A, M, C)
        steps[active] = st
        correct = _correct(X, y, w, b, [splits[gi][1] for gi in active], chunk, M, C)
        for j, gi in enumerate(active):
            for m, p in enumerate(slot[gi]):
                if p < 0 or stopped[p]:
                    continue
                if correct[j, m] > best_correct[p]:
                    best_correct[p], best_epoch[p] = correct[j, m], nepoch
                    best_W[p], best_B[p] = W[gi, m], B[gi, m]
                else:
                    if count[p] >= config.tenacity:
                        stopped[p], stop_epoch[p] = True, nepoch
                    count[p] += 1
        if progress is not None:
            progress(int(stopped.sum()), P)
    stop_epoch[~stopped] = nepoch
    if progress is not None:
        progress(P, P)
    dev_rows = {p: len(splits[gi][1]) for gi, g in enumerate(groups) for p in g}
    return [Fitted(best_W[p].clone(), best_B[p].clone(), 1.0 * int(best_correct[p]) / dev_rows[p],
                   int(stop_epoch[p]), int(best_epoch[p])) for p in range(P)]


def _correct(X: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor, devs: list[np.ndarray],
             chunk: int, members: int, nclasses: int) -> np.ndarray:
    """Correct predictions of every member on its group's validation rows: ``w`` (A, M * C, D), ``b`` (A, M * C);
    returns (A, M) counts (argmax over the C classes, first maximum on ties)."""
    out = np.zeros((len(devs), members), dtype=np.int64)
    for start in range(0, len(devs), chunk):
        part = devs[start:start + chunk]
        longest = max(len(d) for d in part)
        rows = np.zeros((len(part), longest), dtype=np.int64)
        valid = np.zeros(rows.shape, dtype=bool)
        for j, d in enumerate(part):
            rows[j, : len(d)], valid[j, : len(d)] = d, True
        rows_t = torch.from_numpy(rows)
        logits = torch.baddbmm(b[start:start + chunk].unsqueeze(1), X[rows_t], w[start:start + chunk].transpose(1, 2))
        pred = logits.view(len(part), longest, members, nclasses).argmax(-1)
        hit = (pred == y[rows_t].unsqueeze(-1)) & torch.from_numpy(valid).unsqueeze(-1)
        out[start:start + len(part)] = hit.sum(1).numpy()
    return out


def predict(fitted: Fitted, X: torch.Tensor) -> np.ndarray:
    """Predicted classes of a trained problem on (N, D) features: an int64 array of shape (N,)."""
    return (X.to(fitted.weight.dtype) @ fitted.weight.T + fitted.bias).argmax(-1).numpy()


def fit_one(X: torch.Tensor, y: torch.Tensor, nclasses: int, problem: Problem, config: ClassifierConfig) -> Fitted:
    """SentEval's classifier for one problem, as ``tools/classifier.py`` runs it (the reference of
    :func:`fit_grid`): ``nn.Linear`` built after re-seeding, ``torch.optim.Adam`` / ``RMSprop`` with the L2
    penalty as ``weight_decay``, the global-style RandomState permutations, the early-stopping loop.  Runs on
    X's device and dtype.  Returns the best weights (:class:`Fitted`)."""
    rs = np.random.RandomState(config.seed)
    train, dev = _split(problem, rs)
    w0, b0 = initial_weights(X.shape[1], nclasses, config.seed, X.dtype)
    model = nn.Linear(X.shape[1], nclasses).to(X.dtype)
    with torch.no_grad():
        model.weight.copy_(w0)
        model.bias.copy_(b0)
    opt = (torch.optim.Adam if config.optim == "adam" else torch.optim.RMSprop)(model.parameters(), foreach=False)
    opt.param_groups[0]["weight_decay"] = problem.l2
    loss_fn = nn.CrossEntropyLoss()
    Xtr, ytr, Xdev, ydev = X[train], y[train], X[dev], y[dev]
    nepoch, best, best_model, best_epoch, stop, count = 0, -1.0, None, 0, False, 0
    while not stop and nepoch <= config.max_epoch:
        for _ in range(config.epoch_size):
            permutation = rs.permutation(len(Xtr))
            for i in range(0, len(Xtr), config.batch_size):
                idx = torch.from_numpy(permutation[i:i + config.batch_size]).long()
                loss = loss_fn(model(Xtr[idx]), ytr[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += config.epoch_size
        with torch.no_grad():
            accuracy = 1.0 * int((model(Xdev).argmax(1) == ydev).sum()) / len(Xdev)
        if accuracy > best:
            best, best_model, best_epoch = accuracy, copy.deepcopy(model), nepoch
        else:
            if count >= config.tenacity:
                stop = True
            count += 1
    return Fitted(best_model.weight.detach().clone(), best_model.bias.detach().clone(), best, nepoch, best_epoch)
