"""The ``embed`` and ``detect`` stages: leakage candidates from Sentence-BERT embeddings and an exact Faiss
inner-product search (paper, Section 3; what the candidates are: ``leakexp.lib.candidates``).

Every training query is embedded once (normalised, so inner product = cosine), in chunks written to a
memory-mapped file; a killed run resumes at the first unfinished chunk. Every topic field (title,
description, each variant) searches one exact index per source (msmarco, orcas) for its top-k neighbours.
Indexes are built shard by shard and the per-shard top-k merged, so memory stays bounded at ORCAS scale
and the result is still exact.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Annotated, Literal, TYPE_CHECKING

import numpy as np
from pydantic import Field

from leakexp.data.types import SOURCES
from leakexp.lib.candidates import CANDIDATE_COLUMNS, topic_fields
from leakexp.lib.dense import embed_to_memmap, encode, exact_topk, load_sbert, sbert_slug
from leakexp.lib.hub import require_sbert
from leakexp.runner.schema import Name, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage
from leakexp.runner.store import atomic_write_json, read_json
from leakexp.stages.sources import check_variants, require_variants_of_corpora

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)

EMBED_CHUNK = 65536  # queries per resumable chunk of an embedding artifact


def open_embeddings(path: Path) -> np.ndarray:
    meta = read_json(path / "meta.json")
    return np.memmap(path / "emb.f32", dtype=np.float32, mode="r", shape=(max(meta["n"], 1), meta["dim"]))[: meta["n"]]


@register_stage
class Embed(Stage):
    """SBERT embeddings of one source's training queries"""

    name, version = "embed", 1
    reads = ("detect.sbert",)

    def inputs(self, p: dict, c: Config) -> dict:
        return {"pool": Ask.of("pool")}

    def path(self, p: dict, c: Config) -> list:
        return [sbert_slug(c.settings("detect").sbert), p["source"]]

    def compute(self, ctx: Context, tmp: Path) -> dict:
        source, sbert = ctx.params["source"], ctx.settings("detect").sbert
        q = ctx.inputs["pool"].source_queries(source).reset_index(drop=True)
        partial = ctx.path.parent / f"{ctx.path.name}.partial"  # survives a kill: finished chunks are kept
        embed_to_memmap(load_sbert(sbert), q.text.tolist(), partial, batch_size=ctx.runtime.embed_batch_size,
                        chunk_size=EMBED_CHUNK, desc=f"embed {source}")
        (partial / "emb.f32").rename(tmp / "emb.f32")
        atomic_write_json(tmp / "meta.json", read_json(partial / "meta.json"))
        q[["qid"]].to_parquet(tmp / "qids.parquet", index=False)
        shutil.rmtree(partial)
        return {"texts": len(q)}

    opener = staticmethod(open_embeddings)

    def require(self, s: Settings) -> None:
        """The SBERT model ``detect.sbert`` names loads without a download (leakexp.lib.hub)."""
        require_sbert(s.detect.sbert, "detect.sbert")

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of("embed", source=source) for source in SOURCES]


@register_stage
class Detect(Stage):
    """leakage candidates: the k most similar training queries of every topic field (SBERT + exact kNN)"""

    # 2: each field's k neighbours cut on the rounded similarity, ties by row (leakexp.lib.dense.exact_topk)
    name, version = "detect", 2
    help = "SBERT + Faiss leakage candidates; prints Table 1 counts"
    reads = ("detect.sbert", "detect.k", "detect.fields", "data.corpora")
    require = staticmethod(require_variants_of_corpora)

    def inputs(self, p: dict, c: Config) -> dict:
        return {"pool": Ask.of("pool"), **{f"embed-{s}": Ask.of("embed", source=s) for s in SOURCES},
                "collections": [Ask.of("collection", corpus=n) for n in c.settings("data").corpora]}

    def path(self, p: dict, c: Config) -> list:
        return [sbert_slug(c.settings("detect").sbert)]

    def compute(self, ctx: Context, tmp: Path) -> dict:
        import pandas as pd

        d = ctx.settings("detect")
        fields, k = list(d.fields), d.k
        collections = ctx.inputs["collections"]  # missing variants files are a config error (leakexp.runner.config)
        for coll in collections:
            check_variants(coll, {"name": coll.name, "variants": "of the corpus"}, fields)
        topics = topic_fields(collections, fields)
        topic_emb = encode(load_sbert(d.sbert), topics.text.tolist(), ctx.runtime.embed_batch_size)
        pool, frames = ctx.inputs["pool"], []
        for source in SOURCES:
            q, emb = pool.source_queries(source).reset_index(drop=True), ctx.inputs[f"embed-{source}"]
            start = time.time()
            sims, ids = exact_topk(emb, topic_emb, k)
            log.info("searched %d topic fields against %d %s queries in %.2fs", len(topics), len(q), source,
                     time.time() - start)
            rows = np.repeat(np.arange(len(topics)), sims.shape[1])
            flat_i, flat_s = ids.ravel(), sims.ravel()
            keep = flat_i >= 0
            t = topics.iloc[rows[keep]].reset_index(drop=True)
            hit = q.iloc[flat_i[keep]].reset_index(drop=True)
            frames.append(pd.DataFrame({
                "train_qid": hit.qid, "source": source, "query": hit.text, "topic_qid": t.topic_qid,
                "field": t.field, "variant_index": t.variant_index.astype(int), "similarity": flat_s[keep],
                "corpora": t.corpora,
            }))
        cands = pd.concat(frames, ignore_index=True)[CANDIDATE_COLUMNS]
        cands.to_parquet(tmp / "candidates.parquet", index=False)
        return {"rows": len(cands), "topic_fields": len(topics)}

    def opener(self, path: Path) -> pd.DataFrame:
        import pandas as pd

        return pd.read_parquet(path / "candidates.parquet")

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of("detect")]

    class Settings(Section):
        """``detect``: SBERT model, exact kNN depth and the similarity threshold (paper: 0.91, paraphrase-MiniLM)."""

        sbert: Name
        threshold: Annotated[float, Field(ge=-1, le=1)]
        k: PositiveInt
        batch_size: PositiveInt
        fields: Annotated[list[Literal["title", "description", "variant"]], Field(min_length=1)]
