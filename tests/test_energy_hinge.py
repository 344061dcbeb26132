"""PromCSE's InfoNCE + Energy-based Hinge loss against loops over the formula; margins, zero hinge, errors."""

from __future__ import annotations

import math

import pytest
import torch

from cselab.losses import LOSSES
from cselab.losses.energy_hinge import InfoNCEWithEnergyHinge
from cselab.losses.infonce import InfoNCE
from cselab.methods.losses import build_loss


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double(), b.double()
    return float(a64 @ b64) / (math.sqrt(float(a64 @ a64)) * math.sqrt(float(b64 @ b64)))


def reference_infonce(z: torch.Tensor, tau: float, w: float) -> float:
    n = z.shape[0]
    total = 0.0
    for i in range(n):
        num = math.exp(_cos(z[i, 0], z[i, 1]) / tau)
        den = 0.0
        for j in range(n):
            den += math.exp(_cos(z[i, 0], z[j, 1]) / tau)
            den += math.exp(_cos(z[i, 0], z[j, 2]) / tau + (w if i == j else 0.0))
        total += -math.log(num / den)
    return total / n


def reference_hinge(z: torch.Tensor, margin: float) -> float:
    """mean_i max(0, m + max(cos(h_i, h+_j), j != i; cos(h_i, h-_j), all j) - cos(h_i, h+_i))."""
    n = z.shape[0]
    total = 0.0
    for i in range(n):
        pool = [_cos(z[i, 0], z[j, 1]) for j in range(n) if j != i]
        pool += [_cos(z[i, 0], z[j, 2]) for j in range(n)]
        total += max(0.0, margin + max(pool) - _cos(z[i, 0], z[i, 1]))
    return total / n


def reference_loss(z: torch.Tensor, tau: float, w: float, margin: float, lam: float) -> float:
    return reference_infonce(z, tau, w) + lam * reference_hinge(z, margin)


@pytest.mark.parametrize(
    ("batch", "tau", "weight", "margin", "lam"),
    [
        (2, 0.05, 0.0, 0.2, 10.0),
        (6, 0.05, 0.0, 0.2, 10.0),
        (5, 0.1, 1.0, 0.3, 2.0),
        (8, 0.5, -1.0, 0.0, 10.0),
    ],
)
def test_matches_the_formula(batch: int, tau: float, weight: float, margin: float, lam: float) -> None:
    torch.manual_seed(batch * 7 + int(margin * 10))
    z = torch.randn(batch, 3, 16)
    loss_fn = InfoNCEWithEnergyHinge(
        temperature=tau, hard_negative_weight=weight, margin=margin, eh_weight=lam
    )
    loss = loss_fn(z)
    assert loss.dim() == 0
    assert float(loss) == pytest.approx(reference_loss(z, tau, weight, margin, lam), abs=1e-5)
    assert float(loss_fn.hinge(z)) == pytest.approx(reference_hinge(z, margin), abs=1e-6)
    # the InfoNCE part is exactly the repository's InfoNCE
    assert float(loss - lam * loss_fn.hinge(z)) == pytest.approx(float(InfoNCE(tau, weight)(z)), abs=1e-5)


def test_hard_negative_weight_does_not_enter_the_hinge() -> None:
    torch.manual_seed(3)
    z = torch.randn(4, 3, 8)
    a = InfoNCEWithEnergyHinge(0.05, 0.0).hinge(z)
    b = InfoNCEWithEnergyHinge(0.05, 5.0).hinge(z)
    assert float(a) == pytest.approx(float(b), abs=0)


def test_own_hard_negative_is_in_the_pool_own_positive_is_not() -> None:
    # row 0: positive e0 (cos 1 with the anchor), own hard negative at cos 0.8; the other rows are orthogonal
    d = 6
    e = torch.eye(d)
    z = torch.zeros(3, 3, d)
    z[0, 0], z[0, 1], z[0, 2] = e[0], e[0], 0.8 * e[0] + 0.6 * e[1]
    z[1, 0], z[1, 1], z[1, 2] = e[2], e[2], e[3]
    z[2, 0], z[2, 1], z[2, 2] = e[4], e[4], e[5]
    pos, neg = InfoNCEWithEnergyHinge().hinge_terms(z)
    assert pos.tolist() == pytest.approx([1.0, 1.0, 1.0], abs=1e-6)
    assert neg.tolist() == pytest.approx([0.8, 0.0, 0.0], abs=1e-6)
    # m + 0.8 - 1 > 0 only for margins above 0.2
    assert float(InfoNCEWithEnergyHinge(margin=0.2).hinge(z)) == pytest.approx(0.0, abs=1e-6)
    assert float(InfoNCEWithEnergyHinge(margin=0.3).hinge(z)) == pytest.approx(0.1 / 3, abs=1e-6)


def test_margin_zero_vs_larger_margins() -> None:
    torch.manual_seed(5)
    z = torch.randn(8, 3, 16)
    values = [float(InfoNCEWithEnergyHinge(margin=m).hinge(z)) for m in (0.0, 0.1, 0.2, 0.4, 5.0)]
    assert all(a <= b for a, b in zip(values, values[1:], strict=False))  # non-decreasing in m
    for m, v in zip((0.0, 0.1, 0.2, 0.4, 5.0), values, strict=True):
        assert v == pytest.approx(reference_hinge(z, m), abs=1e-6)
    # a margin larger than any possible cosine gap (2) makes every row active: hinge = m + mean(s- - s+)
    pos, neg = InfoNCEWithEnergyHinge().hinge_terms(z)
    assert values[-1] == pytest.approx(5.0 + float((neg - pos).mean()), abs=1e-5)


def test_zero_hinge_when_positives_are_far_ahead() -> None:
    # anchors = positives = distinct basis vectors, hard negatives orthogonal to everything else:
    # s+ = 1, s- = 0, so the hinge is 0 for every margin < 1 and the loss is plain InfoNCE
    b, d = 4, 8
    e = torch.eye(d)
    z = torch.stack([e[:b], e[:b], e[b : 2 * b]], dim=1)
    loss_fn = InfoNCEWithEnergyHinge(margin=0.9, eh_weight=10.0)
    assert float(loss_fn.hinge(z)) == 0.0
    assert float(loss_fn(z)) == pytest.approx(float(InfoNCE(0.05)(z)), abs=1e-6)


def test_gradient_flows_to_all_three_views() -> None:
    torch.manual_seed(9)
    z = torch.randn(6, 3, 12, requires_grad=True)
    loss_fn = InfoNCEWithEnergyHinge(margin=0.4)
    loss_fn(z).backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()
    assert all(float(z.grad[:, v].abs().sum()) > 0 for v in range(3))
    # the hinge alone also back-propagates (active rows only)
    z2 = z.detach().clone().requires_grad_(True)
    h = loss_fn.hinge(z2)
    assert float(h.detach()) > 0
    h.backward()
    assert float(z2.grad.abs().sum()) > 0


def test_registry_and_config_defaults() -> None:
    assert LOSSES["infonce_eh"] is InfoNCEWithEnergyHinge
    loss_fn = build_loss({"name": "infonce_eh", "temperature": 0.05, "margin": 0.2, "eh_weight": 10.0})
    assert isinstance(loss_fn, InfoNCEWithEnergyHinge)
    assert (loss_fn.temperature, loss_fn.hard_negative_weight, loss_fn.margin, loss_fn.eh_weight) == (
        0.05,
        0.0,
        0.2,
        10.0,
    )


def test_config_file_builds() -> None:
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[1] / "conf" / "loss" / "infonce_eh.yaml"
    cfg = yaml.safe_load(path.read_text())
    assert cfg == {
        "name": "infonce_eh",
        "_target_": "cselab.losses.energy_hinge.InfoNCEWithEnergyHinge",
        "temperature": 0.05,
        "hard_negative_weight": 0.0,
        "margin": 0.2,
        "eh_weight": 10.0,
        "groups": 1,
    }
    assert isinstance(build_loss(cfg), InfoNCEWithEnergyHinge)


@pytest.mark.parametrize("shape", [(4, 2, 8), (4, 8), (4, 4, 8)])
def test_needs_hard_negatives(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="hard negatives"):
        InfoNCEWithEnergyHinge()(torch.randn(*shape))


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match="temperature"):
        InfoNCEWithEnergyHinge(temperature=0.0)
    with pytest.raises(ValueError, match="margin"):
        InfoNCEWithEnergyHinge(margin=-0.1)
    with pytest.raises(ValueError, match="at least 2"):
        InfoNCEWithEnergyHinge()(torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match="bad arguments"):
        build_loss({"name": "infonce_eh", "lambda": 10})
