"""What `make demo` runs beside the grid: the toolkit's other capabilities on the embedded defaults.

Each is a cached artifact in the store (a second demo finds it done), and each prints its key lines.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

GRAPH_DEMO_VERSION = 1


def graph_audit(pipeline) -> tuple[Path, list[str]]:
    """The A-leakage audit of the synthetic edge-split graph benchmark and of its vertex re-split."""
    from leakexp import graph

    config = {"stage": "graph-demo", "seed": 0, "version": GRAPH_DEMO_VERSION}
    store = pipeline.store
    path = store.ensure(store.keyed("graph", "synthetic", config=config), config,
                        lambda tmp: graph.demo(tmp, seed=0))
    figures = store.marker(path).figures
    return path, graph.summary_lines(figures["audit"]) + graph.summary_lines(figures["resplit"])


def extras(cfg: DictConfig, pipeline) -> list[str]:
    """Run every demo extra; returns the lines to print."""
    lines = []
    path, summary = graph_audit(pipeline)
    lines += [f"graph audit (synthetic benchmark, edge split vs vertex split): {path}", *summary]
    return lines
