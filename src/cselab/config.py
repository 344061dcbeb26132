"""OmegaConf resolvers used by the configs (registered on import, before Hydra composes)."""

from __future__ import annotations

from omegaconf import OmegaConf


def register_resolvers() -> None:
    """``${eq:a,b}`` -> ``a == b`` (e.g. SimCSE's ``mlp_only_train: ${eq:${setting.name},unsup}``)."""
    if not OmegaConf.has_resolver("eq"):
        OmegaConf.register_new_resolver("eq", lambda a, b: str(a) == str(b))


register_resolvers()


#: overrides that name the run's coordinates (tags of their own) or change nothing about the model's result
NOT_A_VARIANT = ("method", "backbone", "setting", "seed", "experiment", "sweep", "group", "variant", "logger",
                 "data_dir", "ckpt_path", "overwrite", "compile", "hydra", "trainer", "eval.batch_size",
                 "data.num_workers")


def variant_name(overrides: list[str]) -> str:
    """The W&B ``variant`` tag of a job: its command-line / sweep overrides that change the model, sorted and
    joined with ``,`` (``denoise=pad,prompt=cot_bert``), or ``default``.

    Left out: the run's coordinates (method, backbone, setting, seed: tags of their own), where and how it runs
    (``trainer.*``, ``logger``, ``hydra.*``, paths, ``ckpt_path``, ``compile.*``, eval / loader batch sizes).
    """
    kept = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if not any(key == k or key.startswith(k + ".") or key.startswith(k + "/") for k in NOT_A_VARIANT):
            kept.append(item.lstrip("+"))
    return ",".join(sorted(kept)) or "default"
