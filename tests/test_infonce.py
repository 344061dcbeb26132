"""InfoNCE against the formula written out with explicit loops; argument errors."""

from __future__ import annotations

import math

import pytest
import torch

from cselab.losses.infonce import InfoNCE, cosine_matrix
from cselab.methods.losses import build_loss
from cselab.model.spec import ConfigError


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double(), b.double()
    return float(a64 @ b64) / (math.sqrt(float(a64 @ a64)) * math.sqrt(float(b64 @ b64)))


def reference_loss(z: torch.Tensor, tau: float, w: float = 0.0) -> float:
    """l_i = -log e(z1_i, z2_i) / sum_j [e(z1_i, z2_j) + e(z1_i, z3_j) * exp(w [i == j])], mean over i."""
    n, v = z.shape[0], z.shape[1]
    total = 0.0
    for i in range(n):
        numerator = math.exp(_cos(z[i, 0], z[i, 1]) / tau)
        denominator = 0.0
        for j in range(n):
            denominator += math.exp(_cos(z[i, 0], z[j, 1]) / tau)
            if v == 3:
                denominator += math.exp(_cos(z[i, 0], z[j, 2]) / tau + (w if i == j else 0.0))
        total += -math.log(numerator / denominator)
    return total / n


@pytest.mark.parametrize(
    ("views", "tau", "weight"),
    [(2, 0.05, 0.0), (2, 0.5, 0.0), (3, 0.05, 0.0), (3, 0.1, 0.0), (3, 0.1, 1.5), (3, 0.5, -2.0)],
)
def test_infonce_matches_the_formula(views: int, tau: float, weight: float) -> None:
    torch.manual_seed(views * 100 + int(tau * 100))
    z = torch.randn(6, views, 16)
    loss = InfoNCE(temperature=tau, hard_negative_weight=weight)(z)
    assert loss.dim() == 0
    assert float(loss) == pytest.approx(reference_loss(z, tau, weight), abs=1e-5)


def test_hard_negative_weight_changes_the_loss() -> None:
    torch.manual_seed(1)
    z = torch.randn(5, 3, 8)
    base = float(InfoNCE(0.1, 0.0)(z))
    weighted = float(InfoNCE(0.1, 1.0)(z))
    assert weighted > base  # more weight on the own hard negative = a harder denominator
    assert weighted == pytest.approx(reference_loss(z, 0.1, 1.0), abs=1e-5)


def test_hard_negative_weight_ignored_without_hard_negatives() -> None:
    torch.manual_seed(2)
    z = torch.randn(4, 2, 8)
    assert float(InfoNCE(0.05, 3.0)(z)) == pytest.approx(float(InfoNCE(0.05, 0.0)(z)), abs=1e-6)


def test_logits_layout() -> None:
    torch.manual_seed(3)
    z = torch.randn(3, 3, 4)
    logits = InfoNCE(temperature=0.5, hard_negative_weight=0.7).logits(z)
    assert logits.shape == (3, 6)
    for i in range(3):
        for j in range(3):
            assert float(logits[i, j]) == pytest.approx(_cos(z[i, 0], z[j, 1]) / 0.5, abs=1e-5)
            extra = 0.7 if i == j else 0.0
            assert float(logits[i, 3 + j]) == pytest.approx(_cos(z[i, 0], z[j, 2]) / 0.5 + extra, abs=1e-5)


def test_loss_is_scale_invariant_and_backpropagates() -> None:
    torch.manual_seed(4)
    z = torch.randn(4, 2, 8, requires_grad=True)
    loss = InfoNCE(0.05)(z)
    assert float(InfoNCE(0.05)(z.detach() * 7.0)) == pytest.approx(loss.item(), abs=1e-4)
    loss.backward()
    assert z.grad is not None and float(z.grad.abs().sum()) > 0


def test_cosine_matrix() -> None:
    torch.manual_seed(5)
    a, b = torch.randn(3, 5), torch.randn(4, 5)
    m = cosine_matrix(a, b)
    assert m.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            assert float(m[i, j]) == pytest.approx(_cos(a[i], b[j]), abs=1e-6)


@pytest.mark.parametrize("tau", [0.0, -0.05])
def test_temperature_must_be_positive(tau: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        InfoNCE(temperature=tau)


def test_batch_of_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        InfoNCE()(torch.randn(1, 2, 8))


@pytest.mark.parametrize("shape", [(4, 1, 8), (4, 4, 8), (4, 8)])
def test_wrong_number_of_views_is_refused(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="2 or 3"):
        InfoNCE()(torch.randn(*shape))


def test_build_loss() -> None:
    loss = build_loss({"name": "infonce", "temperature": 0.1, "hard_negative_weight": 0.5})
    assert isinstance(loss, InfoNCE)
    assert (loss.temperature, loss.hard_negative_weight) == (0.1, 0.5)
    with pytest.raises(ValueError, match="loss.name='nope'"):
        build_loss({"name": "nope"})
    with pytest.raises(ValueError, match="tau"):
        build_loss({"name": "infonce", "tau": 0.1})


def test_a_loss_is_built_from_its_target_and_a_bad_target_is_named():
    from cselab.losses.infonce import InfoNCE
    from cselab.methods.losses import build_loss

    loss = build_loss({"_target_": "cselab.losses.infonce.InfoNCE", "name": "my_loss", "temperature": 0.1})
    assert isinstance(loss, InfoNCE) and loss.temperature == 0.1  # any name: the class comes from _target_
    with pytest.raises(ValueError, match=r"loss._target_='cselab.losses.nope.Missing': cannot import it"):
        build_loss({"_target_": "cselab.losses.nope.Missing", "name": "x"})
    with pytest.raises(ValueError, match=r"loss.name='x' without loss._target_"):
        build_loss({"name": "x"})


def test_a_known_loss_name_on_another_loss_target_is_refused_with_the_config_group():
    """``loss.name=cot_infonce`` on InfoNCE's node would have trained InfoNCE under CoT-BERT's loss's name (the loss
    comes from ``_target_``): refused, naming ``loss=cot_infonce``.  A name of one's own stays a label; a
    functools.partial's name (RankCSE's) matches its class."""
    from cselab.methods.checks import check_loss_name

    infonce = "cselab.losses.infonce.InfoNCE"
    with pytest.raises(ConfigError, match=r"loss.name='cot_infonce' is not the loss that loss._target_=cselab.losses."
                                          r"infonce.InfoNCE builds \(infonce\): .* loss=cot_infonce"):
        check_loss_name({"name": "cot_infonce", "_target_": infonce})
    check_loss_name({"name": "my_loss", "_target_": infonce})
    check_loss_name({"name": "infonce", "_target_": infonce})
    check_loss_name({"name": "rankcse_listmle", "_target_": "cselab.methods.rankcse.loss.RankCSELoss"})
    check_loss_name({"name": "cot_infonce"})  # no _target_: built by its name
