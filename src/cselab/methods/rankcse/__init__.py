"""``method=rankcse``: :mod:`cselab.methods.rankcse.method` (its LightningModule) and what only it uses."""
