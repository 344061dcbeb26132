"""cselab entry point: compose the Hydra config, then train and evaluate one run (or a -m sweep of them).

    python run.py                                         # PromptBERT unsup on the embedded MiniLM + wiki sample
    python run.py method=baseline pooler=avg train=false  # evaluate a raw backbone
    python run.py -m method=simcse,promptbert backbone=roberta_base
"""

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import cselab.config  # noqa: F401  (registers the config resolvers)


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from cselab.pipeline import run

    results = run(cfg, HydraConfig.get().runtime.output_dir)
    return results["test"].get("avg")


if __name__ == "__main__":
    main()
