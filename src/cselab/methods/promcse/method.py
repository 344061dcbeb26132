"""PromCSE (Jiang et al., EMNLP 2022 Findings): DCPCSE's deep prefixes on a frozen backbone (``tuning=prefix``) plus,
in the sup setting, the energy-based hinge loss (``loss=infonce_eh``, :mod:`cselab.losses.energy_hinge`)."""

from __future__ import annotations

from cselab.methods.simcse.method import SimCSE


class PromCSE(SimCSE):
    """PromCSE: ``tuning=prefix``; sup uses ``loss=infonce_eh`` (the config picks it per setting)."""

    method_name = "promcse"
    tunings = ("prefix",)
