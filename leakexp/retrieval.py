"""BM25 first stage via PyTerrier + PISA (k1 = 0.9, b = 0.4 as Anserini's default; no Java).

One PISA index per document collection lives in the store. Runs are cached as Parquet artifacts: the
top-100 of every test topic (what the re-rankers re-rank) and of every training query (where negatives
are sampled from).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd

from leakexp.store import Store

log = logging.getLogger(__name__)

# PISA's query parser chokes on some punctuation; BM25 ignores it anyway.
_UNSAFE = re.compile(r"[^\w\s]", re.UNICODE)


def clean_query(text: str) -> str:
    return " ".join(_UNSAFE.sub(" ", text).split())


@contextlib.contextmanager
def quiet_native(enabled: bool = True):
    """Silence PISA's C++ logs (fd 1) and progress bars (fd 2), which Python cannot redirect."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def _pisa():
    os.environ.setdefault("IR_DATASETS_HOME", str(Path.home() / ".ir_datasets"))
    from pyterrier_pisa import PisaIndex

    return PisaIndex


def build_index(
    store: Store,
    name: str,
    docs: Iterable[tuple[str, str]],
    *,
    k1: float = 0.9,
    b: float = 0.4,
    threads: int = 2,
    verbose: bool = False,
    fingerprint: str = "",
) -> Path:
    """PISA index of ``docs`` (docno, text) at ``index/<name>``; ``fingerprint`` identifies the docs."""
    path = store.path("index", name)
    config = {"stage": "index", "name": name, "docs": fingerprint, "stemmer": "porter2", "k1": k1, "b": b}

    def compute(tmp: Path) -> dict:
        PisaIndex = _pisa()
        count = 0

        def records() -> Iterator[dict]:
            nonlocal count
            for docno, text in docs:
                count += 1
                yield {"docno": docno, "text": text}

        with quiet_native(not verbose):
            index = PisaIndex(str(tmp / "pisa"), text_field="text", threads=threads)
            index.index(records())
            index.bm25(k1=k1, b=b)  # builds the BM25 score file now, so the index stays read-only later
        log.info("indexed %d documents of %s", count, name)
        return {"documents": count}

    return store.ensure(path, config, compute)


def bm25_search(
    index_path: Path,
    queries: pd.DataFrame,
    *,
    depth: int = 100,
    k1: float = 0.9,
    b: float = 0.4,
    threads: int = 2,
    verbose: bool = False,
) -> pd.DataFrame:
    """Top-``depth`` BM25 results (qid, query, docno, score, rank[0-based]) for a (qid, query) frame."""
    PisaIndex = _pisa()
    q = queries[["qid", "query"]].copy()
    q["query"] = q["query"].map(clean_query)
    with quiet_native(not verbose):
        index = PisaIndex(str(Path(index_path) / "pisa"), threads=threads)
        retriever = index.bm25(k1=k1, b=b, num_results=depth, threads=threads)
    res = retriever(q) if len(q) else pd.DataFrame(columns=["qid", "query", "docno", "score", "rank"])
    res = res.merge(queries[["qid", "query"]], on="qid", suffixes=("_clean", ""))
    # PISA's threads may return queries out of order: fix the input order, then rank
    position = {qid: i for i, qid in enumerate(queries.qid)}
    res = res.assign(_pos=res.qid.map(position)).sort_values(["_pos", "rank"], kind="mergesort")
    return res[["qid", "query", "docno", "score", "rank"]].reset_index(drop=True)


def bm25_run(
    store: Store,
    index_path: Path,
    name: str,
    queries: pd.DataFrame,
    *,
    depth: int = 100,
    k1: float = 0.9,
    b: float = 0.4,
    threads: int = 2,
    verbose: bool = False,
) -> pd.DataFrame:
    """Cached :func:`bm25_search` as the artifact ``bm25/<name>/run.parquet``."""
    path = store.path("bm25", name)
    index_marker = store.marker(index_path)
    config = {
        "stage": "bm25",
        "index": index_marker.config_hash if index_marker else str(index_path),
        "queries": pd.util.hash_pandas_object(queries[["qid", "query"]], index=False).sum().item(),
        "depth": depth,
        "k1": k1,
        "b": b,
    }

    def compute(tmp: Path) -> dict:
        res = bm25_search(index_path, queries, depth=depth, k1=k1, b=b, threads=threads, verbose=verbose)
        res.to_parquet(tmp / "run.parquet", index=False)
        return {"queries": int(queries.qid.nunique()), "rows": len(res)}

    store.ensure(path, config, compute)
    return pd.read_parquet(path / "run.parquet")
