"""What `make demo` runs beside the grid: the toolkit's other capabilities on the embedded defaults.

Each is a stage (a second demo finds it done), and each prints its key lines.
"""

from __future__ import annotations

import json
from pathlib import Path

from leakexp.runner.stage import Ask, Context, Stage


def _graph(ctx: Context, tmp: Path) -> dict:
    from leakexp.toolkit import graph

    return graph.demo(tmp, seed=0)


GRAPH_DEMO = Stage("graph", version=1, compute=_graph, path=lambda p, c: ["synthetic"],
                   describe="the A-leakage audit of the synthetic edge-split graph benchmark and its vertex re-split")


class _Once:
    """An embedder that embeds each list of texts once: audit, decontamination and both resamplings embed the same
    training and test texts (a copy each time, so that no caller changes another's vectors)."""

    def __init__(self, embed):
        self.embed, self.done = embed, {}

    def __call__(self, texts: list[str], name: str):
        key = (name, tuple(texts))
        if key not in self.done:
            self.done[key] = self.embed(texts, name)
        return self.done[key].copy()


def _pair_audit(ctx: Context, tmp: Path) -> dict:
    """The toy world's training pool against its test collections: audit, decontaminate and resample."""
    from leakexp.toolkit import audit, resample

    d = ctx.config["detect"]
    train = audit.side_from_pool(ctx.inputs["pool"])
    test = audit.side_from_collections(ctx.inputs["collections"], fields=list(d["fields"]))
    embed = _Once(audit.SbertEmbedder(None, str(d["sbert"]), batch_size=int(ctx.runtime.get("embed_batch_size", 256))))
    options = audit.AuditOptions(k=int(d["k"]), threshold=float(d["threshold"]))
    audit.audit(train, test, embed, tmp / "audit", options)
    resample.decontaminate(train, test, embed, tmp / "decontaminate", threshold=options.threshold, k=options.k)
    n = len(train.queries)
    sizes = sorted({max(1, n // 8), max(1, n // 4), max(1, n // 2)})
    resample.restrain(train, test, embed, tmp / "resample", sizes=sizes, threshold=options.threshold, k=options.k)
    resample.resttest(train, test, embed, tmp / "resample", buckets=5, seed=0)
    outputs = {"audit": "audit", "decontaminate": "decontaminate", "restrain": "resample/restrain",
               "resttest": "resample/resttest"}
    return {"outputs": outputs, "audit": json.loads((tmp / "audit" / "audit.json").read_text())}


PAIR_AUDIT = Stage(
    "audit", version=1, reads=("detect.sbert", "detect.k", "detect.threshold", "detect.fields", "data.corpora"),
    inputs=lambda p, c: {"pool": Ask.of("pool"),
                         "collections": [Ask.of("collection", corpus=n) for n in c.at("data.corpora")]},
    compute=_pair_audit, describe="audit, decontamination and resampling of the toy world's train/test pair",
)


def extras(runner) -> list[str]:
    """Run every demo extra; returns the lines to print."""
    from leakexp.toolkit import audit, graph

    lines = []
    path = runner.ensure(Ask.of("audit"))
    figures = runner.store.marker(path).figures
    lines += [f"train/test audit of the toy world (leakexp audit, decontaminate, resample): {path}",
              *audit.format_summary(figures["audit"]).splitlines(),
              *(f"  {k}: {path / v}" for k, v in figures["outputs"].items())]
    path = runner.ensure(Ask.of("graph"))
    figures = runner.store.marker(path).figures
    lines += [f"graph audit (synthetic benchmark, edge split vs vertex split): {path}",
              *graph.summary_lines(figures["audit"]), *graph.summary_lines(figures["resplit"])]
    return lines
