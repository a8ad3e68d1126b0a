"""Measures: nDCG@10 (graded), P@1 (label >= 1) and MFR, the mean first rank of a relevant document.

MFR (Fuhr's suggestion over MRR) is a custom ir_measures per-query measure, so ``pt.Experiment`` can use
it too. Lower is better. A query with no relevant document in its ranking has no first rank: by default
(``mfr_missing=skip``) it is left out of MFR's mean; ``mfr_missing=depth`` counts it as depth + 1.
"""

from __future__ import annotations

import math
from functools import lru_cache

import ir_measures
import pandas as pd

MEASURE_ORDER = ("nDCG@10", "P@1", "MFR")
LOWER_IS_BETTER = {"MFR"}


@lru_cache(maxsize=None)
def mfr_measure(missing: str = "skip", depth: int = 100):
    """The MFR measure; misses are NaN (skip) or ``depth + 1`` (depth)."""
    if missing not in ("skip", "depth"):
        raise ValueError(f"evaluate.mfr_missing={missing!r} is unknown; use skip or depth")
    miss = math.nan if missing == "skip" else float(depth + 1)

    def _mfr(qrels: pd.DataFrame, run: pd.DataFrame):
        rel = set(qrels.loc[qrels.relevance >= 1, "doc_id"])
        # ir_measures sorts by score only; re-apply the docno tie-break so ranks match the stored run
        run = run.sort_values(["score", "doc_id"], ascending=[False, True], kind="mergesort")
        for i, d in enumerate(run.doc_id.tolist()):
            if d in rel:
                return float(i + 1)
        return miss

    m = ir_measures.define_byquery(_mfr, name="MFR", support_cutoff=False)
    type(m).DEFAULT = miss  # a qrels query missing from the run is a miss too
    return m


def parse_measures(names: list[str], *, mfr_missing: str = "skip", depth: int = 100) -> list:
    out = []
    for name in names:
        if name == "MFR":
            out.append(mfr_measure(mfr_missing, depth))
        else:
            try:
                out.append(ir_measures.parse_measure(name))
            except Exception:
                raise ValueError(f"evaluate.measures: cannot parse {name!r}; e.g. nDCG@10, P@1, MFR") from None
    return out


def mfr_caption(missing: str, depth: int = 100) -> str:
    return ("MFR leaves out queries without a relevant document in the top-%d" % depth if missing == "skip"
            else "MFR counts queries without a relevant document in the top-%d as rank %d" % (depth, depth + 1))


def per_query(run: pd.DataFrame, qrels: pd.DataFrame, names: list[str], *, mfr_missing: str = "skip",
              depth: int = 100) -> pd.DataFrame:
    """Per-query values (qid, measure, value) of a run (qid, docno, score) against qrels (qid, docno, label)."""
    measures = parse_measures(names, mfr_missing=mfr_missing, depth=depth)
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})[["query_id", "doc_id", "relevance"]]
    r = run.rename(columns={"qid": "query_id", "docno": "doc_id"})[["query_id", "doc_id", "score"]]
    r = r[r.query_id.isin(set(q.query_id))]
    rows = [(m.query_id, str(m.measure), float(m.value)) for m in ir_measures.iter_calc(measures, q, r)]
    out = pd.DataFrame(rows, columns=["qid", "measure", "value"])
    # every judged topic gets every measure, also when the run has no document for it
    full = pd.MultiIndex.from_product([sorted(set(q.query_id)), [str(m) for m in measures]], names=["qid", "measure"])
    out = out.set_index(["qid", "measure"]).reindex(full).reset_index()
    for m in measures:
        out.loc[(out.measure == str(m)) & out.value.isna() & (str(m) != "MFR"), "value"] = 0.0
    if mfr_missing == "depth":
        out.loc[(out.measure == "MFR") & out.value.isna(), "value"] = float(depth + 1)
    return out
