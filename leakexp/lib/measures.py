"""Measures: nDCG@10 (graded), P@1 (label >= 1) and MFR, the mean first rank of a relevant document.

MFR is a custom ir_measures per-query measure (so ``pt.Experiment`` can use it too) whose per-topic value is the
1-based rank of the first relevant document; lower is better. How those ranks are averaged is ``evaluate.mfr``:

- ``reciprocal_of_mrr`` (the paper's numbers): 1 / the mean reciprocal rank, i.e. the harmonic mean of the first
  ranks. The BM25 top-100 runs that Fröbe et al. (SPIRE 2022) re-ranked give 1.425 (Core 2017) and 1.432 (Core
  2018), and their re-rankers of those same runs report 1.36-3.13; an arithmetic mean gives the BM25 runs 4.66 and
  4.39, and rules out Table 4's PACRR None row (MFR 1.390 at P@1 .540 needs at least 2 - .540 = 1.46). Averages and
  paired t-tests run on the reciprocal ranks (:func:`tested_values`); a table shows the reciprocal of their mean.
- ``arithmetic``: the mean of the first ranks, as Fuhr ("Some Common Mistakes In IR Evaluation, And How They Can Be
  Avoided", SIGIR Forum 2017) argues for; the paper cites it for the name.

A query with no relevant document in its ranking (``evaluate.mfr_missing``): ``skip`` leaves it out, ``depth``
counts it at rank depth + 1, ``infinite`` at an infinite rank, i.e. reciprocal rank 0 as trec_eval's recip_rank
counts it (``reciprocal_of_mrr`` only: an arithmetic mean would be infinite).

One ranking for every measure: a run is evaluated in the order it is stored (its ``rank`` column, or score
descending with ties broken by ascending docno, as the paper and the re-ranking stage do). pytrec_eval,
behind ir_measures, would re-sort tied scores by *descending* docno (trec_eval's ``comp_sim_docno``), so the
measures are given rank-derived scores that have no ties.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import ir_measures
import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


MEASURE_ORDER = ("nDCG@10", "P@1", "MFR")
LOWER_IS_BETTER = {"MFR"}
NO_RELEVANT = ("skip", "zero")
SELECTIONS = ("best", "max_effect")  # how the cross-validation chooses a size (leakexp.lib.stats)
MFR_DEFINITIONS = ("reciprocal_of_mrr", "arithmetic")  # how the per-topic first ranks are averaged
MFR_MISSING = ("skip", "depth", "infinite")  # a query without a relevant document: left out, rank depth+1, rank inf


def check_mfr(mfr: str, missing: str) -> None:
    """Refuse an unknown MFR definition or miss rule, and an arithmetic mean over infinite ranks."""
    if mfr not in MFR_DEFINITIONS:
        raise ValueError(f"evaluate.mfr={mfr!r} is unknown; use {' or '.join(MFR_DEFINITIONS)}")
    if missing not in MFR_MISSING:
        raise ValueError(f"evaluate.mfr_missing={missing!r} is unknown; use {', '.join(MFR_MISSING)}")
    if mfr == "arithmetic" and missing == "infinite":
        raise ValueError("evaluate.mfr_missing=infinite makes an arithmetic MFR infinite; use skip or depth with "
                         "evaluate.mfr=arithmetic, or evaluate.mfr=reciprocal_of_mrr")


def miss_rank(missing: str = "skip", depth: int = 100) -> float:
    """The first rank a query without a relevant document gets: NaN (left out), depth + 1, or infinity."""
    check_mfr("reciprocal_of_mrr", missing)
    return {"skip": math.nan, "depth": float(depth + 1), "infinite": math.inf}[missing]


@lru_cache(maxsize=None)
def mfr_measure(missing: str = "skip", depth: int = 100):
    """The per-query first relevant rank (1-based); a miss is :func:`miss_rank`."""
    miss = miss_rank(missing, depth)

    def _mfr(qrels: pd.DataFrame, run: pd.DataFrame):
        rel = set(qrels.loc[qrels.relevance >= 1, "doc_id"])
        # ir_measures sorts by score only; re-apply the docno tie-break so ranks match the stored run
        # (inside per_query the scores are rank-derived and have no ties; this serves pt.Experiment)
        run = run.sort_values(["score", "doc_id"], ascending=[False, True], kind="mergesort")
        for i, d in enumerate(run.doc_id.tolist()):
            if d in rel:
                return float(i + 1)
        return miss

    m = ir_measures.define_byquery(_mfr, name="MFR", support_cutoff=False)
    type(m).DEFAULT = miss  # a qrels query missing from the run is a miss too
    return m


def first_relevant(ranking: dict[str, float], judged: dict[str, int], miss: float) -> float:
    """The 1-based rank of the first document labelled >= 1 in a ranking (docno -> score, in rank order), else
    ``miss``."""
    for rank, docno in enumerate(ranking, 1):
        if judged.get(docno, 0) >= 1:
            return float(rank)
    return miss


def parse_measures(names: list[str], *, mfr_missing: str = "skip", depth: int = 100,
                   option: str = "evaluate.measures") -> list:
    """Measure objects of names as ir_measures spells them (``nDCG@10``, ``P(rel=2)@1``, ``RR``) and ``MFR``; an
    unknown name is a ValueError naming ``option`` (where it was given) and, for a misspelling, the measure meant."""
    out = []
    for name in names:
        if name == "MFR":
            out.append(mfr_measure(mfr_missing, depth))
        elif name.startswith(("MFR@", "MFR(")):
            raise ValueError(f"{option}: {name!r}: MFR takes no cutoff or parameters; cut the run instead "
                             "(leakexp measure --depth K)")
        else:
            try:
                out.append(ir_measures.parse_measure(name))
            except Exception:
                raise ValueError(f"{option}: cannot parse {name!r}{_meant(name)}; name measures as ir_measures does, "
                                 "e.g. nDCG@10, P@1, RR, AP, R@100, P(rel=2)@1, or MFR") from None
    return out


def _meant(name: str) -> str:
    """``, did you mean nDCG@10`` for ``ndcg@10``: the registered measure its name differs from only in case."""
    base, rest = re.match(r"^([^@(]*)(.*)$", name).groups()
    for known in ir_measures.measures.registry:
        if known.lower() == base.lower() and known != base:
            try:
                return f", did you mean {ir_measures.parse_measure(known + rest)}"  # its canonical name: nDCG, not NDCG
            except Exception:
                return f", did you mean {known}{rest}"
    return ""


# -- averaging per-topic values: where the MFR definition acts ---------------------------------------------------

def _reciprocal(measure: str, mfr: str) -> bool:
    if mfr not in MFR_DEFINITIONS:
        raise ValueError(f"evaluate.mfr={mfr!r} is unknown; use {' or '.join(MFR_DEFINITIONS)}")
    return measure == "MFR" and mfr == "reciprocal_of_mrr"


def tested_values(values, measure: str, mfr: str):
    """The per-topic values that are averaged and paired in t-tests: MFR's reciprocal ranks under
    ``reciprocal_of_mrr`` (an infinite rank gives 0, a left-out one stays NaN), the values themselves otherwise."""
    if not _reciprocal(measure, mfr):
        return values
    return 1.0 / values  # 1/inf = 0.0, 1/NaN = NaN (pandas and NumPy alike)


def reported(mean: float, measure: str, mfr: str) -> float:
    """A mean of :func:`tested_values` as the table reports it: 1 / MRR for a reciprocal MFR (inf for MRR 0)."""
    if not _reciprocal(measure, mfr) or np.isnan(mean):
        return float(mean)
    return math.inf if mean == 0 else 1.0 / float(mean)


def average(values: pd.Series, measure: str, mfr: str) -> float:
    """The reported mean of per-topic values (NaN, e.g. a skipped MFR miss, left out; NaN when none is left)."""
    import pandas as pd

    v = tested_values(pd.Series(values, dtype=float), measure, mfr).dropna()
    return reported(float(v.mean()), measure, mfr) if len(v) else float("nan")


def mean_by(frame: pd.DataFrame, keys: list[str], mfr: str) -> pd.DataFrame:
    """``frame``'s ``value`` averaged per group of ``keys`` (which include ``measure``) as :func:`average` would:
    a reciprocal MFR's group mean is 1 / the mean of its reciprocal ranks, so averaging in stages (over seeds, then
    topics) gives the same 1 / MRR as averaging all at once."""
    if "measure" not in keys:
        raise ValueError("mean_by: the keys must include 'measure'")
    rec = frame.measure.map(lambda m: _reciprocal(m, mfr)).to_numpy(dtype=bool)
    values = frame.value.to_numpy(dtype=float).copy()
    with np.errstate(divide="ignore"):
        values[rec] = 1.0 / values[rec]
    out = frame.assign(value=values).groupby(keys, as_index=False).value.mean()
    back = out.measure.map(lambda m: _reciprocal(m, mfr)).to_numpy(dtype=bool)
    v = out.value.to_numpy(dtype=float).copy()
    with np.errstate(divide="ignore"):
        v[back] = 1.0 / v[back]
    return out.assign(value=v)


def count_misses(frame: pd.DataFrame, missing: str, depth: int) -> pd.DataFrame:
    """Per-query values as the evaluate stage stores them, for every MFR variant (a query without a relevant
    document in the top-``depth`` at rank infinity), with those misses counted as ``evaluate.mfr_missing`` says:
    left out (NaN), at rank depth + 1, or at an infinite rank (reciprocal rank 0). The tables apply it, so the
    setting changes them and no stored artifact."""
    miss = miss_rank(missing, depth)
    if math.isinf(miss) or frame.empty:
        return frame
    values = frame.value.to_numpy(dtype=float).copy()
    values[(frame.measure == "MFR").to_numpy() & np.isposinf(values)] = miss
    return frame.assign(value=values)


def mfr_caption(missing: str, depth: int = 100, mfr: str = "reciprocal_of_mrr") -> str:
    """The caption's sentence on MFR: its definition (``evaluate.mfr``) and its misses (``evaluate.mfr_missing``)."""
    check_mfr(mfr, missing)
    if mfr == "reciprocal_of_mrr":
        what = ("MFR is the reciprocal of the mean reciprocal rank of the first relevant document (1/MRR, the "
                "harmonic mean of the first ranks); significance tests pair the per-topic reciprocal ranks")
    else:
        what = "MFR is the arithmetic mean rank of the first relevant document (Fuhr)"
    return what + {"skip": f"; it leaves out queries without a relevant document in the top-{depth}",
                   "depth": f"; it counts queries without a relevant document in the top-{depth} as rank {depth + 1}",
                   "infinite": f"; a query without a relevant document in the top-{depth} has reciprocal rank 0"}[missing]


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
              depth: int = 100, no_relevant: str = "skip", topics: list[str] | None = None) -> pd.DataFrame:
    """Per-query values (qid, measure, value) of a run (qid, docno, score[, rank]) against qrels (qid, docno,
    label), evaluating the run in its stored order (:func:`stored_order`).

    Every judged topic (and every one of ``topics`` when given) gets every measure, also when the run has
    no document for it; topics without a relevant judgment are left out (``no_relevant=skip``) or kept as
    0 (``zero``; MFR then follows ``mfr_missing``). :func:`without_relevant` names them. MFR's value is the first
    relevant rank whatever ``evaluate.mfr``: the definition acts where values are averaged (:func:`average`).
    """
    import pandas as pd

    if no_relevant not in NO_RELEVANT:
        raise ValueError(f"evaluate.no_relevant={no_relevant!r} is unknown; use skip or zero")
    measures = parse_measures(names, mfr_missing=mfr_missing, depth=depth)
    empty = without_relevant(qrels, topics)
    judged = qrels.qid.astype(str).tolist()
    keep = (set(judged) | {str(t) for t in (topics or [])}) - (set(empty) if no_relevant == "skip" else set())
    judgments: dict[str, dict[str, int]] = {}
    for qid, docno, label in zip(judged, qrels.docno.astype(str).tolist(), qrels.label.tolist()):
        if qid in keep:
            judgments.setdefault(qid, {})[docno] = int(label)
    ranked = stored_order(run.assign(qid=run.qid.astype(str)))
    # rank-derived scores: the measures see exactly the stored order, whatever their own tie-breaking
    ranking: dict[str, dict[str, float]] = {}
    for qid, docno, rank in zip(ranked.qid.tolist(), ranked.docno.astype(str).tolist(), ranked["rank"].tolist()):
        if qid in judgments:
            ranking.setdefault(qid, {})[docno] = -float(rank)
    # MFR's value straight from the stored order (what mfr_measure computes, without a frame per query)
    rows = [(qid, "MFR", first_relevant(docs, judgments[qid], miss_rank(mfr_missing, depth)))
            for qid, docs in ranking.items()] if "MFR" in names else []
    others = [m for m in measures if str(m) != "MFR"]
    if others:
        rows += [(m.query_id, str(m.measure), float(m.value)) for m in ir_measures.iter_calc(others, judgments, ranking)]
    out = pd.DataFrame(rows, columns=["qid", "measure", "value"])
    full = pd.MultiIndex.from_product([sorted(keep), [str(m) for m in measures]], names=["qid", "measure"])
    out = out.set_index(["qid", "measure"]).reindex(full).reset_index()
    # a topic the measures did not see (no document in the run, or no judgment at all) scores 0, MFR a miss
    for m in measures:
        if str(m) != "MFR":
            out.loc[(out.measure == str(m)) & out.value.isna(), "value"] = 0.0
    if mfr_missing != "skip":
        out.loc[(out.measure == "MFR") & out.value.isna(), "value"] = miss_rank(mfr_missing, depth)
    return out
