"""The ``pair-audit`` stage: the toy world's training pool audited against its test collections, decontaminated and
resampled (``make demo``; ``leakexp audit``, ``decontaminate`` and ``resample`` do the same for any pair)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from leakexp.data.types import SOURCES
from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage
from leakexp.toolkit import audit, resample
from leakexp.toolkit.queries import side_from_collections, side_from_pool


class _Once:
    """An embedder that embeds each list of texts once: audit, decontamination and both resamplings embed the same
    training and test texts (a copy each time, so that no caller changes another's vectors). ``known``: vectors
    already computed, by text (the training queries' SBERT embeddings of the ``embed`` stage, which detection reads
    too): a list of training texts that all have one is not encoded again."""

    def __init__(self, embed, known: dict[str, np.ndarray] | None = None):
        self.embed, self.done, self.known = embed, {}, known or {}

    def __call__(self, texts: list[str], name: str):
        key = (name, tuple(texts))
        if key not in self.done:
            if name == "train" and texts and all(t in self.known for t in texts):
                self.done[key] = np.stack([self.known[t] for t in texts])
            else:
                self.done[key] = self.embed(texts, name)
        return self.done[key].copy()


def _stored_vectors(ctx: Context) -> dict[str, np.ndarray]:
    """Each training query's text -> its vector in the ``embed`` artifacts (same model, same texts)."""
    known = {}
    for source in SOURCES:
        q = ctx.inputs["pool"].source_queries(source).reset_index(drop=True)
        known.update(zip(q.text, np.asarray(ctx.inputs[f"embed-{source}"])))
    return known


@register_stage
class PairAudit(Stage):
    """audit, decontamination and resampling of the toy world's train/test pair"""

    # 3: similarities rounded before every order and threshold (leakexp.lib.decisions); data.yaml's paths relative
    name, version, keyed_as = "pair-audit", 3, "audit"
    reads = ("detect.sbert", "detect.k", "detect.threshold", "detect.fields", "data.corpora")
    demo = True

    def inputs(self, p: dict, c: Config) -> dict:
        return {"pool": Ask.of("pool"), **{f"embed-{s}": Ask.of("embed", source=s) for s in SOURCES},
                "collections": [Ask.of("collection", corpus=n) for n in c.settings("data").corpora]}

    def compute(self, ctx: Context, tmp: Path) -> dict:
        """The toy world's training pool against its test collections: audit, decontaminate and resample."""
        d = ctx.settings("detect")
        train = side_from_pool(ctx.inputs["pool"])
        test = side_from_collections(ctx.inputs["collections"], fields=list(d.fields))
        embed = _Once(audit.SbertEmbedder(None, d.sbert, batch_size=ctx.runtime.embed_batch_size),
                      _stored_vectors(ctx))
        options = audit.AuditOptions(k=d.k, threshold=d.threshold)
        audit.audit(train, test, embed, tmp / "audit", options)
        resample.decontaminate(train, test, embed, tmp / "decontaminate", threshold=options.threshold, k=options.k,
                               relative_paths=True)
        n = len(train.queries)
        sizes = sorted({max(1, n // 8), max(1, n // 4), max(1, n // 2)})
        resample.restrain(train, test, embed, tmp / "resample", sizes=sizes, threshold=options.threshold, k=options.k)
        resample.resttest(train, test, embed, tmp / "resample", buckets=5, seed=0)
        outputs = {"audit": "audit", "decontaminate": "decontaminate", "restrain": "resample/restrain",
                   "resttest": "resample/resttest"}
        return {"outputs": outputs, "audit": json.loads((tmp / "audit" / "audit.json").read_text())}

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of(self.name)]
