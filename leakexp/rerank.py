"""Re-ranking: the BM25 top-k of every topic of a corpus, scored by a trained model."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd

from leakexp.models.base import Reranker, rank_with_docno_ties


def rerank(model: Reranker, bm25: pd.DataFrame, docs, *, batch_size: int = 64, device: str = "cpu",
           bf16: bool = False) -> pd.DataFrame:
    """Re-rank a stored BM25 run with the PyTerrier pipeline ``bm25 >> text >> model``.

    Ties in the model's score are broken by docno (the paper), not by BM25's order. ``bf16``: autocast on CUDA.
    """
    import pyterrier as pt

    first_stage = pt.Transformer.from_df(bm25[["qid", "query", "docno", "score", "rank"]])
    text = pt.apply.generic(lambda df: df.assign(text=[docs[d] for d in df.docno]))
    pipeline = first_stage >> text >> model.transformer(batch_size=batch_size, device=device, bf16=bf16)
    topics = bm25[["qid", "query"]].drop_duplicates("qid")
    res = pipeline(topics)
    return rank_with_docno_ties(res[["qid", "query", "docno", "score"]])


def write_trec_run(run: pd.DataFrame, path: Path, tag: str) -> Path:
    """A gzipped TREC run file (1-based ranks) in the run's order."""
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for r in run.itertuples(index=False):
            f.write(f"{r.qid} Q0 {r.docno} {int(r.rank) + 1} {float(r.score):.8g} {tag}\n")
    return path
