"""cselab: prompt-based contrastive sentence embeddings on Lightning + Hydra.

``cselab.load(checkpoint).encode(sentences)`` embeds sentences with any trained method as at test.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "load":  # lazy: importing cselab stays light
        from cselab.methods.loading import load

        return load
    raise AttributeError(f"module 'cselab' has no attribute {name!r}")
