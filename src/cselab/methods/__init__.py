"""The methods: one class per method (``method_name``) plus its ``conf/method/<name>.yaml`` (``_target_``);
``method_class`` finds a class by its name (:mod:`cselab.methods.registry`)."""

from cselab.methods.registry import method_class

__all__ = ["method_class"]
