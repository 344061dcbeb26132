"""``method=promptbert``: :mod:`cselab.methods.promptbert.method` (its LightningModule) and what only it uses."""
