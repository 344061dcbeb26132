"""OmegaConf resolvers used by the configs (registered on import, before Hydra composes)."""

from __future__ import annotations

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """``${eq:a,b}`` -> ``a == b`` (e.g. SimCSE's ``mlp_only_train: ${eq:${setting.name},unsup}``)."""
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a) == str(b))


register_resolvers()
