"""Measures: nDCG@10 (graded), P@1 (label >= 1) and MFR, the mean first rank of a relevant document.

MFR (Fuhr's suggestion over MRR) is a custom ir_measures per-query measure, so ``pt.Experiment`` can use
it too. Lower is better. A query with no relevant document in its ranking has no first rank: by default
(``mfr_missing=skip``) it is left out of MFR's mean; ``mfr_missing=depth`` counts it as depth + 1.

One ranking for every measure: a run is evaluated in the order it is stored (its ``rank`` column, or score
descending with ties broken by ascending docno, as the paper and the re-ranking stage do). pytrec_eval,
behind ir_measures, would re-sort tied scores by *descending* docno (trec_eval's ``comp_sim_docno``), so the
measures are given rank-derived scores that have no ties.
"""

from __future__ import annotations

import math
from functools import lru_cache

import ir_measures
import pandas as pd


MEASURE_ORDER = ("nDCG@10", "P@1", "MFR")
LOWER_IS_BETTER = {"MFR"}
NO_RELEVANT = ("skip", "zero")
SELECTIONS = ("best", "max_effect")  # how the cross-validation chooses a size (leakexp.lib.stats)


MFR_DEFINITIONS = ("rank1", "rank0")  # the first relevant rank counted from 1 (Fuhr's MFR) or from 0


@lru_cache(maxsize=None)
def mfr_measure(missing: str = "skip", depth: int = 100, base: str = "rank1"):
    """The MFR measure; misses are NaN (skip) or the rank after the last (depth); ``base`` rank1 counts the
    first rank as 1 (a miss: depth + 1), rank0 as 0 (a miss: depth)."""
    if missing not in ("skip", "depth"):
        raise ValueError(f"evaluate.mfr_missing={missing!r} is unknown; use skip or depth")
    if base not in MFR_DEFINITIONS:
        raise ValueError(f"evaluate.mfr={base!r} is unknown; use {' or '.join(MFR_DEFINITIONS)}")
    first = 1 if base == "rank1" else 0
    miss = math.nan if missing == "skip" else float(depth + first)

    def _mfr(qrels: pd.DataFrame, run: pd.DataFrame):
        rel = set(qrels.loc[qrels.relevance >= 1, "doc_id"])
        # ir_measures sorts by score only; re-apply the docno tie-break so ranks match the stored run
        # (inside per_query the scores are rank-derived and have no ties; this serves pt.Experiment)
        run = run.sort_values(["score", "doc_id"], ascending=[False, True], kind="mergesort")
        for i, d in enumerate(run.doc_id.tolist()):
            if d in rel:
                return float(i + first)
        return miss

    m = ir_measures.define_byquery(_mfr, name="MFR", support_cutoff=False)
    type(m).DEFAULT = miss  # a qrels query missing from the run is a miss too
    return m


def parse_measures(names: list[str], *, mfr_missing: str = "skip", depth: int = 100, mfr: str = "rank1") -> list:
    out = []
    for name in names:
        if name == "MFR":
            out.append(mfr_measure(mfr_missing, depth, mfr))
        else:
            try:
                out.append(ir_measures.parse_measure(name))
            except Exception:
                raise ValueError(f"evaluate.measures: cannot parse {name!r}; e.g. nDCG@10, P@1, MFR") from None
    return out


def mfr_caption(missing: str, depth: int = 100, mfr: str = "rank1") -> str:
    """The caption's sentence on MFR: its definition (``evaluate.mfr``) and its misses (``evaluate.mfr_missing``)."""
    first = 1 if mfr == "rank1" else 0
    what = (f"MFR is the mean rank of the first relevant document, counted from {first}"
            + (" (Fuhr)" if first == 1 else " (the 1-based MFR minus 1)"))
    return what + ("; it leaves out queries without a relevant document in the top-%d" % depth if missing == "skip"
                   else "; it counts queries without a relevant document in the top-%d as rank %d"
                   % (depth, depth + first))


def stored_order(run: pd.DataFrame) -> pd.DataFrame:
    """The run in its stored order with a 0-based ``rank``: by its ``rank`` column when it has one, else by
    score descending with ties broken by ascending docno (the paper, Section 4: "alphanumeric ordering")."""
    if "rank" in run.columns:
        out = run.sort_values(["qid", "rank"], kind="mergesort")
    else:
        out = run.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="mergesort")
    out = out.reset_index(drop=True)
    out["rank"] = out.groupby("qid", sort=False).cumcount().astype("int64")
    return out


def without_relevant(qrels: pd.DataFrame, topics: list[str] | None = None) -> list[str]:
    """Topics (of ``qrels``, and of ``topics`` when given) that have no judgment with label >= 1."""
    q = qrels.assign(qid=qrels.qid.astype(str))
    judged_relevant = set(q.loc[q.label >= 1, "qid"])
    every = set(q.qid) | {str(t) for t in (topics or [])}
    return sorted(every - judged_relevant)


def no_relevant_note(qids: list[str], mode: str = "skip", shown: int = 10) -> str:
    """A caption sentence about the topics without a relevant judgment ('' when there are none)."""
    if not qids:
        return ""
    names = ", ".join(qids[:shown]) + (f" and {len(qids) - shown} more" if len(qids) > shown else "")
    topic = "topic" if len(qids) == 1 else "topics"
    if mode == "zero":
        return f"{len(qids)} {topic} without relevant judgments counted as 0 ({names})"
    return f"{len(qids)} {topic} without relevant judgments left out ({names})"


def per_query(run: pd.DataFrame, qrels: pd.DataFrame, names: list[str], *, mfr_missing: str = "skip",
              depth: int = 100, no_relevant: str = "skip", topics: list[str] | None = None,
              mfr: str = "rank1") -> pd.DataFrame:
    """Per-query values (qid, measure, value) of a run (qid, docno, score[, rank]) against qrels (qid, docno,
    label), evaluating the run in its stored order (:func:`stored_order`).

    Every judged topic (and every one of ``topics`` when given) gets every measure, also when the run has
    no document for it; topics without a relevant judgment are left out (``no_relevant=skip``) or kept as
    0 (``zero``; MFR then follows ``mfr_missing``). :func:`without_relevant` names them.
    """
    if no_relevant not in NO_RELEVANT:
        raise ValueError(f"evaluate.no_relevant={no_relevant!r} is unknown; use skip or zero")
    measures = parse_measures(names, mfr_missing=mfr_missing, depth=depth, mfr=mfr)
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})[["query_id", "doc_id", "relevance"]]
    q = q.assign(query_id=q.query_id.astype(str))
    empty = without_relevant(qrels, topics)
    keep = (set(q.query_id) | {str(t) for t in (topics or [])}) - (set(empty) if no_relevant == "skip" else set())
    q = q[q.query_id.isin(keep)]
    ranked = stored_order(run.assign(qid=run.qid.astype(str)))
    # rank-derived scores: the measures see exactly the stored order, whatever their own tie-breaking
    r = pd.DataFrame({"query_id": ranked.qid, "doc_id": ranked.docno, "score": -ranked["rank"].astype(float)})
    r = r[r.query_id.isin(set(q.query_id))]
    rows = [(m.query_id, str(m.measure), float(m.value)) for m in ir_measures.iter_calc(measures, q, r)]
    out = pd.DataFrame(rows, columns=["qid", "measure", "value"])
    full = pd.MultiIndex.from_product([sorted(keep), [str(m) for m in measures]], names=["qid", "measure"])
    out = out.set_index(["qid", "measure"]).reindex(full).reset_index()
    # a topic the measures did not see (no document in the run, or no judgment at all) scores 0, MFR a miss
    for m in measures:
        if str(m) != "MFR":
            out.loc[(out.measure == str(m)) & out.value.isna(), "value"] = 0.0
    if mfr_missing == "depth":
        out.loc[(out.measure == "MFR") & out.value.isna(), "value"] = float(depth + (1 if mfr == "rank1" else 0))
    return out
