"""The four robustness parts of a grid cell (a trained model), each its own stage, keyed by what it reads:

- ``robustness/own-corpus``: per-topic effectiveness (``robustness.measure``, nDCG@10), AP and P@10 of the cell's
  re-ranking of its own corpus (the RERANK artifact; the test corpus its training set was built for, Wu et al.'s
  P_I.I.D. though not an i.i.d. split) — VNAP (Section 3.2), %no and gMAP (Section 3.5.1, Eqs. 8-9);
- ``robustness/ood``: the same on the model's re-ranking of another corpus of the grid (the RERANK artifact
  ``rerank(..., target=T)``), each topic marked ``shared`` when the own corpus has it too (Core 2017 reuses
  Robust04's topics) — the OOD score per target and DR_OOD (Section 4.2.2, Eq. 11). A No-Leakage model's
  re-ranking of T is the very run the grid has for T, so nothing is re-ranked twice;
- ``robustness/query-attack``: the test titles under a seeded query attack (``leakexp.toolkit.attacks``), the original
  first-stage candidates re-scored for the attacked query (``robustness.first_stage: pool``, default, as Wu et
  al. keep the candidate list) or BM25 re-run with it (``bm25``: the first stage's brittleness mixed in) —
  DR_query (Section 5.1.2, Eq. 16);
- ``robustness/doc-manipulation``: rankings before and after manipulated documents — Top Change and the
  normalised Kendall-tau distance (Section 5.2.2, Eqs. 20-22), and for stuffing the stuffed document's rank gain
  and whether it is judged relevant.

Topics without a relevant judgment follow ``evaluate.no_relevant`` as in every other table.

Attacked queries (``robustness/attacked-queries/<corpus>/<attack>/<first stage>/``) and manipulated documents
(``robustness/manipulated-docs/<corpus>/<kind>/``, TSV for reading) are shared by every model of a corpus, so
leaked and unleaked models meet the same attacks and can be compared topic by topic. Only new scores are
computed: unattacked topics keep the stored run, a manipulation re-scores only the changed documents.

Tables and the figure are written by ``leakexp.tables.robustness`` from the finished artifacts.
"""

from __future__ import annotations

import logging
from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.lib.measures import per_query
from leakexp.lib.robustness_stats import attack_effects, drop_rate, manipulation_effects, pct_no, shared_topics, vnap
from leakexp.runner.stage import Ask, Config, Context, register_stage
from leakexp.stages.cell import rerank_params, rerank_path, train_params
from leakexp.stages.rerank import load_model, rerank, scoring, scoring_reads
from leakexp.stages.robustness.family import DOC, DOCS, OOD, OWN, QUERIES, QUERY, Robustness
from leakexp.stages.train import reads_idf

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


def _part_path(p: dict, *extra: str) -> list[str]:
    """A part's folder: its re-ranking's, then ``extra`` (the attack, the kind of manipulation)."""
    return [*rerank_path(p), *extra]


def _values(ctx: Context, run: pd.DataFrame, measures: list[str]) -> pd.DataFrame:
    """Per-query values of ``run`` against the qrels of the ranked corpus, its topics handled as every other
    table handles them (``evaluate.no_relevant``: topics without a relevant judgment left out, or kept as 0);
    the measure is higher-is-better, never MFR, so depth and the MFR options play no part."""
    coll = ctx.inputs["collection"]
    return per_query(run, coll.qrels, measures, no_relevant=ctx.settings("evaluate").no_relevant,
                     topics=list(coll.topics))


def _own_measures(ctx: Context) -> list[str]:
    """The measure P, AP (VNAP, gMAP: Eqs. 5-7, 9) and P@10 (%no, Eq. 8), once each."""
    return list(dict.fromkeys([ctx.settings("robustness").measure, "AP", "P@10"]))


def _eval_inputs(p: dict, c: Config) -> dict:
    return {"run": Ask.of("rerank", **rerank_params(p)), "collection": Ask.of("collection", corpus=p["target"])}


def _model_inputs(p: dict, c: Config) -> dict:
    """The re-ranking, the trained model, the ranked collection and (for models that read idf) its df table."""
    inputs = {**_eval_inputs(p, c), "model": Ask.of("train", **train_params(p))}
    if reads_idf(c, p["model"]):
        inputs["df"] = Ask.of("df", name=p["target"])
    return inputs


@register_stage
class OwnCorpus(Robustness):
    """per-topic effectiveness, AP and P@10 of a cell's re-ranking of its own corpus (VNAP, %no, gMAP)"""

    name, version = OWN, 2
    reads = ("robustness.measure", "evaluate.no_relevant")

    def inputs(self, p: dict, c: Config) -> dict:
        return _eval_inputs(p, c)

    def normalise(self, p: dict) -> dict:
        return rerank_params(p)

    def path(self, p: dict, c: Config) -> list:
        return _part_path(p)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        """The model on its own corpus's test topics (the corpus whose leaked queries a leaked model saw; Wu et al.'s
        P_I.I.D., though nothing here is an i.i.d. test split: the models are trained on MS MARCO / ORCAS)."""
        import pandas as pd

        m = ctx.settings("robustness").measure
        pq = _values(ctx, pd.read_parquet(ctx.inputs["run"] / "run.parquet"), _own_measures(ctx))
        pq.to_parquet(tmp / "perquery.parquet", index=False)
        ap = pq[pq.measure == "AP"].value
        return {"mean": float(pq[pq.measure == m].value.mean()), "MAP": float(ap.mean()), "VNAP": vnap(ap),
                "%no": pct_no(pq[pq.measure == "P@10"].value)}


@register_stage
class OutOfDomain(Robustness):
    """per-topic effectiveness of a model's re-ranking of another corpus, topics shared or not (OOD, DR_OOD)"""

    name, version = OOD, 2
    reads = ("robustness.measure", "evaluate.no_relevant", "rerank.query_field")

    def inputs(self, p: dict, c: Config) -> dict:
        return {**_eval_inputs(p, c), "source": Ask.of("collection", corpus=p["corpus"])}

    def normalise(self, p: dict) -> dict:
        return {**rerank_params(p), "corpus": p["corpus"]}

    def path(self, p: dict, c: Config) -> list:
        return _part_path(p)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        """The model on another corpus (P_OOD, Eq. 13), per topic, with ``shared``: whether the topic is also one of
        the source corpus's topics (:func:`shared_topics`; Core 2017 reuses Robust04's)."""
        import pandas as pd

        res = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
        pq = _values(ctx, res, _own_measures(ctx))
        field = ctx.settings("rerank").query_field
        shared = shared_topics(ctx.inputs["source"].topics_frame(field), ctx.inputs["collection"].topics_frame(field))
        pq["shared"] = pq.qid.astype(str).isin(shared)
        pq.to_parquet(tmp / "perquery.parquet", index=False)
        m = pq[pq.measure == ctx.settings("robustness").measure]
        return {"corpus": ctx.params["target"], "mean": float(m.value.mean()), "pairs": len(res),
                "shared_topics": int(m.shared.sum()), "disjoint_topics": int((~m.shared).sum()),
                "disjoint_mean": float(m[~m.shared].value.mean()) if (~m.shared).any() else None}


@register_stage
class QueryAttack(Robustness):
    """a cell's model re-ranking its corpus's attacked queries (DR_query)"""

    name, version = QUERY, 2
    device = True

    def reads(self, p: dict, cuda: bool) -> list[str]:
        return ["robustness.measure", "robustness.first_stage", "evaluate.no_relevant", *scoring_reads(p, cuda)]

    def inputs(self, p: dict, c: Config) -> dict:
        queries = Ask.of(QUERIES, corpus=p["target"], attack=p["attack"],
                         first_stage=c.settings("robustness").first_stage)
        return {**_model_inputs(p, c), "queries": queries}

    def normalise(self, p: dict) -> dict:
        return {**rerank_params(p), "attack": p["attack"]}

    def path(self, p: dict, c: Config) -> list:
        return _part_path(p, p["attack"])

    def compute(self, ctx: Context, tmp: Path) -> dict:
        import pandas as pd

        run = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
        shared = ctx.inputs["queries"]
        att = pd.read_parquet(shared / "attacks.parquet")
        pool = pd.read_parquet(shared / "pool.parquet")
        applied = set(att.qid[att.applied])
        new = (rerank(load_model(ctx), pool, ctx.inputs["collection"].docs, **scoring(ctx))
               if len(pool) else pool.iloc[0:0])
        new.to_parquet(tmp / "run.parquet", index=False)  # only the attacked topics: all others are unchanged
        attacked_run = pd.concat([new, run[~run.qid.isin(applied)]], ignore_index=True)
        m = ctx.settings("robustness").measure
        before = _values(ctx, run, [m]).set_index("qid").value
        after = _values(ctx, attacked_run, [m]).set_index("qid").value
        pq = attack_effects(before, after, applied)
        pq.to_parquet(tmp / "perquery.parquet", index=False)
        a = pq[pq.applied]
        return {"applied": len(a), "scored_pairs": len(new),
                "original": float(a.original.mean()) if len(a) else None,
                "attacked": float(a.attacked.mean()) if len(a) else None,
                "DR_query": drop_rate(a.attacked.mean(), a.original.mean()) if len(a) else None}


@register_stage
class DocManipulation(Robustness):
    """a cell's rankings before and after manipulated documents (Top Change, Kendall-tau distance)"""

    name, version = DOC, 2
    device = True
    reads = staticmethod(scoring_reads)

    def inputs(self, p: dict, c: Config) -> dict:
        return {**_model_inputs(p, c), "docs": Ask.of(DOCS, corpus=p["target"], kind=p["kind"])}

    def normalise(self, p: dict) -> dict:
        return {**rerank_params(p), "kind": p["kind"]}

    def path(self, p: dict, c: Config) -> list:
        return _part_path(p, p["kind"])

    def compute(self, ctx: Context, tmp: Path) -> dict:
        import pandas as pd

        kind = ctx.params["kind"]
        run = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
        docs = ctx.inputs["collection"].docs
        manip = pd.read_parquet(ctx.inputs["docs"] / "documents.parquet")
        qrels = ctx.inputs["collection"].qrels
        relevant = set(zip(qrels.qid.astype(str)[qrels.label >= 1], qrels.docno.astype(str)[qrels.label >= 1]))
        # the (qid, docno) pairs to re-score: the stuffed document of each topic, or every noisy document
        if kind == "stuff":
            pairs = manip[["qid", "docno", "text"]].merge(run[["qid", "query", "docno"]], on=["qid", "docno"])
        else:
            pairs = run[["qid", "query", "docno"]].merge(manip[["docno", "text"]], on="docno")
        pairs = pairs.reset_index(drop=True)
        # original and manipulated text scored in one call, so that before and after differ only in the
        # manipulation (the other documents keep their stored scores)
        queries = pairs["query"].tolist()
        scores = load_model(ctx).score(queries * 2, [docs[d] for d in pairs.docno] + pairs.text.tolist(), **scoring(ctx))
        pairs["before"], pairs["after"] = scores[:len(pairs)], scores[len(pairs):]
        pq = manipulation_effects(run, pairs, relevant, kind)
        pq.to_parquet(tmp / "perquery.parquet", index=False)
        out = {"topics": len(pq), "scored_pairs": 2 * len(pairs), "TC": float(pq.TC.mean()) if len(pq) else None,
               "KT": float(pq.KT.mean()) if len(pq) else None}
        if kind == "stuff" and len(pq):
            other = pq[~pq.relevant]
            out.update(relevant_targets=int(pq.relevant.sum()),
                       mean_gain=float(other.gain.mean()) if len(other) else None)
        return out
