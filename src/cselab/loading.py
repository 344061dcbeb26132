"""Moved: :func:`cselab.load` lives in :mod:`cselab.methods.loading` (with the method classes it rebuilds).  This
module keeps the old import ``from cselab.loading import load`` working."""

from cselab.methods.loading import load

__all__ = ["load"]
