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
from typing import Annotated, Callable, Literal, Sequence

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from leakexp.runner.loop import each
from leakexp.runner.schema import Name, PositiveInt, Section, validate
from leakexp.runner.stage import Ask, ConfigError, Context, Stage
from leakexp.stages.cell import Cell, cell_path, memorization_params, rerank_params, set_params, train_params
from leakexp.stages.rerank import load_model, scoring
from leakexp.stages.train import reads_idf
from leakexp.toolkit.annotations import verified_leaks

log = logging.getLogger(__name__)

LEAKED = ("msm", "test")
ORIGIN = {"msm": "msm-leak", "test": "test-leak"}
VARIANTS = ("with", "without")
FILE = "memorization.parquet"
SIZE_SELECTORS = ("each", "cv", "pooled")
MSM_QUERIES = ("topic", "training")  # what an MSM-leaked document is scored with (memorization.msm_query)
ROW_COLUMNS = ["corpus", "leakage", "size", "model", "seed", "variant", "topic", "query", "pair", "train_qid",
               "train_query", "source", "docno", "label", "score", "rank", "in_run", "depth"]


# -- pure parts ---------------------------------------------------------------------------------------
def without_cell(cell: "Cell") -> "Cell":
    """The cell a leaked cell is compared with: no leakage, same corpus, size, model and seed."""
    return dataclasses.replace(cell, leakage="none")


def hypothetical_rank(score: float, docno: str, run_scores: Sequence[float], run_docnos: Sequence[str]) -> int:
    """1-based rank a document with ``score`` would get if inserted into a re-ranked run.

    The run is ordered by score descending, ties by docno ascending (``rank_with_docno_ties``): every run
    document with a higher score, or the same score and a smaller docno, stays ahead. A document that
    loses to all of a run of k documents gets k + 1.
    """
    scores = np.asarray(run_scores, dtype=np.float64)
    docnos = np.asarray(run_docnos, dtype=str)
    if scores.shape != docnos.shape:
        raise ValueError(f"run_scores ({scores.shape[0]}) and run_docnos ({docnos.shape[0]}) differ in length")
    ahead = (scores > score) | ((scores == score) & (docnos < str(docno)))
    return int(ahead.sum()) + 1


def leaked_pairs(instances: pd.DataFrame, leakage: str) -> pd.DataFrame:
    """One row per leaked query of a training set: pair, train_qid, train_query, source and the docno and
    text of its relevant (label 1) and non-relevant (label 0) document."""
    if leakage not in LEAKED:
        raise ValueError(f"leakage={leakage!r} has no leaked instances; use msm or test")
    leaked = instances[instances.origin == ORIGIN[leakage]]
    pos = leaked[leaked.label == 1].set_index("pair")
    neg = leaked[leaked.label == 0].set_index("pair")
    if set(pos.index) != set(neg.index) or pos.index.duplicated().any() or neg.index.duplicated().any():
        raise ValueError(f"the {ORIGIN[leakage]} instances are not one relevant and one non-relevant document "
                         "per pair; rebuild the training set")
    out = pd.DataFrame({"pair": pos.index.astype(int), "train_qid": pos.qid.astype(str).values,
                        "train_query": pos["query"].values, "source": pos.source.values,
                        "pos_docno": pos.docno.values, "pos_text": pos.text.values,
                        "neg_docno": neg.loc[pos.index].docno.values, "neg_text": neg.loc[pos.index].text.values})
    return out.sort_values("pair", kind="mergesort").reset_index(drop=True)


def msm_topics(pairs: pd.DataFrame, verified: pd.DataFrame, corpus: str = "") -> pd.DataFrame:
    """(pair, topic) of every MSM-leaked query and every topic of the corpus it leaks for.

    ``verified``: the corpus's true leaks (train_qid, query, topic_qid), as ``verify.verified_leaks``
    gives them. A query is matched on id and text first (two sources may share an id), then on id alone
    (an annotation's text may be normalised differently). A query that leaks for several topics counts
    for each.
    """
    v = verified[["train_qid", "query", "topic_qid"]].astype(str).drop_duplicates()
    by_text = pairs.merge(v, left_on=["train_qid", "train_query"], right_on=["train_qid", "query"])
    rest = pairs[~pairs.pair.isin(by_text.pair)]
    by_id = rest.merge(v.drop(columns="query"), on="train_qid")
    lost = rest[~rest.pair.isin(by_id.pair)]
    if len(lost):
        r = lost.iloc[0]
        raise ValueError(f"corpus {corpus}: leaked training query {r.train_qid} ({r.train_query!r}) has no verified "
                         "leak for any of the corpus's topics; the training set and the verify artifact disagree "
                         "(rebuild the training set with the current annotations)")
    both = pd.concat([by_text[["pair", "topic_qid"]], by_id[["pair", "topic_qid"]]], ignore_index=True)
    both = both.rename(columns={"topic_qid": "topic"}).drop_duplicates()
    return both.sort_values(["pair", "topic"], kind="mergesort").reset_index(drop=True)


def leaked_documents(pairs: pd.DataFrame, topics: pd.DataFrame) -> pd.DataFrame:
    """One row per (leaked query, topic, document): the long frame the ranking works on.

    ``topics``: (pair, topic) — for test leakage each pair's own topic, for MSM leakage ``msm_topics``.
    """
    both = pairs.merge(topics, on="pair", validate="one_to_many")
    rows = []
    for label, prefix in ((1, "pos"), (0, "neg")):
        part = both[["topic", "pair", "train_qid", "train_query", "source"]].copy()
        part["docno"], part["text"], part["label"] = both[f"{prefix}_docno"].values, both[f"{prefix}_text"].values, label
        rows.append(part)
    out = pd.concat(rows, ignore_index=True)
    out["topic"] = out.topic.astype(str)
    return out.sort_values(["topic", "pair", "label"], ascending=[True, True, False], kind="mergesort").reset_index(drop=True)


def rank_leaked(
    docs: pd.DataFrame, run: pd.DataFrame, queries: dict[str, str], score: Callable[[list[str], list[str]], list[float]],
    *, always_score: bool, query_source: str = "topic",
) -> pd.DataFrame:
    """Score and rank of every leaked document (``leaked_documents``) in one model's re-ranked run.

    ``run``: the stored re-ranking (qid, docno, score, rank 0-based). ``queries``: topic -> the query text
    re-ranking used. ``score(queries, texts)``: the model's scores, called once with every document that is
    not in the run (``always_score``: every document, for MS MARCO / ORCAS documents). Adds query, score,
    rank (1-based), in_run and depth (the topic's run length). ``query_source``: ``topic`` scores each document
    with the topic's query (the re-ranking's), ``training`` with the leaking training query it was leaked with
    (``memorization.msm_query``; the paper does not say which).
    """
    if query_source not in MSM_QUERIES:
        raise ValueError(f"memorization.msm_query={query_source!r} is unknown; use {' or '.join(MSM_QUERIES)}")
    run = run.assign(qid=run.qid.astype(str), docno=run.docno.astype(str))
    stored = {(q, d): (float(s), int(r)) for q, d, s, r in zip(run.qid, run.docno, run.score, run["rank"])}
    by_topic = {q: (g.score.to_numpy(np.float64), g.docno.to_numpy(str)) for q, g in run.groupby("qid", sort=False)}
    out = docs.copy()
    out["docno"] = out.docno.astype(str)
    out["query"] = [queries[t] for t in out.topic] if query_source == "topic" else out.train_query.astype(str)
    keys = list(zip(out.topic, out.docno))
    in_run = np.array([not always_score and k in stored for k in keys], dtype=bool)
    need = out.loc[~in_run, ["topic", "query", "docno", "text"]].drop_duplicates(["topic", "query", "docno"])
    scored = {}
    if len(need):
        values = score(need["query"].tolist(), need.text.tolist())
        if len(values) != len(need):
            raise ValueError(f"the scorer returned {len(values)} scores for {len(need)} documents")
        scored = dict(zip(zip(need.topic, need["query"], need.docno), map(float, values)))
    empty = (np.empty(0, np.float64), np.empty(0, str))
    scores, ranks = [], []
    for k, q, inside in zip(keys, out["query"], in_run):
        if inside:
            s, r = stored[k]
            scores.append(s)
            ranks.append(r + 1)
        else:
            s = scored[(k[0], q, k[1])]
            scores.append(s)
            ranks.append(hypothetical_rank(s, k[1], *by_topic.get(k[0], empty)))
    out["score"], out["rank"], out["in_run"] = scores, ranks, in_run
    out["depth"] = [len(by_topic.get(t, empty)[0]) for t in out.topic]
    return out.drop(columns="text")


def paired(rows: pd.DataFrame) -> pd.DataFrame:
    """The with- and without-leakage rows of each leaked document side by side (rank_with, rank_without,
    score_with, score_without), matched on corpus, leakage, size, model, seed, topic, pair and document."""
    keys = ["corpus", "leakage", "size", "model", "seed", "topic", "pair", "docno", "label"]
    sides = []
    for variant in VARIANTS:
        side = rows[rows.variant == variant].set_index(keys)[["score", "rank"]]
        if side.index.duplicated().any():
            raise ValueError(f"several '{variant}' rows for one leaked document: {side.index[side.index.duplicated()][0]}")
        sides.append(side.add_suffix(f"_{variant}"))
    both = sides[0].join(sides[1], how="outer")
    lonely = both[both.isna().any(axis=1)]
    if len(lonely):
        raise ValueError(f"{len(lonely)} leaked document(s) lack a with- or without-leakage row, e.g. {lonely.index[0]}")
    return both.reset_index()


def rank_offsets(rows: pd.DataFrame) -> pd.DataFrame:
    """Per leaked query, topic and variant: rank of the non-relevant minus rank of the relevant document
    (positive: the relevant document is ahead)."""
    keys = ["corpus", "leakage", "size", "model", "seed", "variant", "topic", "pair"]
    wide = rows.pivot_table(index=keys, columns="label", values="rank", aggfunc="first")
    if 0 not in wide.columns or 1 not in wide.columns or wide[[0, 1]].isna().any().any():
        raise ValueError("every leaked query needs both its relevant and its non-relevant document")
    return (wide[0] - wide[1]).rename("offset").reset_index()


def offset_increase(rows: pd.DataFrame) -> pd.DataFrame:
    """Per leaked query and topic: rank offset with leakage minus rank offset without (Table 8's Δ)."""
    off = rank_offsets(rows)
    keys = ["corpus", "leakage", "size", "model", "seed", "topic", "pair"]
    wide = off.pivot_table(index=keys, columns="variant", values="offset", aggfunc="first")
    return (wide["with"] - wide["without"]).rename("increase").reset_index()


def macro_average(rows: pd.DataFrame, value: str) -> tuple[float, float, int]:
    """(mean, standard deviation, topics) over topics of each topic's mean ``value``.

    A topic's leaked queries (and seeds) are averaged first, so every topic weighs the same; the standard
    deviation (ddof 1, NaN for one topic) is that of the per-topic means.
    """
    per_topic = rows.groupby("topic")[value].mean()
    if per_topic.empty:
        return float("nan"), float("nan"), 0
    std = float(per_topic.std(ddof=1)) if len(per_topic) > 1 else float("nan")
    return float(per_topic.mean()), std, int(len(per_topic))


def cv_choice(cv_sizes: pd.DataFrame, measure: str) -> pd.DataFrame:
    """The size the cross-validation chose most often (over folds) per corpus, model and leaked type, for
    ``measure``; ties go to the smaller size (as the CV's own choice). Columns corpus, model, leakage,
    size, folds (how many folds chose it), of (folds in all)."""
    s = cv_sizes[(cv_sizes.measure == measure) & cv_sizes.leakage.isin(LEAKED)]
    rows = []
    for (corpus, model, leakage), g in s.groupby(["corpus", "model", "leakage"], sort=True):
        counts = g["size"].astype(int).value_counts()
        best = int(counts.max())
        rows.append({"corpus": corpus, "model": model, "leakage": leakage,
                     "size": int(min(counts.index[counts == best])), "folds": best, "of": int(len(g))})
    return pd.DataFrame(rows, columns=["corpus", "model", "leakage", "size", "folds", "of"])


# -- config ---------------------------------------------------------------------------------------------
def memorization_settings(cfg: DictConfig) -> "MemorizationSettings":
    """The ``memorization`` section validated by its schema (every domain), sizes always a list."""
    m = validate("memorization", MemorizationSettings, OmegaConf.to_container(cfg.memorization, resolve=True))
    return m.model_copy(update={"sizes": m.sizes if isinstance(m.sizes, list) else [m.sizes]})


def validate_settings(cfg: DictConfig) -> None:
    """What the schema cannot say: the sizes named must be sizes of the grid, the CV measure one of the measures."""
    s = memorization_settings(cfg)
    grid_sizes = [int(x) for x in cfg.grid.sizes]
    for v in s.sizes:
        if isinstance(v, int) and v not in grid_sizes:
            raise ConfigError(f"memorization.sizes has {v}, which is not in grid.sizes {grid_sizes}")
    if s.cv_measure not in list(cfg.evaluate.measures):
        raise ConfigError(f"memorization.cv_measure={s.cv_measure!r} is not one of evaluate.measures "
                          f"{list(cfg.evaluate.measures)}")


def wanted(cfg: DictConfig, cell: "Cell") -> bool:
    """Whether the grid computes the memorization stage for ``cell`` (a leaked cell, stage enabled)."""
    return cell.leakage in LEAKED and memorization_settings(cfg).enabled


# -- the stage ------------------------------------------------------------------------------------------
def _reads(p: dict, cuda: bool) -> list[str]:
    # the model's settings say whether it reads idf (then the corpus's df table is an input)
    return ["rerank.query_field", "models.{model}", "!models.{model}.train.score_batch_size"] + (
        ["memorization.msm_query"] if p["leakage"] == "msm" else []) + (["precision.rerank_bf16"] if cuda else [])


def _inputs(p: dict, c) -> dict:
    """The leaked cell's training set, both models and their re-rankings of the corpus (with and without
    leakage), the collection (query texts), the idf the models read, and for MSM the verified leaks."""
    without = {**p, "leakage": "none"}
    inputs = {"set": Ask.of("sets", **set_params(p)),
              "model-with": Ask.of("train", **train_params(p)), "model-without": Ask.of("train", **train_params(without)),
              "run-with": Ask.of("rerank", **rerank_params(p)), "run-without": Ask.of("rerank", **rerank_params(without)),
              "collection": Ask.of("collection", corpus=p["corpus"])}
    if reads_idf(c, p["model"]):
        inputs["df"] = Ask.of("df", name=p["corpus"])
    if p["leakage"] == "msm":  # MSM leaks map to their topics through the verified annotations
        inputs["annotations"] = Ask.of("verify")
    return inputs


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


def _memorize(ctx: Context, tmp: Path) -> dict:
    """Scores only documents outside the runs, batched, once per model; ranks in the stored runs otherwise."""
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


MEMORIZATION = Stage(
    "memorization", version=1, reads=_reads, inputs=_inputs, compute=_memorize, normalise=memorization_params, path=lambda p, c: cell_path(p),
    device=True, check=validate_settings,
    describe="ranks and scores of a leaked cell's leaked documents with and without leakage (Tables 6-8)",
)


# -- running it through a runner --------------------------------------------------------------------------
def ready_cells(cfg: DictConfig, runner, cell: Cell) -> list[Cell]:
    """The leaked cells whose memorization can be computed now that ``cell`` is finished: the cell itself
    (leaked) or its MSM and test siblings (no leakage), where both re-rankings are in the store. Cheap.

    Whichever of a leaked cell and its no-leakage cell finishes last computes it, so grid workers never
    wait for, or train, a model of another cell (``compute_all`` does, for grids without ``none``)."""
    family = [cell] if cell.leakage in LEAKED else [dataclasses.replace(cell, leakage=l) for l in LEAKED]
    return [c for c in family if wanted(cfg, c)
            and all(runner.state(x.ask("rerank"))[0] == "done" for x in (c, without_cell(c)))]


def compute_all(cfg: DictConfig, runner, cells: list[Cell]) -> tuple[list[Path], list[tuple[Cell, Exception]]]:
    """The memorization artifacts of every wanted cell among ``cells`` (and what they lack upstream); a
    failing cell is reported and does not stop the others."""
    done = []
    failed = each([c for c in cells if wanted(cfg, c)], lambda cell: runner.ensure(cell.ask("memorization")),
                  desc="memorization", done=lambda cell, path: done.append(path))
    return done, failed


class MemorizationSettings(Section):
    """``memorization``: whether Tables 6-8 are computed, and for which training-set sizes."""

    enabled: bool
    sizes: Annotated[list[Literal["each", "cv", "pooled"] | PositiveInt], Field(min_length=1)] | \
        Literal["each", "cv", "pooled"] | PositiveInt
    cv_measure: Name
    msm_query: Literal["topic", "training"] = "topic"
