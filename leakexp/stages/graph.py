"""The ``graph`` stage: the A-leakage audit of the synthetic edge-split graph benchmark and its vertex re-split, on
the embedded defaults (``make demo``; ``leakexp graph-audit`` audits any benchmark)."""

from __future__ import annotations

from pathlib import Path

from leakexp.runner.stage import Context, Stage
from leakexp.toolkit import graph


def _graph(ctx: Context, tmp: Path) -> dict:
    return graph.demo(tmp, seed=0)


GRAPH_DEMO = Stage("graph", version=1, compute=_graph, path=lambda p, c: ["synthetic"],
                   describe="the A-leakage audit of the synthetic edge-split graph benchmark and its vertex re-split")

