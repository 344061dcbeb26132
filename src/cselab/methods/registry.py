"""``method=<name>`` -> its class: a method is its folder ``cselab/methods/<name>/`` (``method.py``: a
:class:`ContrastiveMethod` subclass that sets ``method_name``, plus what only it uses) and its YAML
(``conf/method/<name>.yaml``, whose ``_target_`` the run instantiates).  This look-up serves what has a method's name but no ``_target_``: a
checkpoint without ``cselab_method_class`` (``cselab.load(path, method=...)``) and the command-line tools."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cselab.model.spec import ConfigError

if TYPE_CHECKING:
    from cselab.methods.base import ContrastiveMethod


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def _registered() -> list[type[ContrastiveMethod]]:
    """Every method class declared in a method folder (each folder's ``method`` module imported first)."""
    import cselab.methods
    from cselab.methods.base import ContrastiveMethod

    for info in pkgutil.iter_modules(cselab.methods.__path__):
        if info.ispkg:
            importlib.import_module(f"cselab.methods.{info.name}.method")
    return [c for c in _subclasses(ContrastiveMethod) if "method_name" in vars(c) and c.__module__.startswith("cselab.methods.")]


def known_methods() -> dict[str, type[ContrastiveMethod] | Callable[..., Any]]:
    """``method_name`` -> the class, or its ``factory`` where it declares one (``baseline``:
    :func:`cselab.methods.baseline.method.build_baseline`), over every method folder of :mod:`cselab.methods`
    (``cselab.methods.<name>.method``, imported)."""
    return {c.method_name: getattr(c, "factory", c) for c in _registered()}


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


def recorded_class(path: str) -> type[ContrastiveMethod]:
    """The class a checkpoint records (``cselab_method_class``, ``module.Class``); a class whose module has moved
    since (e.g. ``cselab.methods.prompt_tuning.DCPCSE`` before the method folders) is found by its class name among
    the registered methods.

    Raises:
        ValueError: no registered method class has that name (lists them).
    """
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        classes = {c.__qualname__: c for c in _registered()}
        if name not in classes:
            raise ValueError(f"cselab_method_class={path!r}: no such class; the registered ones are "
                             f"{sorted(classes)}") from None
        return classes[name]

