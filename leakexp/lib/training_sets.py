"""Controlled-leakage training sets (paper, Section 4, "Training Datasets").

Per test corpus, three types × the configured sizes:

- ``none``: random non-leaking training queries, balanced between MS MARCO and ORCAS (±1);
- ``msm``: a fixed number of verified leaking queries of the corpus, then non-leaking fillers. A query verified for
  several topics (Robust04's "industrial espionage" for topics 311 and 389) is a leak of each (Table 2 counts 648
  Robust04 leaks of 642 queries) but one training query: its instance (the query, its relevant document and a
  BM25 negative) is the same whatever the topic, and the paper draws "a fixed number of random manually verified
  leaking queries", so it is drawn once; memorization scores it for every topic it leaks for;
- ``test``: the corpus's own topics (each ``k`` times, different TREC-judged documents each time), then fillers.
  A topic without a relevant or without a judged non-relevant document cannot leak a pair: it is skipped and
  listed in the manifest, and the leaked part falls short by its occurrences (the authors' Robust04 Test sets
  hold 996, 1,996, ... instances: topic 672 has no relevant judgment), or ``top_up`` spreads the configured
  number over the usable topics.

Every query contributes a positive then a negative instance (kept consecutive). Fillers are the prefix of
one seeded, source-interleaved permutation of all non-candidate queries, so each size's fillers are a
prefix of the next size's and the three types of one size share their fillers: comparisons differ only in
the leaked part. Negatives of training queries are a seeded random non-relevant document from the query's
BM25 top-100 on the training collection (Nogueira et al.); a query always gets the same pair. Training
queries and their judgments are keyed by (source, qid): MS MARCO and ORCAS number their queries independently.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

from leakexp.data.types import SOURCES, Collection, TrainPool
from leakexp.lib.seeded import draw_two, stable_rng, stable_seeds

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


LEAKAGE_TYPES = ("none", "msm", "test")
MISSING_JUDGMENTS = ("skip", "top_up")  # what test leakage does with topics that cannot give a pair
INSTANCE_COLUMNS = ["pair", "qid", "query", "docno", "text", "label", "origin", "source"]


class BuildError(ValueError):
    """A training set that cannot be built as configured; the message names corpus, type, size, numbers."""


def filler_order(pool: TrainPool, excluded: set[tuple[str, str]], seed: int) -> pd.DataFrame:
    """All non-candidate queries in one seeded permutation, alternating MS MARCO and ORCAS.

    Any prefix is balanced between the sources (±1) until the smaller source runs out.
    """
    import pandas as pd

    per_source = []
    for source in SOURCES:
        q = pool.source_queries(source)
        keep = [(source, qid) not in excluded for qid in q.qid]
        q = q[keep].reset_index(drop=True)
        perm = stable_rng(seed, "fillers", source).permutation(len(q))
        per_source.append(q.iloc[perm].reset_index(drop=True))
    a, b = per_source
    n = min(len(a), len(b))
    inter = np.empty(2 * n, dtype=np.int64)
    inter[0::2], inter[1::2] = np.arange(n), np.arange(n) + len(a)
    both = pd.concat([a, b], ignore_index=True)
    tail = list(range(n, len(a))) + list(range(len(a) + n, len(a) + len(b)))
    return both.iloc[list(inter) + tail].reset_index(drop=True)[["qid", "text", "source"]]


def query_key(source: str, qid: str) -> str:
    """One string per training query, unique over both sources (e.g. for a BM25 run's query ids)."""
    return f"{source}:{qid}"


def split_query_key(keys: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(source, qid) of :func:`query_key` strings."""
    parts = keys.astype(str).str.split(":", n=1, expand=True)
    return parts[0], parts[1]


@dataclass
class Negatives:
    """Positive and negative documents of training queries, from their qrels and BM25 top-k, by (source, qid).

    Held as arrays, so that a million queries are paired at once (:meth:`pairs`, no Python per query). Each
    (source, qid) is a query code (``qids`` x ``sources`` positions); ``rel_q``/``rel_doc``: the distinct relevant
    documents of each query, grouped by code, in docno order; ``run_q``/``run_doc``/``run_rel``: the BM25 top-k
    grouped by code, in rank order (ties in input order), ``run_rel`` marking the query's own relevant documents.
    A query's candidate negatives are its run's other rows (a docno listed twice counts twice)."""

    sources: pd.Index
    qids: pd.Index
    rel_q: np.ndarray
    rel_doc: np.ndarray
    run_q: np.ndarray
    run_doc: np.ndarray
    run_rel: np.ndarray
    seed: int

    @classmethod
    def from_frames(cls, qrels: pd.DataFrame, run: pd.DataFrame, seed: int) -> "Negatives":
        """``qrels`` (source, qid, docno) and a BM25 ``run`` (source, qid, docno, rank)."""
        import pandas as pd

        for frame, what in ((qrels, "qrels"), (run, "run")):
            if "source" not in frame.columns:
                raise ValueError(f"training {what} need a 'source' column: queries are keyed by (source, qid)")
        keys = ["source", "qid"]
        qrels, run = qrels.dropna(subset=keys), run.dropna(subset=keys)
        n_rel = len(qrels)
        src_codes, sources = pd.factorize(pd.concat([qrels.source, run.source], ignore_index=True))
        qid_codes, qids = pd.factorize(pd.concat([qrels.qid, run.qid], ignore_index=True))
        q = qid_codes.astype(np.int64) * max(1, len(sources)) + src_codes
        # relevant documents: distinct, grouped by query, in docno order (codes of the sorted distinct docnos)
        doc_codes, docnos = pd.factorize(qrels.docno, sort=True)
        n_docs = max(1, len(docnos))
        rel_pairs = np.sort(q[:n_rel] * n_docs + doc_codes)
        rel_pairs = rel_pairs[np.concatenate([[True], rel_pairs[1:] != rel_pairs[:-1]])] if n_rel else rel_pairs
        rel_q, rel_doc = rel_pairs // n_docs, np.asarray(docnos, dtype=object)[rel_pairs % n_docs]
        # the run grouped by query in rank order, ties in input order (a stable sort; none when already so)
        run_q, rank = q[n_rel:], run["rank"].to_numpy()
        run_doc = run.docno.to_numpy(dtype=object)
        dq, dr = np.diff(run_q), np.diff(rank)
        if not ((dq > 0) | ((dq == 0) & (dr >= 0))).all():
            order = np.lexsort((rank, run_q))
            run_q, run_doc = run_q[order], run_doc[order]
        # a run row is relevant when its docno is one of its query's relevant docnos (compared in place)
        start = np.searchsorted(rel_q, run_q, "left")
        count = np.searchsorted(rel_q, run_q, "right") - start
        run_rel = np.zeros(len(run_q), dtype=bool)
        rows, k = np.flatnonzero(count > 0), 0
        while len(rows):
            run_rel[rows] |= run_doc[rows] == rel_doc[start[rows] + k]
            k += 1
            rows = rows[count[rows] > k]
        return cls(pd.Index(sources), pd.Index(qids), rel_q, rel_doc, run_q, run_doc, run_rel, int(seed))

    def _decode(self, codes: np.ndarray) -> list[tuple]:
        n = max(1, len(self.sources))
        return list(zip(self.sources[codes % n], self.qids[codes // n]))

    @staticmethod
    def _lists(q: np.ndarray, docs: np.ndarray, decode) -> dict:
        cuts = np.flatnonzero(np.diff(q)) + 1
        return dict(zip(decode(q[np.concatenate([[0], cuts])] if len(q) else q),
                        (list(d) for d in np.split(docs, cuts)) if len(q) else []))

    @property
    def qrels(self) -> dict[tuple[str, str], list[str]]:
        """(source, qid) -> relevant docnos (sorted)."""
        return self._lists(self.rel_q, self.rel_doc, self._decode)

    @property
    def ranked(self) -> dict[tuple[str, str], list[str]]:
        """(source, qid) -> BM25 top-k docnos, in rank order."""
        return self._lists(self.run_q, self.run_doc, self._decode)

    def codes(self, queries: pd.DataFrame) -> np.ndarray:
        """The query code of each row of ``queries`` (source, qid); -1 for a query in neither frame."""
        s = self.sources.get_indexer(queries.source)
        i = self.qids.get_indexer(queries.qid)
        return np.where((s >= 0) & (i >= 0), i.astype(np.int64) * max(1, len(self.sources)) + s, -1)

    def pairs(self, queries: pd.DataFrame) -> pd.DataFrame:
        """Per row of ``queries`` (source, qid), in order: ``pos`` and ``neg`` docnos (None without a relevant or
        without a candidate negative document) and ``ok``. The draws are those of the seeded generator of
        ``(seed, "pair", source, qid)``: a relevant document, then a candidate negative, uniformly."""
        import pandas as pd

        code = self.codes(queries)
        neg_q, neg_doc = self.run_q[~self.run_rel], self.run_doc[~self.run_rel]
        rel_start = np.searchsorted(self.rel_q, code, "left")
        n_rel = np.searchsorted(self.rel_q, code, "right") - rel_start
        neg_start = np.searchsorted(neg_q, code, "left")
        n_neg = np.searchsorted(neg_q, code, "right") - neg_start
        ok = (code >= 0) & (n_rel > 0) & (n_neg > 0)
        pos = np.full(len(code), None, dtype=object)
        neg = np.full(len(code), None, dtype=object)
        at = np.flatnonzero(ok)
        if len(at):
            prefix = f"{self.seed}:pair:"
            source, qid = queries.source.to_numpy()[at], queries.qid.to_numpy()[at]
            seeds = stable_seeds([f"{prefix}{s}:{i}" for s, i in zip(source, qid)])
            a, b = draw_two(seeds, n_rel[at], n_neg[at])
            pos[at] = self.rel_doc[rel_start[at] + a]
            neg[at] = neg_doc[neg_start[at] + b]
        return pd.DataFrame({"pos": pos, "neg": neg, "ok": ok})

    def pair(self, source: str, qid: str) -> tuple[str, str] | None:
        """(relevant docno, non-relevant docno) for a query, or None if it has no candidate negative."""
        import pandas as pd

        r = self.pairs(pd.DataFrame({"source": [source], "qid": [qid]})).iloc[0]
        return (r.pos, r.neg) if r.ok else None


def leaking_queries(pool: TrainPool, leaks: pd.DataFrame) -> pd.DataFrame:
    """The pool queries (qid, text, source, topic_qid, type) that verified leaks (train_qid, query, ...) name, one
    row per leak: a query verified for two topics is a leak of each, as Table 2 (a) counts them
    (:func:`training_queries` gives each query once).

    Annotations carry no source, so the query text tells which source's query an id names (exactly, else up
    to case and white space); an id that only one source has needs no text. An id that both sources have and
    whose text matches neither is an error: guessing would train on the wrong query.
    """
    found = pool.locate(leaks[["train_qid", "query", "topic_qid", "type"]])
    for kind, problem in (("missing", "is not in the training pool"),
                          ("ambiguous", "matches no query text of the pool, and both sources have its id")):
        bad = found[found.match == kind]
        if len(bad):
            r = bad.iloc[0]
            raise ValueError(f"annotated training query {r.train_qid} ({r.query!r}) {problem} {pool.name} "
                             f"({bad.train_qid.nunique()} such annotated queries); check the annotation files")
    found = found.drop_duplicates(["source", "qid", "topic_qid"])
    return found[["qid", "text", "source", "topic_qid", "type"]].reset_index(drop=True)


def training_queries(leaks: pd.DataFrame) -> pd.DataFrame:
    """Each leaking training query once, in the order of its first leak: a query verified for two topics is one
    query to train on (its instance does not depend on the topic)."""
    return leaks.drop_duplicates(["source", "qid"]).reset_index(drop=True)


def excluded_queries(pool: TrainPool, candidates: pd.DataFrame, annotations: pd.DataFrame,
                     leaks: list[pd.DataFrame]) -> set[tuple[str, str]]:
    """(source, qid) of the training queries No-Leakage sets must not use (paper, Section 4).

    Every candidate given (source, train_qid: those above the threshold), every annotated query whatever
    its recomputed similarity (an annotation whose id both sources have and whose text matches neither
    excludes both), and every verified leak (source, qid).
    """
    out = set(zip(candidates.source, candidates.train_qid))
    if len(annotations):
        found = pool.locate(annotations[["train_qid", "query"]])
        found = found[found.match != "missing"]
        out |= set(zip(found.source, found.qid))
    for frame in leaks:
        out |= set(zip(frame.source, frame.qid))
    return out


def _pairs_from_queries(queries: pd.DataFrame, negatives: Negatives, need: int, origin: str) -> tuple[list, int]:
    """Walk ``queries`` in order and keep the first ``need`` that have a positive and a negative; the count of
    those skipped before the last one kept (all of them when fewer than ``need`` qualify)."""
    if need <= 0 or not len(queries):
        return [], 0
    p = negatives.pairs(queries)
    ok = p.ok.to_numpy()
    kept = np.flatnonzero(ok)[:need]
    end = kept[-1] + 1 if len(kept) == need else len(ok)
    skipped = int((~ok[:end]).sum())
    cols = [queries[c].to_numpy()[kept].tolist() for c in ("qid", "text", "source")]
    docs = [p[c].to_numpy()[kept].tolist() for c in ("pos", "neg")]
    return [(q, t, s, a, b, origin) for q, t, s, a, b in zip(*cols, *docs)], skipped


def test_pairs(
    collection: Collection, n_queries: int, *, seed: int, field: str = "title", with_replacement: bool = False,
    missing_judgments: str = "skip", where: str = "",
) -> tuple[list, dict]:
    """Test-leakage pairs: each topic repeated, every occurrence with a different rel and non-rel doc.

    ``n_queries`` occurrences are spread evenly over the topics (the remainder to a seeded choice of topics).
    A topic without a relevant or without a judged non-relevant document is skipped: with ``skip`` its
    occurrences are lost (the leaked part falls short), with ``top_up`` they are spread over the usable
    topics. A topic with fewer distinct documents than occurrences reuses them if ``with_replacement``.
    Returns the pairs and ``{"skipped_topics": [...], "reused_documents": [...]}`` for the manifest.
    """
    if missing_judgments not in MISSING_JUDGMENTS:
        raise BuildError(f"{where}: build.test_missing_judgments={missing_judgments!r} is unknown; use skip or top_up")
    topics = list(collection.topics.values())
    if not topics:
        raise BuildError(f"{where}: the corpus has no topics")
    qrels = collection.qrels
    judged = {qid: g for qid, g in qrels.groupby("qid")}
    docs, skipped = {}, []
    for topic in topics:
        q = judged.get(topic.qid)
        rel = sorted(q[q.label >= 1].docno) if q is not None else []
        non = sorted(q[q.label == 0].docno) if q is not None else []
        if q is None or (not rel and not non):
            skipped.append({"topic": topic.qid, "reason": "no judgments"})
        elif not rel:
            skipped.append({"topic": topic.qid, "reason": "no relevant judgment"})
        elif not non:
            skipped.append({"topic": topic.qid, "reason": "no judged non-relevant document"})
        else:
            docs[topic.qid] = (rel, non)
    if not docs:
        raise BuildError(f"{where}: no topic of the corpus has a relevant and a judged non-relevant document; "
                         "test leakage needs both")
    spread = [t for t in topics if t.qid in docs] if missing_judgments == "top_up" else topics
    repeats = np.full(len(spread), n_queries // len(spread))
    order = stable_rng(seed, "test-topics", collection.name).permutation(len(spread))
    repeats[order[: n_queries % len(spread)]] += 1
    out, reused = [], []
    for topic, k in zip(spread, repeats):
        if k == 0 or topic.qid not in docs:
            continue
        rel, non = docs[topic.qid]
        rng = stable_rng(seed, "test", collection.name, topic.qid)
        for name, label_docs in (("relevant", rel), ("non-relevant", non)):
            if len(label_docs) < k:
                if not with_replacement:
                    raise BuildError(
                        f"{where}: topic {topic.qid} has {len(label_docs)} {name} document(s) but needs {k} distinct "
                        "ones for its test-leakage occurrences; set build.test_with_replacement=true to reuse them"
                    )
                reused.append({"topic": topic.qid, "label": name, "documents": len(label_docs), "occurrences": int(k)})
        pos = rng.choice(len(rel), size=k, replace=len(rel) < k)
        neg = rng.choice(len(non), size=k, replace=len(non) < k)
        for i in range(k):
            out.append((topic.qid, topic.text(field), "test", rel[pos[i]], non[neg[i]], "test-leak"))
    return out, {"skipped_topics": skipped, "reused_documents": reused}


def build_set(
    *,
    corpus: str,
    leakage: str,
    size: int,
    fixed_queries: int,
    fillers: pd.DataFrame,
    negatives: Negatives,
    leaks: pd.DataFrame | None = None,
    collection: Collection | None = None,
    pool_docs=None,
    seed: int = 0,
    test_field: str = "title",
    take_all_leaks: bool = False,
    test_with_replacement: bool = False,
    test_missing_judgments: str = "skip",
) -> tuple[pd.DataFrame, dict]:
    """One training set as an instance frame (INSTANCE_COLUMNS) and its manifest.

    The set holds ``size`` instances unless test leakage skipped topics without judgments: then it is short by
    the lost occurrences (the fillers stay those of the configured leaked part, as in the authors' sets).
    """
    import pandas as pd

    where = f"corpus={corpus} leakage={leakage} size={size}"
    if leakage not in LEAKAGE_TYPES:
        raise BuildError(f"{where}: unknown leakage type; use one of {', '.join(LEAKAGE_TYPES)}")
    if size <= 0 or size % 2:
        raise BuildError(f"{where}: size must be a positive even number of instances (query = pos + neg)")
    n_queries = size // 2
    leaked: list = []
    note: dict = {}
    fillers_for = n_queries  # queries the leaked part and the fillers make together
    if leakage in ("msm", "test") and 2 * fixed_queries > size:
        raise BuildError(
            f"{where}: size {size} is smaller than the {2 * fixed_queries} fixed leaked instances "
            f"({fixed_queries} queries x 2); choose size >= {2 * fixed_queries}"
        )
    if leakage == "msm":
        if leaks is None or len(leaks) == 0:
            raise BuildError(f"{where}: no verified leaking queries for this corpus")
        # a query leaking for two topics is drawn once; the draw permutes the leaks in id order, so it depends on
        # the set of verified leaks, not on the order in which the annotations list them
        queries = training_queries(leaks).sort_values(["source", "qid"], kind="mergesort").reset_index(drop=True)
        perm = stable_rng(seed, "msm", corpus).permutation(len(queries))
        ordered = queries.iloc[perm][["qid", "text", "source"]].reset_index(drop=True)
        leaked, skipped = _pairs_from_queries(ordered, negatives, fixed_queries, "msm-leak")
        if len(leaked) < fixed_queries:
            usable = len(leaked)
            if not take_all_leaks:
                raise BuildError(
                    f"{where}: {usable} verified leaking queries are usable ({len(queries)} verified, {skipped} "
                    f"without a BM25 negative) but {fixed_queries} are requested; annotate more candidates, "
                    "lower corpus.fixed_leak_queries, or set build.take_all_leaks=true"
                )
            note = {"leaks_requested": fixed_queries, "leaks_taken": usable}
    elif leakage == "test":
        if collection is None:
            raise BuildError(f"{where}: test leakage needs the test collection")
        leaked, info = test_pairs(collection, fixed_queries, seed=seed, field=test_field,
                                  with_replacement=test_with_replacement, missing_judgments=test_missing_judgments,
                                  where=where)
        note = {"test_missing_judgments": test_missing_judgments, **info}
        fillers_for = n_queries - (fixed_queries - len(leaked))  # skipped occurrences are not filled
    need = fillers_for - len(leaked)
    filled, skipped = _pairs_from_queries(fillers, negatives, need, "filler")
    if len(filled) < need:
        raise BuildError(
            f"{where}: the filler pool is exhausted: it holds {len(filled)} non-leaking queries with a BM25 negative "
            f"({skipped} more have none) but this set needs {need}; choose size <= {size - 2 * (need - len(filled))} "
            "or a larger training pool"
        )
    rows = []
    for pair, (qid, text, source, pos, neg, origin) in enumerate(leaked + filled):
        for docno, label in ((pos, 1), (neg, 0)):
            doc_text = collection.docs[docno] if origin == "test-leak" else pool_docs[docno]
            rows.append((pair, qid, text, docno, doc_text, label, origin, source))
    frame = pd.DataFrame(rows, columns=INSTANCE_COLUMNS)
    counts = frame.groupby(["origin", "source"]).size()
    manifest = {
        "corpus": corpus, "leakage": leakage, "size": size, "instances": len(frame), "queries": n_queries,
        "by_origin": {k: int(v) for k, v in frame.origin.value_counts().sort_index().items()},
        "by_source": {k: int(v) for k, v in frame.source.value_counts().sort_index().items()},
        "by_origin_source": {f"{o}/{s}": int(v) for (o, s), v in counts.items()},
        "leaked_instances": 2 * len(leaked),
        "leaked_requested": 2 * fixed_queries if leakage != "none" else 0,
        "leaked_shortfall": 2 * (fixed_queries - len(leaked)) if leakage != "none" else 0,
        "leakage_ratio": round(2 * len(leaked) / size, 6),
        "content_hash": content_hash(frame),
        "build_seed": seed,
        **note,
    }
    return frame, manifest


def content_hash(frame: pd.DataFrame) -> str:
    h = hashlib.sha256()
    for row in frame[INSTANCE_COLUMNS].itertuples(index=False):
        h.update(json.dumps(list(row), default=str).encode())
    return h.hexdigest()


def write_set(out: Path, frame: pd.DataFrame, manifest: dict) -> None:
    frame.to_parquet(out / "instances.parquet", index=False)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def export_monot5(frame: pd.DataFrame, path: Path) -> Path:
    """The monoT5 text format: ``Query: q Document: d Relevant:`` TAB ``true``/``false``, one per line."""
    with open(path, "w", encoding="utf-8") as f:
        for r in frame.itertuples(index=False):
            q, d = " ".join(r.query.split()), " ".join(r.text.split())
            f.write(f"Query: {q} Document: {d} Relevant:\t{'true' if r.label else 'false'}\n")
    return path
