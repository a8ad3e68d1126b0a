"""What `make demo` runs beside the grid: the toolkit's other capabilities on the embedded defaults.

Each is a cached artifact in the store (a second demo finds it done), and each prints its key lines.
"""

from __future__ import annotations

import json
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


PAIR_DEMO_VERSION = 1


def pair_audit(pipeline) -> tuple[Path, list[str]]:
    """The toy world's training pool against its test collections: audit, decontaminate and resample."""
    from leakexp import audit

    d = pipeline.cfg.detect
    config = {"stage": "audit-demo", "version": PAIR_DEMO_VERSION, "pool": pipeline.pool_fingerprint,
              "collections": [pipeline.corpus_fingerprint(c) for c in pipeline.corpora], "sbert": d.sbert,
              "k": int(d.k), "threshold": float(d.threshold), "fields": sorted(d.fields)}
    store = pipeline.store

    def compute(tmp: Path) -> dict:
        outputs = audit.demo(pipeline, tmp)
        return {"outputs": {k: str(Path(v).relative_to(tmp)) for k, v in outputs.items()},
                "audit": json.loads((tmp / "audit" / "audit.json").read_text())}

    path = store.ensure(store.keyed("audit", pipeline.cfg.data.name, config=config), config, compute)
    figures = store.marker(path).figures
    lines = audit.format_summary(figures["audit"]).splitlines()
    return path, lines + [f"  {k}: {path / v}" for k, v in figures["outputs"].items()]


def extras(cfg: DictConfig, pipeline) -> list[str]:
    """Run every demo extra; returns the lines to print."""
    lines = []
    path, summary = pair_audit(pipeline)
    lines += [f"train/test audit of the toy world (leakexp audit, decontaminate, resample): {path}", *summary]
    path, summary = graph_audit(pipeline)
    lines += [f"graph audit (synthetic benchmark, edge split vs vertex split): {path}", *summary]
    return lines
