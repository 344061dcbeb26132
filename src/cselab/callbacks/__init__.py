"""Trainer callbacks that carry training concerns outside the LightningModule: RNG state in checkpoints
(:mod:`~cselab.callbacks.rng_state`), FLOP counting for Lightning's ``ThroughputMonitor`` (:mod:`~cselab.callbacks.flops`)
and the rest of ``conf/callbacks/default.yaml``."""
