"""A method's own options, typed: each method that has some declares ONE frozen dataclass (its ``options_type``,
e.g. :class:`cselab.methods.esimcse.method.ESimCSEOptions`), whose fields are made by :func:`option` (default,
what a value must be, its check) and whose ``node`` names where the config holds them (``method.<node>``; ``""``:
the keys of ``method`` itself, RankCSE's ``method.teachers``).  :func:`build_options` builds it from that mapping
once -- the run's config-time check (:meth:`cselab.methods.base.ContrastiveMethod.check_config`) and the method's
constructor each build it once; a built instance is passed on as it is.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from cselab.model.spec import ConfigError

T = TypeVar("T")


def option(default: Any, expected: str, check: Callable[[Any], bool] | None = None) -> Any:
    """A field of an options dataclass: its ``default``, what a value must be (``expected``: the words of the error
    message) and a ``check`` of a value of the field's type (None: its type alone)."""
    return dataclasses.field(default=default, metadata={"expected": expected, "check": check})


def option_key(options_type: type, key: str) -> str:
    """The config key of a field: ``method.<node>.<key>`` (``node`` empty: ``method.<key>``)."""
    node = getattr(options_type, "node", "")
    return f"method.{node}.{key}" if node else f"method.{key}"


def legacy_keys(options_type: type) -> tuple[str, ...]:
    """The names under which cselab before the typed options held these options, as constructor arguments and as
    keys of the config's ``module`` node: the ``node`` (``esimcse``, ``rtd``), or for options read from
    ``method`` itself, the fields (RankCSE's ``teachers``, ``teacher_temperature``)."""
    node = getattr(options_type, "node", "")
    return (node,) if node else tuple(f.name for f in dataclasses.fields(options_type))


def _typed(value: Any, annotation: Any) -> tuple[bool, Any]:
    """``(value is of the annotation's type, the value as that type)``: ``bool`` is no number, an ``int`` is a
    ``float``; ``X | None`` is ``X`` (a null value is the default); another annotation is the field check's."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if annotation in (int, float) and not isinstance(value, bool) and isinstance(value, int | float):
        return annotation is float or isinstance(value, int), float(value) if annotation is float else value
    if annotation in (bool, str):
        return isinstance(value, annotation), value
    return annotation not in (int, float), value


def build_options(options_type: type[T], given: T | Mapping[str, Any] | None) -> T:
    """The options of ``options_type`` from a config mapping (absent or null keys: the defaults); an instance of
    ``options_type`` is returned as it is.  Each value must be of its field's type and pass its check; the
    dataclass's ``__post_init__`` checks what spans several fields.

    Raises:
        ConfigError: a key that is not a field (names ``method.<node>.<key>`` and the known ones), a value of the
            wrong type or out of range (names ``method.<node>.<key>=<value>`` and what was expected), or what
            ``__post_init__`` refuses.
    """
    if isinstance(given, options_type):
        return given
    node = getattr(options_type, "node", "")
    if given is not None and not isinstance(given, Mapping):
        raise ConfigError(f"method.{node}={given!r}: expected a mapping of {options_type.__name__}'s options")
    fields = {f.name: f for f in dataclasses.fields(options_type)}
    hints = typing.get_type_hints(options_type)
    values = {}
    for key, value in dict(given or {}).items():
        if key not in fields:
            raise ConfigError(f"{option_key(options_type, key)}: not an option of {options_type.__name__}; expected "
                              f"one of {sorted(fields)}")
        if value is None:
            continue
        meta = fields[key].metadata
        ok, typed = _typed(value, hints[key])
        if not ok or (meta.get("check") is not None and not meta["check"](typed)):
            raise ConfigError(f"{option_key(options_type, key)}={value!r}: expected {meta.get('expected', hints[key])}")
        values[key] = typed
    return options_type(**values)
