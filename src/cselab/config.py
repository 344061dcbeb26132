"""OmegaConf resolvers used by the configs (registered on import, before Hydra composes)."""

from __future__ import annotations

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """``${eq:a,b}`` -> ``a == b`` (e.g. SimCSE's ``mlp_only_train: ${eq:${setting.name},unsup}``)."""
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a) == str(b))


register_resolvers()


#: override keys (and their sub-keys) that change where or how a run runs, never its results
OUTPUT_ONLY_KEYS: tuple[str, ...] = (
    "group", "variant", "data_dir", "logger", "hydra", "ckpt_path", "overwrite", "compile",
    "activation_checkpointing",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.log_every_n_steps",
    "trainer.save_last", "trainer.save_every_n_steps", "eval.batch_size", "data.num_workers",
)
#: override keys that name a run's coordinates (W&B tags of their own)
COORDINATE_KEYS: tuple[str, ...] = ("method", "backbone", "setting", "seed", "experiment", "sweep")


def override_key(item: str) -> str:
    """The key of a Hydra override ``[+~]key=value`` (``+objective=x`` -> ``objective``)."""
    return item.split("=", 1)[0].lstrip("+~")


def key_matches(key: str, keys: tuple[str, ...]) -> bool:
    """``key`` is one of ``keys`` or below one (``trainer.save_last``, ``hydra/launcher``, ``logger.wandb``)."""
    return any(key == k or key.startswith(k + ".") or key.startswith(k + "/") for k in keys)


def variant_name(overrides: list[str]) -> str:
    """The W&B ``variant`` tag of a job: its command-line / sweep overrides that change the model, sorted and
    joined with ``,`` (``denoise=pad,prompt=cot_bert``), or ``default``.

    Left out: the run's coordinates (:data:`COORDINATE_KEYS`: tags of their own) and what only changes where or
    how it runs (:data:`OUTPUT_ONLY_KEYS`: logging, paths, resume, compile, activation checkpointing, progress
    bar, eval / loader batch sizes).  ``trainer.max_steps`` and the like stay: they change the model.
    """
    kept = [item.lstrip("+") for item in overrides
            if not key_matches(override_key(item), COORDINATE_KEYS + OUTPUT_ONLY_KEYS)]
    return ",".join(sorted(kept)) or "default"
