"""``method=baseline``: :mod:`cselab.methods.baseline.method` (its LightningModule) and what only it uses."""
