"""The ``evaluate`` stage: a cell's re-ranked run scored per query (nDCG@10, P@1, MFR; ``leakexp.lib.measures``).

Topics without a relevant judgment (Robust04 topic 672 has none): every ranking scores 0 on nDCG and P@1
and has no first relevant rank, so such a topic says nothing about a re-ranker. By default
(``no_relevant=skip``) they are left out of every measure and listed by :func:`without_relevant`, so tables
can say so. ``no_relevant=zero`` keeps them as trec_eval does (since version 8.1 trec_eval evaluates a query
with judgments but no relevant document and averages its zeros in: usnistgov/trec_eval, README, "Version
8.1" notes, and trec_eval.c's loop over every qrels topic); their MFR then follows ``mfr_missing``.

MFR's per-topic value is the first relevant rank, infinite when no relevant document is in the re-ranked top-k:
what every MFR variant needs. How the tables average the ranks (``evaluate.mfr``: 1/MRR or the arithmetic mean) and
count the misses (``evaluate.mfr_missing``: left out, at rank k + 1, at reciprocal rank 0) is applied to those values
when they are read (``leakexp.lib.measures.count_misses``), so neither setting is read here and every variant shares
this artifact. Its figures: each measure's mean, MFR as 1/MRR with misses at reciprocal rank 0 and as the arithmetic
mean of the ranks found, and the number of misses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TYPE_CHECKING

from pydantic import Field

from leakexp.lib.measures import average, check_mfr, parse_measures, per_query, without_relevant
from leakexp.runner.schema import Name, NonNegativeInt, Section, Settings
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage, register_stage
from leakexp.stages.cell import rerank_params, rerank_path

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


@register_stage
class Evaluate(Stage):
    """per-query nDCG@10, P@1 and MFR of a re-ranking"""

    name, version, keyed_as = "evaluate", 3, "eval"
    help = "nDCG@10, P@1 and MFR of the cell(s)"
    per_cell = True
    reads = ("evaluate.measures", "evaluate.no_relevant")

    def inputs(self, p: dict, c: Config) -> dict:
        return {"run": Ask.of("rerank", **rerank_params(p)), "collection": Ask.of("collection", corpus=p["target"])}

    def normalise(self, p: dict) -> dict:
        return rerank_params(p)

    def path(self, p: dict, c: Config) -> list:
        return rerank_path(p)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        import pandas as pd

        e = ctx.settings("evaluate")
        run = pd.read_parquet(ctx.inputs["run"] / "run.parquet")
        coll = ctx.inputs["collection"]
        topics = list(coll.topics)
        pq = per_query(run, coll.qrels, list(e.measures), mfr_missing="infinite", no_relevant=e.no_relevant,
                       topics=topics)
        pq.to_parquet(tmp / "perquery.parquet", index=False)
        figures = {}
        for m, values in pq.groupby("measure").value:
            if m == "MFR":
                found = values[values < float("inf")]
                figures.update({"MFR reciprocal_of_mrr": round(average(values, m, "reciprocal_of_mrr"), 6),
                                "MFR arithmetic": round(average(found, m, "arithmetic"), 6),
                                "MFR misses": int(len(values) - len(found))})
            else:
                figures[m] = round(average(values, m, "reciprocal_of_mrr"), 6)
        return {**figures, "without_relevant": without_relevant(coll.qrels, topics)}

    def opener(self, path: Path) -> pd.DataFrame:
        import pandas as pd

        return pd.read_parquet(path / "perquery.parquet")

    def check(self, s: Settings) -> None:
        """The measure names, which only ir_measures can parse (every other domain is :class:`Evaluate.Settings`')."""
        e = s.evaluate
        try:
            check_mfr(e.mfr, e.mfr_missing)
            parse_measures(list(e.measures), mfr_missing=e.mfr_missing)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def asks(self, r, cells) -> list[Ask]:
        return [c.ask("evaluate") for c in cells]

    class Settings(Section):
        """``evaluate``: measures, their handling of misses and empty topics, and the cross-validation and test."""

        measures: Annotated[list[Name], Field(min_length=1)]
        mfr: Literal["reciprocal_of_mrr", "arithmetic"]
        mfr_missing: Literal["skip", "depth", "infinite"]
        no_relevant: Literal["skip", "zero"]
        folds: Annotated[int, Field(ge=2)]
        fold_seed: NonNegativeInt
        cv_selection: Literal["best", "max_effect"]
        alpha: Annotated[float, Field(gt=0, lt=1)]
