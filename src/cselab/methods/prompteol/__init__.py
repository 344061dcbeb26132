"""``method=prompteol``: :mod:`cselab.methods.prompteol.method` (its LightningModule) and what only it uses."""
