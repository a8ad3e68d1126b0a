"""Leakage candidates: Sentence-BERT embeddings + exact Faiss inner-product search (paper, Section 3).

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
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from leakexp.data.types import SOURCES, Collection
from leakexp.lib.decisions import above, near, ranked
from leakexp.lib.dense import embed_to_memmap, encode, exact_topk, load_sbert, sbert_slug
from leakexp.lib.hub import require_sbert as require
from leakexp.runner.schema import Name, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Context, Stage
from leakexp.runner.store import atomic_write_json, read_json
from leakexp.stages.sources import check_variants, require_variants_of_corpora

log = logging.getLogger(__name__)

# corpora: the corpora ("|"-joined) whose topic has this text in this field; a topic id that two corpora use
# with different texts (the Common Core tracks reused Robust04 ids) is a different topic for each.
CANDIDATE_COLUMNS = ["train_qid", "source", "query", "topic_qid", "field", "variant_index", "similarity", "corpora"]


def topic_fields(collections: list[Collection], fields: list[str]) -> pd.DataFrame:
    """One row per (topic qid, field, text) with the corpora whose topic has it.

    A text that several corpora share for the same topic id and field is searched once; a topic id that a
    corpus reuses with another text (the Common Core tracks reused Robust04 ids) gets its own rows.
    """
    rows: dict[tuple[str, str, str], list] = {}
    for c in collections:
        for t in c.topics.values():
            texts = []
            if "title" in fields and t.title:
                texts.append(("title", -1, t.title))
            if "description" in fields and t.description:
                texts.append(("description", -1, t.description))
            if "variant" in fields:
                texts.extend(("variant", i, v) for i, v in enumerate(t.variants))
            for field_name, index, text in texts:
                row = rows.setdefault((t.qid, field_name, text), [t.qid, field_name, index, text, []])
                if c.name not in row[4]:
                    row[4].append(c.name)
    out = [(*r[:4], "|".join(r[4])) for r in rows.values()]
    return pd.DataFrame(out, columns=["topic_qid", "field", "variant_index", "text", "corpora"])



def above_threshold(cands: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Candidates with similarity > threshold (the paper's 'score > 0.91'), decided on the similarity rounded as
    leakexp.lib.decisions says, so that another CPU's float noise keeps the same candidates."""
    return cands[above(cands.similarity, threshold)]


def near_threshold(cands: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Candidates within one rounding step of the threshold: another CPU could decide them otherwise."""
    return cands[near(cands.similarity, threshold)]


def leak_pairs(cands: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """One row per (training query, topic) above the threshold, with its best similarity and field, and (if
    the candidates name them) every corpus whose text of the topic is above the threshold. The order (topic, then
    rounded similarity, then source, query id, field and variant) and so the field kept for a query whose title and
    variant match equally do not depend on float noise."""
    ties = [c for c in ("source", "train_qid", "field", "variant_index") if c in cands.columns]
    hits = ranked(above_threshold(cands, threshold), "similarity", by=["topic_qid"], ties=ties)
    key = ["source", "train_qid", "topic_qid"]
    pairs = hits.drop_duplicates(key).reset_index(drop=True)
    if "corpora" in hits.columns and len(pairs):
        union = hits.groupby(key).corpora.agg(lambda s: "|".join(sorted(set("|".join(s).split("|")))))
        pairs["corpora"] = [union[k] for k in zip(pairs.source, pairs.train_qid, pairs.topic_qid)]
    return pairs


def in_corpus(corpora: pd.Series, corpus: str) -> pd.Series:
    """Whether each "|"-joined corpora value names ``corpus``."""
    return corpora.map(lambda s: corpus in str(s).split("|")).astype(bool)


def table1(cands: pd.DataFrame, corpora: dict[str, list[str]], threshold: float) -> pd.DataFrame:
    """Topics (T) and queries (Q) above the threshold per corpus, field, and source set (paper's Table 1)."""
    hits = above_threshold(cands, threshold)
    rows = []
    for corpus, qids in corpora.items():
        h = hits[hits.topic_qid.isin(set(qids))]
        if "corpora" in h.columns:  # a reused topic id counts for the corpus whose text matched
            h = h[in_corpus(h.corpora, corpus)]
        for field_name, label in (("title", "Title"), ("description", "Description"), ("variant", "Variants"), (None, "Union")):
            f = h if field_name is None else h[h.field == field_name]
            for sources, slabel in ((("msmarco",), "MSM"), (("msmarco", "orcas"), "+ORC")):
                s = f[f.source.isin(sources)]
                rows.append({
                    "corpus": corpus, "field": label, "sources": slabel,
                    "T": s.topic_qid.nunique(), "Q": s[["source", "train_qid"]].drop_duplicates().shape[0],
                })
    return pd.DataFrame(rows)


def table1_wide(t: pd.DataFrame) -> pd.DataFrame:
    """Table 1 in the paper's layout: rows = field, columns = corpus x (MSM, +ORC) x (T, Q)."""
    rows = []
    for field_name in ("Title", "Description", "Variants", "Union"):
        row = {"Candidates": field_name}
        for corpus in dict.fromkeys(t.corpus):
            for sources in ("MSM", "+ORC"):
                hit = t[(t.corpus == corpus) & (t.field == field_name) & (t.sources == sources)].iloc[0]
                row[f"{corpus} {sources} T"] = int(hit["T"])
                row[f"{corpus} {sources} Q"] = int(hit["Q"])
        rows.append(row)
    return pd.DataFrame(rows)


# -- stages ----------------------------------------------------------------------------------------------
EMBED_CHUNK = 65536  # queries per resumable chunk of an embedding artifact


def _embed(ctx: Context, tmp: Path) -> dict:
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


def open_embeddings(path: Path) -> np.ndarray:
    meta = read_json(path / "meta.json")
    return np.memmap(path / "emb.f32", dtype=np.float32, mode="r", shape=(max(meta["n"], 1), meta["dim"]))[: meta["n"]]


def require_detection_model(s: Settings) -> None:
    """The SBERT model ``detect.sbert`` names loads without a download (leakexp.lib.hub)."""
    require(s.detect.sbert, "detect.sbert")


EMBED = Stage(
    "embed", version=1, reads=("detect.sbert",), inputs=lambda p, c: {"pool": Ask.of("pool")}, compute=_embed,
    opener=open_embeddings, path=lambda p, c: [sbert_slug(c.settings("detect").sbert), p["source"]],
    require=require_detection_model,
    describe="SBERT embeddings of one source's training queries",
)


def _detect(ctx: Context, tmp: Path) -> dict:
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


DETECT = Stage(
    # 2: each field's k neighbours cut on the rounded similarity, ties by row (leakexp.lib.dense.exact_topk)
    "detect", version=2, reads=("detect.sbert", "detect.k", "detect.fields", "data.corpora"),
    inputs=lambda p, c: {"pool": Ask.of("pool"), **{f"embed-{s}": Ask.of("embed", source=s) for s in SOURCES},
                         "collections": [Ask.of("collection", corpus=n) for n in c.settings("data").corpora]},
    compute=_detect, opener=lambda path: pd.read_parquet(path / "candidates.parquet"),
    path=lambda p, c: [sbert_slug(c.settings("detect").sbert)], require=require_variants_of_corpora,
    describe="leakage candidates: the k most similar training queries of every topic field (SBERT + exact kNN)",
)


class DetectSettings(Section):
    """``detect``: SBERT model, exact kNN depth and the similarity threshold (paper: 0.91, paraphrase-MiniLM)."""

    sbert: Name
    threshold: Annotated[float, Field(ge=-1, le=1)]
    k: PositiveInt
    batch_size: PositiveInt
    fields: Annotated[list[Literal["title", "description", "variant"]], Field(min_length=1)]
