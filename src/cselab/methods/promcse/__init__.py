"""``method=promcse``: :mod:`cselab.methods.promcse.method` (its LightningModule) and what only it uses."""
