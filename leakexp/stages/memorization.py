"""Memorization of leaked instances (paper, Section 4, "Memorization of Leaked Instances"; Tables 6-8).

Do the models memorise the leaked training instances? For every leaked query of a training set (origin
``msm-leak`` or ``test-leak``), its leaked relevant and leaked non-relevant document are scored for the
leaked topic's test query (the field re-ranking uses, ``rerank.query_field``) by the model trained with
that leakage and by the matching model trained without it (leakage ``none``, same corpus, size, model and
seed), and ranked in that model's re-ranking of the BM25 top-k:

- a document in the run keeps the run's stored score and rank;
- a document outside it (always so for MS MARCO / ORCAS documents, which are not in the test collection)
  gets a hypothetical rank: the position its score earns among the re-ranked run, ties broken by docno as
  the ranking breaks them (``leakexp.models.base.rank_with_docno_ties``), so the maximal rank is k + 1.
  It is scored as the re-ranking scored the run (``rerank.scoring``: precision and ``models.<model>.score_dtype``,
  so with float16 its score is rounded as the run's are before it is compared with them).

The paper describes this in Section 4 ("For leaked documents not returned in the top-100 BM25 results
[...] we determine a hypothetical rank by calculating the score of this document for the query and
inserting the document at the corresponding rank in the to-be-re-ranked 100 documents (including breaking
score-ties by document ID). Each leaked document thus has a maximal rank of 101."). The authors' public
repository (webis-de/SPIRE-22 @ f3ab030) holds no code for it: its README points to
``src/main/jupyter/reports-paper``, which the published tree does not contain.

The stage artifact ``memorization/<corpus>/<leakage>/<size>/<model>/seed-<n>/<config>`` holds one row per
leaked document, topic and variant (with / without leakage). Tables 6-8 are macro-averaged over topics:
a topic's leaked queries (and seeds) are averaged first, so a topic with three leaked queries weighs as
much as one with one; the ± is the standard deviation of those per-topic values.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Annotated, Literal, TYPE_CHECKING

from pydantic import Field

from leakexp.runner.schema import Name, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage, register_stage
from leakexp.stages.cell import Cell, cell_path, memorization_params, rerank_params, set_params, train_params
from leakexp.stages.rerank import load_model, scoring, scoring_reads
from leakexp.stages.train import reads_idf
from leakexp.toolkit.annotations import verified_leaks

from leakexp.lib.memorization import leaked_pairs, msm_topics, leaked_documents, rank_leaked, macro_average, LEAKED, VARIANTS

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)

FILE = "memorization.parquet"
SIZE_SELECTORS = ("each", "cv", "pooled")
ROW_COLUMNS = ["corpus", "leakage", "size", "model", "seed", "variant", "topic", "query", "pair", "train_qid",
               "train_query", "source", "docno", "label", "score", "rank", "in_run", "depth"]


def without_cell(cell: "Cell") -> "Cell":
    """The cell a leaked cell is compared with: no leakage, same corpus, size, model and seed."""
    return dataclasses.replace(cell, leakage="none")


# -- config ---------------------------------------------------------------------------------------------
def memorization_settings(s: Settings) -> "Memorization.Settings":
    """The ``memorization`` section, sizes always a list."""
    m = s.memorization
    return m.model_copy(update={"sizes": m.sizes if isinstance(m.sizes, list) else [m.sizes]})


def validate_settings(s: Settings) -> None:
    """What the schema cannot say: the sizes named must be sizes of the grid, the CV measure one of the measures."""
    m = memorization_settings(s)
    grid_sizes = list(s.grid.sizes)
    for v in m.sizes:
        if isinstance(v, int) and v not in grid_sizes:
            raise ConfigError(f"memorization.sizes has {v}, which is not in grid.sizes {grid_sizes}")
    if m.cv_measure not in s.evaluate.measures:
        raise ConfigError(f"memorization.cv_measure={m.cv_measure!r} is not one of evaluate.measures "
                          f"{list(s.evaluate.measures)}")


def wanted(s: Settings, cell: "Cell") -> bool:
    """Whether the grid computes the memorization stage for ``cell`` (a leaked cell, stage enabled)."""
    return cell.leakage in LEAKED and s.memorization.enabled


def _queries(collection, query_field: str, topics: list[str], runs: list[pd.DataFrame]) -> dict[str, str]:
    """The query text re-ranking used per topic (from the runs; the collection for a topic without run)."""
    out: dict[str, str] = {}
    for run in runs:
        for q, text in zip(run.qid.astype(str), run["query"]):
            out.setdefault(q, text)
    for t in topics:
        if t not in out:
            out[t] = collection.topics[t].text(query_field)
    return out


@register_stage
class Memorization(Stage):
    """ranks and scores of a leaked cell's leaked documents with and without leakage (Tables 6-8)"""

    name, version = "memorization", 1
    help = ("scores and ranks of the leaked documents with vs without leakage (Tables 6-8); computes what the store "
            "lacks, then writes the tables")
    device = True
    check = staticmethod(validate_settings)

    def reads(self, p: dict, cuda: bool) -> list[str]:
        # the model's settings say whether it reads idf (then the corpus's df table is an input)
        return ["rerank.query_field", *scoring_reads(p, cuda)] + (["memorization.msm_query"] if p["leakage"] == "msm"
                                                                   else [])

    def inputs(self, p: dict, c: Config) -> dict:
        """The leaked cell's training set, both models and their re-rankings of the corpus (with and without
        leakage), the collection (query texts), the idf the models read, and for MSM the verified leaks."""
        without = {**p, "leakage": "none"}
        inputs = {"set": Ask.of("build", **set_params(p)),
                  "model-with": Ask.of("train", **train_params(p)),
                  "model-without": Ask.of("train", **train_params(without)),
                  "run-with": Ask.of("rerank", **rerank_params(p)),
                  "run-without": Ask.of("rerank", **rerank_params(without)),
                  "collection": Ask.of("collection", corpus=p["corpus"])}
        if reads_idf(c, p["model"]):
            inputs["df"] = Ask.of("df", name=p["corpus"])
        if p["leakage"] == "msm":  # MSM leaks map to their topics through the verified annotations
            inputs["annotations"] = Ask.of("verify")
        return inputs

    def normalise(self, p: dict) -> dict:
        return memorization_params(p)

    def path(self, p: dict, c: Config) -> list:
        return cell_path(p)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        """Scores only documents outside the runs, batched, once per model; ranks in the stored runs otherwise."""
        import pandas as pd

        p = ctx.params
        collection = ctx.inputs["collection"]
        pairs = leaked_pairs(pd.read_parquet(ctx.inputs["set"] / "instances.parquet"), p["leakage"])
        if p["leakage"] == "test":
            topics = pairs[["pair"]].assign(topic=pairs.train_qid)
        else:
            topics = msm_topics(pairs, verified_leaks(ctx.inputs["annotations"], list(collection.topics)), p["corpus"])
        docs = leaked_documents(pairs, topics)
        runs = {v: pd.read_parquet(ctx.inputs[f"run-{v}"] / "run.parquet") for v in VARIANTS}
        queries = _queries(collection, ctx.settings("rerank").query_field, sorted(set(docs.topic)),
                           list(runs.values()))
        how = scoring(ctx)  # scored as the re-ranking scored the run (same precision), so ranks can be compared
        frames, scored = [], {}
        for variant in VARIANTS:
            def score(qs: list[str], texts: list[str], variant: str = variant) -> list[float]:
                scored[variant] = len(texts)
                return load_model(ctx, f"model-{variant}").score(qs, texts, **how)

            source = ctx.settings("memorization").msm_query if p["leakage"] == "msm" else "topic"
            ranked = rank_leaked(docs, runs[variant], queries, score, always_score=p["leakage"] == "msm",
                                 query_source=source)
            frames.append(ranked.assign(variant=variant))
        rows = pd.concat(frames, ignore_index=True).assign(
            corpus=p["corpus"], leakage=p["leakage"], size=int(p["size"]), model=p["model"], seed=int(p["seed"]))
        rows = rows[ROW_COLUMNS]
        rows.to_parquet(tmp / FILE, index=False)
        rel = rows[rows.label == 1]
        figures = {"rows": len(rows), "topics": int(rows.topic.nunique()), "leaked_queries": int(pairs.pair.nunique()),
                   "scored_with": scored.get("with", 0), "scored_without": scored.get("without", 0)}
        for variant in VARIANTS:
            figures[f"mean_rank_relevant_{variant}"] = round(macro_average(rel[rel.variant == variant], "rank")[0], 4)
        log.info("memorization %s: %s", "/".join(cell_path(p)), figures)
        return figures

    def asks(self, r, cells) -> list[Ask]:
        return [c.ask("memorization") for c in cells if wanted(r.settings, c)]

    class Settings(Section):
        """``memorization``: whether Tables 6-8 are computed, and for which training-set sizes."""

        enabled: bool
        sizes: Annotated[list[Literal["each", "cv", "pooled"] | PositiveInt], Field(min_length=1)] | \
            Literal["each", "cv", "pooled"] | PositiveInt
        cv_measure: Name
        msm_query: Literal["topic", "training"] = "topic"
