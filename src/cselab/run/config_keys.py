"""Keys that no code reads are refused: ``+optim.lrr=1e-4`` (Hydra's own hint for a typo of ``optim.lr``) would
otherwise train with the default learning rate and write ``results.json`` as if nothing were wrong.

A key added with ``+`` / ``++`` is accepted when something reads it:

* it sits under a node that is instantiated (a ``_target_`` node: ``trainer``, ``callbacks.<name>``,
  ``data.datamodule``, ``loss`` ...: the class's constructor takes or refuses it), or under ``callbacks`` (a new
  callback, ``+callbacks.<name>._target_=...``) or ``hydra``;
* the config names it in an interpolation (``${oc.select:method.head_init,null}``, ``backbone.dtype`` ...);
* its last part is a name the cselab code reads (a string literal such as ``node.get("decay_steps")``, an attribute
  ``node.data.streaming``, a dataclass field or keyword argument; this file's examples excepted): :func:`code_names`.

Anything else is refused before any weights load with the closest known key (``optim.lrr`` -> ``optim.lr``).
Group selections (``+experiment=demo``) are Hydra's and pass.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

from cselab.io.config import override_key
from cselab.model.spec import ConfigError

#: top-level nodes whose new keys are always accepted (a new callback: its node is checked when built)
OPEN_NODES = ("callbacks", "hydra")
_SOURCE = Path(__file__).resolve().parents[1]  # src/cselab: every module of the package


@functools.lru_cache(maxsize=1)
def code_names() -> frozenset[str]:
    """Every identifier the cselab package reads as a config key could be read: string literals, attribute
    names after a dot, keyword arguments and dataclass fields, from ``src/cselab/**/*.py``."""
    names: set[str] = set()
    pattern = re.compile(r"""["']([A-Za-z_]\w*)["']|\.([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\s*[:=]""")
    for path in _SOURCE.rglob("*.py"):
        if path.name == Path(__file__).name:  # (its own examples are not reads)
            continue
        for match in pattern.finditer(path.read_text(encoding="utf-8", errors="replace")):
            names.add(next(g for g in match.groups() if g))
    return frozenset(names)


def _interpolated(cfg: DictConfig) -> set[str]:
    """The dotted keys the config's interpolations name (``${a.b}``, ``${oc.select:a.b,null}``)."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict | list):
            for value in node.values() if isinstance(node, dict) else node:
                walk(value)
        elif isinstance(node, str) and "${" in node:
            found.update(re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", node))

    walk(OmegaConf.to_container(cfg, resolve=False))
    return found


def _keys(node, prefix: str = "") -> Iterable[str]:
    if isinstance(node, DictConfig):
        for key in node.keys():
            path = f"{prefix}{key}"
            yield path
            yield from _keys(node._get_node(key), f"{path}.")


def _instantiated_parent(cfg: DictConfig, parts: list[str], interpolated: set[str]) -> bool:
    """A node above the key has a ``_target_`` of its own (not one copied elsewhere: ``method._target_`` is the
    ``module`` node's, whose arguments are named one by one)."""
    for end in range(1, len(parts)):
        prefix = ".".join(parts[:end])
        node = OmegaConf.select(cfg, prefix, default=None, throw_on_missing=False)
        if isinstance(node, DictConfig) and "_target_" in node and f"{prefix}._target_" not in interpolated:
            return True
    return False


def closest_key(cfg: DictConfig, key: str) -> str | None:
    """The known key nearest to ``key``: a sibling first (``optim.lrr`` -> ``optim.lr``), else any key."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    if isinstance(node, DictConfig):
        siblings = [str(k) for k in node.keys() if str(k) != leaf]
        match = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.5)
        if match:
            return f"{parent}.{match[0]}" if parent else match[0]
    others = [k for k in _keys(cfg) if k != key and not k.startswith(f"{key}.")]
    match = difflib.get_close_matches(key, others, n=1, cutoff=0.6)
    return match[0] if match else None


def added_keys(overrides: Iterable[str], groups: Iterable[str] = ()) -> list[tuple[str, str]]:
    """``(override, key)`` of each ``+key=value`` / ``++key=value`` that is not a config-group selection."""
    groups = set(groups)
    out = []
    for override in overrides:
        if not override.startswith("+") or "=" not in override:
            continue
        key = override.lstrip("+").split("=", 1)[0].strip()
        if "@" in key or key in groups or not key:
            continue
        out.append((override, key))
    return out


def check_added_keys(cfg: DictConfig, overrides: Iterable[str], groups: Iterable[str] = ()) -> None:
    """Refuse a ``+key`` that nothing reads (module docstring).

    Args:
        cfg: the composed config (with the additions).
        overrides: the command's overrides (Hydra's ``overrides.task``).
        groups: the config-group names (``hydra.runtime.choices``): ``+experiment=...`` selects one.

    Raises:
        ConfigError: one line naming the override, the key and the closest known key.
    """
    interpolated = _interpolated(cfg)
    for override, key in added_keys(overrides, groups):
        parts = key.split(".")
        if (parts[0] in OPEN_NODES or key in interpolated or _instantiated_parent(cfg, parts, interpolated)
                or parts[-1] in code_names()):
            continue
        near = closest_key(cfg, key)
        hint = f"; did you mean {near}? (type {near}={override.split('=', 1)[1]}, without '+')" if near else ""
        raise ConfigError(f"{override}: no code reads {key}, so it would change nothing{hint}. Nothing was run "
                          "(docs/configuration.md lists the keys; +callbacks.<name>... adds a callback)")


def missing_key_error(overrides: list[str], config_dir: str | Path, config_name: str = "config") -> str | None:
    """One line for a plain ``key=value`` override whose key the config lacks (``optim.lrr=1e-4``), naming the
    closest known key, or ``None`` when the overrides compose (or fail for another reason, which Hydra reports).

    Hydra's own message for it suggests ``+optim.lrr=1e-4``, which :func:`check_added_keys` then refuses; this
    names ``optim.lr`` at once.  Composes the config once (about 0.2 s, no weights, no interpolation resolved);
    a ``-m`` sweep's values (``a,b``) are Hydra's to parse: the caller skips it.
    """
    def attempt(items: list[str]):
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            return compose(config_name, overrides=items)

    try:
        attempt(list(overrides))
        return None
    except ConfigCompositionException as err:
        match = re.search(r"Could not override '([^']+)'", str(err))
        if not match:
            return None
        key = match.group(1)
    except Exception:  # noqa: BLE001 -- anything else is Hydra's to report, with its own message
        return None
    rest = [o for o in overrides if override_key(o) != key]
    try:
        cfg = attempt(rest)
    except Exception:  # noqa: BLE001
        return None
    near = closest_key(cfg, key)
    value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key), "...")
    hint = f"; did you mean {near}? (type {near}={value})" if near else ""
    return (f"{key}={value}: the config has no key {key}{hint}. Adding it with +{key}=... is refused too when no code "
            "reads it (docs/configuration.md)")
