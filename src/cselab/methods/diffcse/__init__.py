"""``method=diffcse``: :mod:`cselab.methods.diffcse.method` (its LightningModule) and what only it uses."""
