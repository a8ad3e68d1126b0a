"""Measures: nDCG@10 (graded), P@1 (label >= 1) and MFR, the mean first rank of a relevant document.

MFR (Fuhr's suggestion over MRR) is a custom ir_measures per-query measure, so ``pt.Experiment`` can use
it too. Lower is better. A query with no relevant document in its ranking has no first rank: by default
(``mfr_missing=skip``) it is left out of MFR's mean; ``mfr_missing=depth`` counts it as depth + 1.

One ranking for every measure: a run is evaluated in the order it is stored (its ``rank`` column, or score
descending with ties broken by ascending docno, as the paper and the re-ranking stage do). pytrec_eval,
behind ir_measures, would re-sort tied scores by *descending* docno (trec_eval's ``comp_sim_docno``), so the
measures are given rank-derived scores that have no ties.

Topics without a relevant judgment (Robust04 topic 672 has none): every ranking scores 0 on nDCG and P@1
and has no first relevant rank, so such a topic says nothing about a re-ranker. By default
(``no_relevant=skip``) they are left out of every measure and listed by :func:`without_relevant`, so tables
can say so. ``no_relevant=zero`` keeps them as trec_eval does (since version 8.1 trec_eval evaluates a query
with judgments but no relevant document and averages its zeros in: usnistgov/trec_eval, README, "Version
8.1" notes, and trec_eval.c's loop over every qrels topic); their MFR then follows ``mfr_missing``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
import math
from functools import lru_cache
from pathlib import Path

import ir_measures
import pandas as pd

from leakexp.runner.stage import Ask, Context, Stage
from leakexp.runner.schema import Name, NonNegativeInt, Section

MEASURE_ORDER = ("nDCG@10", "P@1", "MFR")
LOWER_IS_BETTER = {"MFR"}
NO_RELEVANT = ("skip", "zero")
SELECTIONS = ("best", "max_effect")  # how the cross-validation chooses a size (leakexp.tables.stats)


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


# -- the stage --------------------------------------------------------------------------------------------
def check(cfg) -> None:
    """The ``evaluate`` section, before any work."""
    from leakexp.runner.stage import ConfigError

    e = cfg.evaluate
    if e.mfr_missing not in ("skip", "depth"):
        raise ConfigError(f"evaluate.mfr_missing={e.mfr_missing} is unknown; use skip or depth")
    if e.get("no_relevant", "skip") not in NO_RELEVANT:
        raise ConfigError(f"evaluate.no_relevant={e.no_relevant} is unknown; use skip (leave such topics out) or zero")
    try:
        parse_measures(list(e.measures), mfr_missing=e.mfr_missing)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if e.get("cv_selection", "best") not in SELECTIONS:
        raise ConfigError(f"evaluate.cv_selection={e.cv_selection} is unknown; use {' or '.join(SELECTIONS)}")
    folds = e.get("folds", 5)
    if not (isinstance(folds, int) and not isinstance(folds, bool) and folds >= 2):
        raise ConfigError(f"evaluate.folds={folds!r} must be an integer >= 2")
    if not 0 < float(e.get("alpha", 0.05)) < 1:
        raise ConfigError(f"evaluate.alpha={e.get('alpha')} must be in (0, 1)")


def _evaluate(ctx: Context, tmp: Path) -> dict:
    e = ctx.config["evaluate"]
    run = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
    coll = ctx.inputs["collection"]
    topics = list(coll.topics)
    pq = per_query(run, coll.qrels, list(e["measures"]), mfr_missing=e["mfr_missing"],
                   depth=int(ctx.config.at("rerank.depth")), no_relevant=e["no_relevant"], topics=topics,
                   mfr=str(e.get("mfr") or "rank1"))
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    figures = {m: round(float(v), 6) for m, v in pq.groupby("measure").value.mean().items()}
    return {**figures, "without_relevant": without_relevant(coll.qrels, topics)}


def _eval_inputs(p: dict, c) -> dict:
    from leakexp.stages.rerank import rerank_params

    return {"run": Ask.of("rerank", **rerank_params(p)), "collection": Ask.of("collection", corpus=p["target"])}


def _eval_params(p: dict) -> dict:
    from leakexp.stages.rerank import rerank_params

    return rerank_params(p)


def _eval_path(p: dict) -> list[str]:
    from leakexp.stages.rerank import rerank_path

    return rerank_path(p)


EVAL = Stage(
    "eval", version=1,
    reads=("evaluate.measures", "evaluate.mfr", "evaluate.mfr_missing", "evaluate.no_relevant", "rerank.depth"),
    inputs=_eval_inputs, compute=_evaluate, normalise=_eval_params, path=lambda p, c: _eval_path(p),
    opener=lambda path: pd.read_parquet(path / "perquery.parquet"), check=check,
    describe="per-query nDCG@10, P@1 and MFR of a re-ranking",
)


class EvaluateSettings(Section):
    """``evaluate``: measures, their handling of misses and empty topics, and the cross-validation and test."""

    measures: Annotated[list[Name], Field(min_length=1)]
    mfr: Literal["rank1", "rank0"]
    mfr_missing: Literal["skip", "depth"]
    no_relevant: Literal["skip", "zero"]
    folds: Annotated[int, Field(ge=2)]
    fold_seed: NonNegativeInt
    cv_selection: Literal["best", "max_effect"]
    alpha: Annotated[float, Field(gt=0, lt=1)]
