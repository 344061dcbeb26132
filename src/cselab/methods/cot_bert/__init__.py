"""``method=cot_bert``: :mod:`cselab.methods.cot_bert.method` (its LightningModule) and what only it uses."""
