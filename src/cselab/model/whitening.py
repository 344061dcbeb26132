"""BERT-whitening (Su et al., 2021): a linear post-processing of sentence embeddings, ``y = (x - mu) W[:, :k]``,
then L2-normalised; ``mu`` and ``W`` are fitted once on a corpus of embeddings.

Official code: bojone/BERT-whitening ``eng/utils.py``:

* ``compute_kernel_bias`` (``utils.py:194-203``): ``mu = vecs.mean(axis=0)``; ``cov = np.cov(vecs.T)`` (the
  UNBIASED covariance, divided by N - 1); ``u, s, vh = np.linalg.svd(cov)``; ``W = u @ diag(1 / sqrt(s))``;
  returns ``(W, -mu)``;
* ``eval.py:99``: ``kernel = kernel[:, :n_components]`` (the first k columns: the k largest singular values);
  ``n_components`` < 0 keeps all, 0 disables whitening (``eval.py:15-20, 75-76``);
* ``transform_and_normalize`` (``utils.py:206-212``): ``(vecs + bias).dot(kernel)``, then each row divided by
  ``max(||row||, 1e-8)``.

The fit runs in float64 (numpy's default for ``np.cov`` / ``svd``), with ``torch.linalg.svd`` in place of
``np.linalg.svd`` (the same LAPACK decomposition; the signs of singular vectors may differ, which does not change
cosine similarities).  :class:`Whitening` holds ``mean`` (D,) and ``kernel`` (D, k) as buffers: it is saved with the
embedding model (``cselab_model.safetensors``, checkpoints) and, exported, as its own sentence-transformers module
(``st_module.CselabWhitening``).  This file imports torch only (it ships in exported folders).
"""

from __future__ import annotations

import torch
from torch import nn

#: ``transform_and_normalize``'s clip of the row norm (official ``eng/utils.py:212``)
NORM_EPS = 1e-8


def compute_kernel_bias(vecs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The official ``compute_kernel_bias`` (bojone/BERT-whitening ``eng/utils.py:194-203``) in torch float64.

    Args:
        vecs: (N, D) embeddings (any float dtype, any device), N >= 2.

    Returns:
        ``(kernel, mean)``: kernel (D, D) = ``U diag(1 / sqrt(s))`` from the SVD of the unbiased covariance
        (columns in decreasing order of ``s``), mean (D,); both float64 on ``vecs``' device.  The official code
        returns ``-mean`` as its "bias".

    Raises:
        ValueError: ``vecs`` is not 2-D with N >= 2 rows, or holds non-finite values.
    """
    if vecs.ndim != 2 or vecs.shape[0] < 2:
        raise ValueError(f"whitening: expected (N, D) embeddings with N >= 2, got shape {tuple(vecs.shape)}")
    x = vecs.detach().to(torch.float64)
    if not torch.isfinite(x).all():
        raise ValueError("whitening: the embeddings to fit on hold NaN or inf values")
    mean = x.mean(dim=0)
    centred = x - mean
    cov = centred.T @ centred / (x.shape[0] - 1)  # np.cov(vecs.T): rows are variables, ddof = 1
    u, s, _ = torch.linalg.svd(cov)
    return u @ torch.diag(1.0 / torch.sqrt(s)), mean


class Whitening(nn.Module):
    """``forward(x) = normalize((x - mean) @ kernel)`` (official ``transform_and_normalize``).

    Args:
        mean: (D,) the fitted mean ``mu``.
        kernel: (D, k) the first k columns of ``W``.
        normalize: L2-normalise the rows after the transform (the official evaluation does, ``utils.py:211-212``;
            cosine similarities are the same either way).

    Buffers ``mean``, ``kernel`` and ``normalized`` (the flag) are saved in the state dict; loading a state dict with other shapes takes
    those shapes (a fitted transform of any k loads into any :class:`Whitening`).
    """

    def __init__(self, mean: torch.Tensor, kernel: torch.Tensor, normalize: bool = True) -> None:
        super().__init__()
        if mean.ndim != 1 or kernel.ndim != 2 or kernel.shape[0] != mean.shape[0]:
            raise ValueError(f"Whitening: expected mean (D,) and kernel (D, k), got {tuple(mean.shape)} and "
                             f"{tuple(kernel.shape)}")
        self.register_buffer("mean", mean.detach().clone())
        self.register_buffer("kernel", kernel.detach().clone())
        self.register_buffer("normalized", torch.tensor(bool(normalize)))  # saved: the flag travels with mu, W

    @property
    def normalize(self) -> bool:
        """Whether rows are L2-normalised after the transform (a saved buffer)."""
        return bool(self.normalized)

    @classmethod
    def fit(cls, vecs: torch.Tensor, k: int | None = None, normalize: bool = True,
            dtype: torch.dtype = torch.float32) -> Whitening:
        """Fit on embeddings (official ``compute_kernel_bias`` then ``kernel[:, :k]``).

        Args:
            vecs: (N, D) embeddings of the fitting corpus.
            k: dimensions kept (the first k columns of W); None: all D.
            normalize: see the class.
            dtype: the buffers' dtype (the fit itself is float64).

        Raises:
            ValueError: ``k`` outside [1, D]; fewer than k + 1 embeddings (the unbiased covariance of N embeddings
                has rank at most N - 1: a column of W beyond it divides by a zero singular value); what
                :func:`compute_kernel_bias` refuses.
        """
        n, d = vecs.shape if vecs.ndim == 2 else (0, 0)
        k = d if k is None else int(k)
        if not 1 <= k <= max(d, 1):
            raise ValueError(f"whitening: k={k} must be in [1, {d}] (the embedding dimension), or null for all")
        if n < k + 1:
            raise ValueError(f"whitening: {n} embeddings to fit on cannot whiten {k} dimensions (the covariance of N "
                             f"embeddings has rank N - 1 at most): fit on more sentences (eval.whitening.n_sentences, "
                             f"eval.whitening.fit_on) or set eval.whitening.k <= {max(n - 1, 1)}")
        kernel, mean = compute_kernel_bias(vecs)
        return cls(mean.to(dtype), kernel[:, :k].to(dtype), normalize=normalize)

    @property
    def in_features(self) -> int:
        """D, the dimension of the embeddings it takes."""
        return int(self.kernel.shape[0])

    @property
    def out_features(self) -> int:
        """k, the dimension of the embeddings it returns."""
        return int(self.kernel.shape[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, D) -> (N, k): ``(x - mean) @ kernel`` in the buffers' dtype, L2-normalised rows if ``normalize``
        (the norm clipped at 1e-8), returned in ``x``'s dtype."""
        y = (x.to(self.kernel.dtype) - self.mean) @ self.kernel
        if self.normalize:
            y = y / y.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, normalize={self.normalize}"

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        for name in ("mean", "kernel"):  # take the saved shapes (another k, another D)
            saved = state_dict.get(prefix + name)
            if saved is not None and saved.shape != getattr(self, name).shape:
                setattr(self, name, torch.empty_like(saved, device=getattr(self, name).device))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


def install_on_load(model: nn.Module, state_dict, prefix: str, *_) -> None:
    """A ``load_state_dict`` pre-hook of the embedding model: a state dict with ``whitening.*`` entries installs a
    :class:`Whitening` (its shapes taken from them); one without removes it, so that the loaded state is the whole
    model (checkpoints, ``EmbeddingModel.load``)."""
    if prefix + "whitening.kernel" in state_dict:
        if model.whitening is None:
            # a (1, 1) placeholder: the saved shapes are taken on load
            model.whitening = Whitening(torch.zeros(1), torch.zeros(1, 1)).to(model.device)
    elif model.whitening is not None:
        model.whitening = None
