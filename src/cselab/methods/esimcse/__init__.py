"""``method=esimcse``: :mod:`cselab.methods.esimcse.method` (its LightningModule) and what only it uses."""
