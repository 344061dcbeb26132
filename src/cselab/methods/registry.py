"""``method=<name>`` -> its class: the one registration of a method is its class (a :class:`ContrastiveMethod`
subclass in ``cselab/methods/`` that sets ``method_name``) and its YAML (``conf/method/<name>.yaml``, whose
``_target_`` the run instantiates).  This look-up serves what has a method's name but no ``_target_``: a
checkpoint without ``cselab_method_class`` (``cselab.load(path, method=...)``) and the command-line tools."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from cselab.methods.base import ContrastiveMethod
from cselab.methods.checks import ConfigError


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def known_methods() -> dict[str, type[ContrastiveMethod] | Callable[..., Any]]:
    """``method_name`` -> the class, or its ``factory`` where it declares one (``baseline``:
    :func:`cselab.methods.baseline.build_baseline`), over every module of :mod:`cselab.methods` (imported)."""
    import cselab.methods

    for info in pkgutil.iter_modules(cselab.methods.__path__):
        importlib.import_module(f"cselab.methods.{info.name}")
    return {c.method_name: getattr(c, "factory", c) for c in _subclasses(ContrastiveMethod)
            if "method_name" in vars(c) and c.__module__.startswith("cselab.methods.")}


def method_class(name: str) -> type[ContrastiveMethod] | Callable[..., Any]:
    """The class (or factory) of ``method.name``.

    Raises:
        ValueError: an unknown name (lists the known ones).
    """
    methods = known_methods()
    if name not in methods:
        raise ValueError(f"method.name={name!r}: expected one of {sorted(methods)}")
    return methods[name]


def method_target(target: str):
    """The class (or factory, ``method=baseline``) that ``method._target_`` names.

    Raises:
        ConfigError: it cannot be imported (names it).
    """
    from hydra.utils import get_object

    try:
        return get_object(target)
    except Exception as err:
        raise ConfigError(f"method._target_={target!r}: cannot import it ({err})") from err
