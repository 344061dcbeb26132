"""``method=simcse``: :mod:`cselab.methods.simcse.method` (its LightningModule) and what only it uses."""
