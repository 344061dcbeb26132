"""``method.mlm`` read into :class:`cselab.methods.mlm.MLMOptions`: the defaults written once, the schedule, and a
clear error for a key or value the node does not take (before the backbone loads)."""

from __future__ import annotations

import math

import pytest

from cselab.methods.mlm import MLMOptions
from cselab.methods.options import build_options
from cselab.model.spec import ConfigError


def test_defaults_are_dcpcse_and_the_weight_decays_per_decay_steps() -> None:
    options = build_options(MLMOptions, {})
    assert (options.weight, options.decay, options.decay_steps, options.probability, options.lm_head) == (
        0.1, 0.95, 100, 0.15, "untied")
    custom = build_options(MLMOptions, {"weight": 0.2, "decay": 0.5, "decay_steps": 10})
    assert custom.weight_at(0) == pytest.approx(0.2)
    assert custom.weight_at(10) == pytest.approx(0.1)
    assert custom.weight_at(25) == pytest.approx(0.2 * 0.5 ** 2.5)
    assert math.isclose(options.weight_at(300), 0.1 * 0.95 ** 3)


@pytest.mark.parametrize(("node", "message"), [
    ({"wieght": 0.1}, "method.mlm.wieght: not an option"),
    ({"lm_head": "shared"}, "method.mlm.lm_head='shared'"),
    ({"decay_steps": 0}, "method.mlm.decay_steps=0: expected > 0"),
    ({"weight": -1}, "method.mlm.weight=-1: expected >= 0"),
    ({"decay": 0}, "method.mlm.decay=0: expected > 0"),
])
def test_a_bad_node_names_its_key(node, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        build_options(MLMOptions, node)
