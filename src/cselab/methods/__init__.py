"""The methods: one folder per method (``<name>/method.py``: its LightningModule, which sets ``method_name``, and
what only it uses: options, data transform, loss) plus its ``conf/method/<name>.yaml`` (``_target_``); the shared
machinery (the base step, the cached step, gather, optimizer, compile, the non-finite policy, loading) is the
modules beside them.  ``cselab.methods.registry.method_class`` finds a class by its name."""
