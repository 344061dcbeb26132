"""``method=optiprompt``: :mod:`cselab.methods.optiprompt.method` (its LightningModule) and what only it uses."""
