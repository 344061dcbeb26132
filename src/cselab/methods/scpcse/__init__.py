"""``method=scpcse``: :mod:`cselab.methods.scpcse.method` (its LightningModule) and what only it uses."""
