"""Trainer callbacks that carry training concerns outside the LightningModule: RNG state in checkpoints and
FLOP counting for Lightning's ``ThroughputMonitor``."""

from cselab.callbacks.flops import FlopCounter
from cselab.callbacks.rng_state import RNGState

__all__ = ["FlopCounter", "RNGState"]
