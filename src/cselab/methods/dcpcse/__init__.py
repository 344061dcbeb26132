"""``method=dcpcse``: :mod:`cselab.methods.dcpcse.method` (its LightningModule) and what only it uses."""
