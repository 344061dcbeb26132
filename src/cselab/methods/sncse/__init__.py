"""``method=sncse``: :mod:`cselab.methods.sncse.method` (its LightningModule) and what only it uses."""
