"""cselab: prompt-based contrastive sentence embeddings on Lightning + Hydra."""
__version__ = "0.1.0"
