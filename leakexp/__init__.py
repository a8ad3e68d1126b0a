"""leakexp: how train-test leakage affects neural re-rankers (Fröbe et al., SPIRE 2022), and a leakage toolkit.

From Python, ``leakexp.open_store(path, overrides=[...])`` reads a store (``leakexp.api``, docs/python.md). The
name is resolved on first use, so ``import leakexp`` stays light: the command line and the toolkit import only what
they use.
"""

from __future__ import annotations

__all__ = ["open_store", "GridStore"]


def __getattr__(name: str):
    if name in __all__:
        from leakexp import api

        return getattr(api, name)
    raise AttributeError(f"module 'leakexp' has no attribute {name!r}")
