"""The ``graph-audit`` stage: the A-leakage audit of the synthetic edge-split graph benchmark and its vertex re-split, on
the embedded defaults (``make demo``; ``leakexp graph-audit`` audits any benchmark)."""

from __future__ import annotations

from pathlib import Path

from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage
from leakexp.toolkit import graph


@register_stage
class GraphAudit(Stage):
    """the A-leakage audit of the synthetic edge-split graph benchmark and its vertex re-split"""

    name, version, keyed_as = "graph-audit", 1, "graph"
    demo = True

    def path(self, p: dict, c: Config) -> list:
        return ["synthetic"]

    def compute(self, ctx: Context, tmp: Path) -> dict:
        return graph.demo(tmp, seed=0)

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of(self.name)]
