"""Robustness of the trained re-rankers, with and without leakage (Wu et al., "Are Neural Ranking Models
Robust?", ACM TOIS 2022), and whether leakage makes a model more brittle.

Per grid cell (a trained model), each part is its own stage, keyed by what it reads (``ROBUSTNESS_STAGES``):

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
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Sequence

import ir_measures
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf
from pydantic import Field
from scipy import stats as sps

from leakexp.lib.measures import LOWER_IS_BETTER, per_query
from leakexp.runner.loop import each
from leakexp.runner.schema import Name, PositiveInt, Section, validate
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage
from leakexp.runner.store import file_digest
from leakexp.stages.cell import Cell, grid_cells, rerank_params, rerank_path, train_params
from leakexp.stages.rerank import load_model, rerank, scoring
from leakexp.stages.train import reads_idf
from leakexp.toolkit import attacks

log = logging.getLogger(__name__)

FIRST_STAGES = ("pool", "bm25")
OOD_TOPICS = ("disjoint", "all")


# =========================================================================================================
# Measures (pure functions on hand-made data)
# =========================================================================================================
def vnap(ap: Sequence[float]) -> float:
    """Variance of normalised average precision over test queries (Wu et al., Section 3.2, Eqs. 5-6):
    NAP(q) = AP(q) / mean AP, VNAP = E[(NAP - E[NAP])^2], the expectation uniform over queries (population
    variance, ddof 0). Lower is more robust. NaN without queries or when every AP is 0."""
    a = np.asarray(list(ap), dtype=float)
    if a.size == 0 or a.mean() == 0:
        return float("nan")
    nap = a / a.mean()
    return float(np.mean((nap - nap.mean()) ** 2))


def pct_no(precision_at_10: Sequence[float]) -> float:
    """%no (Wu et al., Section 3.5.1, Eq. 8, after Voorhees [86]): the percentage of queries with no relevant
    document (label >= 1) in the top 10, 100 * mean_q prod_{n<=10} delta(y_qn = 0). A query has no relevant
    document in its top 10 exactly when its P@10 is 0 (a ranking shorter than 10 counts its missing ranks as
    non-relevant, as P@10 does), so the per-query input is P@10. Lower is more robust; NaN without queries."""
    p = np.asarray(list(precision_at_10), dtype=float)
    p = p[~np.isnan(p)]
    return float(100.0 * np.mean(p == 0)) if p.size else float("nan")


def gmap(ap: Sequence[float], epsilon: float) -> float:
    """gMAP (Wu et al., Section 3.5.1, Eq. 9, after Voorhees [86, 87]): exp(mean_q log(AP(q) + eps)) - eps, the
    geometric mean of AP with a small positive ``epsilon`` (``robustness.gmap_epsilon``) so that a query with AP 0
    does not send it to 0. Higher is more robust; NaN without queries."""
    if not epsilon > 0:
        raise ValueError(f"gMAP needs epsilon > 0, got {epsilon}")
    a = np.asarray(list(ap), dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return float("nan")
    return float(np.exp(np.mean(np.log(a + epsilon))) - epsilon)


def own_worst_mean(values: Sequence[float], fraction: float) -> float:
    """Mean of a model's ceil(fraction * n) lowest per-topic values, chosen on its *own* values (leakexp's own
    worst-fraction figure; Wu et al. define %no and gMAP, not this). Selecting on one model's values and
    measuring another's on those topics would compare a regression to the mean; here every model is measured
    on its own worst topics, as %no and gMAP are, and a comparison of two models is tested by
    :func:`paired_randomization` with the selection redone in every permutation."""
    if not 0 < fraction <= 1:
        raise ValueError(f"worst-query fraction {fraction} must be in (0, 1]")
    v = np.sort(np.asarray(list(values), dtype=float)[~np.isnan(np.asarray(list(values), dtype=float))])
    if v.size == 0:
        return float("nan")
    return float(v[:math.ceil(fraction * v.size)].mean())


def rank_gain(rank_before: Sequence[int], rank_after: Sequence[int]) -> np.ndarray:
    """Ranks a stuffed document climbs (0-based rank before minus rank after; positive = promoted): the figure
    that says what query stuffing (Section 5.2's manipulation, simulated) achieves, where Top Change and
    Kendall-tau distance, with one moved document, say little."""
    return np.asarray(list(rank_before), dtype=float) - np.asarray(list(rank_after), dtype=float)


def normalised_text(text: str) -> str:
    return " ".join(str(text).lower().split())


def shared_topics(source: pd.DataFrame, target: pd.DataFrame) -> set[str]:
    """Topics (qid) of ``target`` that ``source`` also has: the same id with the same query text, or the same
    query text under another id (case and spacing ignored). TREC Core 2017 reuses Robust04's topics (and Core
    2018 some of them), so "OOD" from Robust04 to those topics is out of distribution in documents but not in
    queries; the topic-disjoint rest is the default OOD evaluation (``robustness.ood_topics``). A reused id with
    another text is another topic. Both frames have columns qid, query."""
    src = dict(zip(source.qid.astype(str), source["query"].map(normalised_text)))
    texts = set(src.values())
    return {str(q) for q, t in zip(target.qid.astype(str), target["query"].map(normalised_text))
            if src.get(q) == t or t in texts}


def bootstrap_ci(arrays: Sequence[np.ndarray], statistic, B: int, seed: int,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap confidence interval over topics: ``B`` resamples (with replacement, seeded
    ``numpy.random.default_rng(seed)``) of the topics of each array independently (an array is (seeds, topics,
    k): its k values of a topic move together, e.g. a topic's original and attacked value), ``statistic`` of the
    resampled arrays per seed, averaged over seeds. NaN bounds when any array has no topic."""
    if any(a.shape[1] == 0 for a in arrays):
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    samples = [a[:, rng.integers(0, a.shape[1], size=(B, a.shape[1]))] for a in arrays]  # (S, B, n, k)
    with np.errstate(all="ignore"):
        values = np.nanmean(statistic(*samples), axis=0) if samples[0].shape[0] > 1 else statistic(*samples)[0]
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def paired_randomization(a: np.ndarray, b: np.ndarray, statistic, B: int, seed: int) -> float:
    """Two-sided paired randomization test (Fisher; Smucker et al., CIKM 2007) of statistic(a) - statistic(b)
    for two systems' values on the same topics (``a[i]``, ``b[i]`` of topic i): each permutation swaps the two
    values of every topic with probability 1/2, seeded, ``B`` permutations; p = (1 + #|T*| >= |T|) / (B + 1).
    ``statistic`` maps an array (..., topics) to (...); it is recomputed on every permutation, so a statistic
    that selects topics (:func:`own_worst_mean`) selects again and the test carries no selection bias."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if a.size < 2:
        return 1.0
    observed = float(statistic(a[None])[0] - statistic(b[None])[0])
    swap = np.random.default_rng(seed).random((B, a.size)) < 0.5
    pa, pb = np.where(swap, b, a), np.where(swap, a, b)
    null = statistic(pa) - statistic(pb)
    return float((1 + np.sum(np.abs(null) >= abs(observed) - 1e-12)) / (B + 1))


def own_worst_stat(fraction: float):
    """:func:`own_worst_mean` vectorised over leading axes: (..., topics) -> (...), NaN topics left out."""
    def stat(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        s = np.sort(np.where(np.isnan(x), np.inf, x), axis=-1)
        n = np.sum(~np.isnan(x), axis=-1)
        k = np.ceil(fraction * n).astype(int)
        take = np.arange(x.shape[-1]) < k[..., None]
        with np.errstate(all="ignore"):
            return np.where(k > 0, np.sum(np.where(take, s, 0.0), axis=-1) / k, np.nan)
    return stat


def worst_queries(values: pd.Series, fraction: float) -> list[str]:
    """The ceil(fraction * n) topics with the lowest values (ties by qid) of one model (its own poorly-performing
    topics; Wu et al., Section 3.5, measure them by %no and gMAP instead)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"worst-query fraction {fraction} must be in (0, 1]")
    v = values.dropna()
    k = math.ceil(fraction * len(v))
    order = sorted(v.index, key=lambda q: (v[q], str(q)))
    return [str(q) for q in order[:k]]


def drop_rate(new: float, reference: float) -> float:
    """(P_new - P_ref) / P_ref: DR_OOD (Wu et al., Section 4.1.2, Eq. 11; P_new = P_OOD, P_ref = P_I.I.D.) and
    DR_query (Section 5.1.2, Eq. 16; P_new = P_t on attacked, P_ref = P_o on original queries). Negative is a
    drop; higher is more robust. NaN when P_ref is 0 (no drop rate exists)."""
    if reference == 0 or np.isnan(reference) or np.isnan(new):
        return float("nan")
    return float((new - reference) / reference)


def drop_contributions(new: pd.Series, reference: pd.Series | float) -> pd.Series:
    """Per-topic terms whose mean is the drop rate: (new(q) - ref(q)) / mean(ref), or (new(q) - P_ref) / P_ref
    for a scalar reference (DR_OOD). They give the paired tests of leaked vs. no leakage a per-topic value."""
    if isinstance(reference, pd.Series):
        ref_mean = float(reference.mean())
        diff = new - reference
    else:
        ref_mean = float(reference)
        diff = new - ref_mean
    if ref_mean == 0 or np.isnan(ref_mean):
        return diff * np.nan
    return diff / ref_mean


def strict_ranking(run: pd.DataFrame) -> list[str]:
    """Docnos of one topic's run by score descending, ties by docno ascending (the pipeline's order)."""
    return run.sort_values(["score", "docno"], ascending=[False, True], kind="mergesort").docno.astype(str).tolist()


def rescored_rankings(run: pd.DataFrame, before: dict[str, float],
                      after: dict[str, float]) -> tuple[list[str], list[str]]:
    """One topic's ranking before and after a document manipulation: the stored scores (docno, score), with
    the manipulated documents' scores replaced by their re-scored original (``before``) and manipulated
    (``after``) text. Both rankings hold the same documents."""
    if set(after) != set(before) or not set(before) <= set(run.docno):
        raise ValueError("before and after must re-score the same documents of the run")
    b = run[["docno", "score"]].copy()
    a = b.copy()
    b["score"] = [before.get(d, s) for d, s in zip(b.docno, b.score)]
    a["score"] = [after.get(d, s) for d, s in zip(a.docno, a.score)]
    return strict_ranking(b), strict_ranking(a)


def top_change(before: Sequence[str], after: Sequence[str]) -> int:
    """TC (Wu et al., Section 5.2.2, Eq. 20, after Goren et al. [27]): 1 if the top document differs."""
    if not before or not after:
        raise ValueError("top change needs two non-empty rankings")
    return int(before[0] != after[0])


def kendall_tau_distance(before: Sequence[str], after: Sequence[str]) -> float:
    """Normalised Kendall-tau distance KT (Wu et al., Section 5.2.2, Eqs. 21-22): discordant pairs of two
    rankings of the *same* documents over n(n-1)/2.

    Both rankings are strict orders (the pipeline breaks score ties by docno), so no pair is tied and
    scipy's tau-b equals (C - D) / (n(n-1)/2) with C + D = n(n-1)/2, hence KT = (1 - tau) / 2 exactly.
    NaN for fewer than two documents (no pairs)."""
    b, a = list(before), list(after)
    if len(set(b)) != len(b) or len(set(a)) != len(a):
        raise ValueError("a ranking lists a document twice")
    if set(b) != set(a):
        raise ValueError(f"Kendall-tau distance needs rankings of the same documents; only in one: "
                         f"{sorted(set(b) ^ set(a))[:5]}")
    n = len(b)
    if n < 2:
        return float("nan")
    pos = {d: i for i, d in enumerate(a)}
    tau = sps.kendalltau(np.arange(n), [pos[d] for d in b])[0]
    return float((1.0 - tau) / 2.0)


# =========================================================================================================
# The options, as the stages read them
# =========================================================================================================
@dataclass(frozen=True)
class RobustnessOptions:
    """The ``robustness:`` block of the config, checked."""

    corpora: tuple[str, ...] | None
    sizes: tuple[int, ...] | None
    query_attacks: tuple[str, ...]
    first_stage: str
    doc_manipulations: tuple[str, ...]
    stuff_repeats: int
    stuff_from_rank: int
    noise_rate: float
    ood: tuple[str, ...] | None
    measure: str
    worst: tuple[float, ...]
    seed: int
    synonyms: str
    misspellings: str
    gmap_epsilon: float
    bootstrap: int
    ood_topics: str


def robustness_settings(cfg: DictConfig) -> RobustnessOptions:
    """The robustness settings of ``cfg``: the section validated by its schema (:class:`RobustnessSettings`: every
    domain), then what only code can check (attack names, the measure, word lists) and the grid it applies to."""
    r = cfg.get("robustness")
    if r is None:
        raise ConfigError("the config has no 'robustness' block; use leakexp's conf/config.yaml")
    v = validate("robustness", RobustnessSettings, OmegaConf.to_container(r, resolve=True))
    try:
        qa = tuple(attacks.check_attack(a) for a in v.query_attacks or [])
        dm = tuple(attacks.check_manipulation(d) for d in v.doc_manipulations or [])
    except attacks.AttackError as exc:
        raise ConfigError(f"robustness: {exc}") from None
    if v.measure in LOWER_IS_BETTER:
        raise ConfigError(f"robustness.measure={v.measure}: drop rates need a higher-is-better measure, e.g. nDCG@10")
    try:
        ir_measures.parse_measure(v.measure)
    except Exception:
        raise ConfigError(f"robustness.measure={v.measure!r} cannot be parsed; e.g. nDCG@10, AP, P@10") from None
    # the grid's largest size, whatever the grid (the demo's choice); corpora and sizes outside this grid are simply
    # not run (a narrowed grid keeps working), but their names must exist
    sizes = [max(int(x) for x in cfg.grid.sizes)] if v.sizes == "largest" else v.sizes
    for key, values in (("corpora", v.corpora), ("ood", v.ood)):
        bad = [x for x in values or [] if x not in list(cfg.data.corpora)]
        if bad:
            raise ConfigError(f"robustness.{key} has {bad[0]!r}, which is not in data.corpora="
                              f"{list(cfg.data.corpora)}; choose from those or null")
    for key in ("synonyms", "misspellings"):
        if getattr(v, key) != "bundled":
            try:
                attacks.load_wordlist(getattr(v, key))
            except attacks.AttackError as exc:
                raise ConfigError(f"robustness.{key}: {exc}") from None
    return RobustnessOptions(
        corpora=None if v.corpora is None else tuple(v.corpora), sizes=None if sizes is None else tuple(sizes),
        query_attacks=qa, first_stage=v.first_stage, doc_manipulations=dm, stuff_repeats=v.stuff.repeats,
        stuff_from_rank=v.stuff.from_rank, noise_rate=v.noise.rate, ood=None if v.ood is None else tuple(v.ood),
        measure=v.measure, worst=tuple(v.worst), seed=v.seed, synonyms=v.synonyms, misspellings=v.misspellings,
        gmap_epsilon=v.gmap_epsilon, bootstrap=v.bootstrap, ood_topics=v.ood_topics,
    )


def robustness_cells(cfg: DictConfig) -> list[Cell]:
    """The grid cells that get robustness artifacts (``robustness.corpora`` / ``robustness.sizes``)."""
    s = robustness_settings(cfg)
    return [c for c in grid_cells(cfg) if (s.corpora is None or c.corpus in s.corpora)
            and (s.sizes is None or c.size in s.sizes)]




# =========================================================================================================
# The stages
# =========================================================================================================
QUERIES, DOCS = "robustness/attacked-queries", "robustness/manipulated-docs"
OWN, OOD, QUERY, DOC = ("robustness/own-corpus", "robustness/ood", "robustness/query-attack",
                        "robustness/doc-manipulation")
WORDLIST_KEY = {"word-synonym": "synonyms", "word-misspell": "misspellings"}  # the one list each word attack reads


def wordlist_file(name: str, value: str) -> Path:
    """The file of word list ``name`` (synonyms, misspellings) that config value ``value`` names."""
    return attacks.bundled_wordlist(name) if str(value) == "bundled" else Path(str(value))


# -- shared: attacked queries of a corpus ------------------------------------------------------------------
def _queries_reads(p: dict, cuda: bool) -> list[str]:
    reads = ["robustness.seed", "rerank.query_field"]
    if p["attack"] in WORDLIST_KEY:
        reads.append(f"robustness.{WORDLIST_KEY[p['attack']]}")
    if p["first_stage"] == "bm25":  # BM25 re-run with the attacked query (its analysis is the index's)
        reads += ["rerank.depth", "bm25.k1", "bm25.b"]
    return reads


def _queries_inputs(p: dict, c: Config) -> dict:
    inputs = {"topics": Ask.of("collection", corpus=p["corpus"])}
    if p["first_stage"] == "bm25":
        inputs["index"] = Ask.of("index", name=p["corpus"])
    else:
        inputs["run"] = Ask.of("firststage", corpus=p["corpus"])
    return inputs


def _wordlists_external(p: dict, c: Config):
    """The content of the word list the attack reads (not its path or time): an edited list redoes the attack."""
    name = WORDLIST_KEY.get(p["attack"])
    if name is None:
        return None
    return {name: file_digest(wordlist_file(name, c.at(f"robustness.{name}", "bundled")))}


def _attacked_queries(ctx: Context, tmp: Path) -> dict:
    """``attacks.tsv``/``.parquet`` (qid, original, attacked, applied, edits) and ``pool.parquet``: the candidates
    the re-ranker scores for the attacked topics (BM25 re-run with the attacked query, or the original pool)."""
    p, r = ctx.params, ctx.settings("robustness")
    attack = p["attack"]
    name = WORDLIST_KEY.get(attack)
    lists = {"synonyms": {}, "misspellings": {}}
    if name is not None:
        lists[name] = attacks.load_wordlist(wordlist_file(name, getattr(r, name)))
    topics = ctx.inputs["topics"].topics_frame(ctx.settings("rerank").query_field)
    att = attacks.attack_queries(topics, attack, r.seed, attacks.WordLists(**lists))
    applied = att[att.applied][["qid", "attacked"]].rename(columns={"attacked": "query"})
    if p["first_stage"] == "bm25":
        from leakexp.lib.bm25 import bm25_search

        bm25 = ctx.settings("bm25")
        pool = bm25_search(ctx.inputs["index"], applied, depth=ctx.settings("rerank").depth, k1=bm25.k1, b=bm25.b,
                           threads=int(ctx.runtime.get("threads", 2)), verbose=bool(ctx.runtime.get("verbose", False)))
    else:
        run = ctx.inputs["run"]
        pool = run[run.qid.isin(set(applied.qid))].drop(columns="query").merge(applied, on="qid")
        pool = pool[["qid", "query", "docno", "score", "rank"]]
    att.to_parquet(tmp / "attacks.parquet", index=False)
    (tmp / "attacks.tsv").write_text(att.to_csv(sep="\t", index=False), encoding="utf-8")
    pool.reset_index(drop=True).to_parquet(tmp / "pool.parquet", index=False)
    return {"topics": len(att), "applied": int(att.applied.sum()), "pool_rows": len(pool)}


ATTACKED_QUERIES = Stage(
    QUERIES, version=1, reads=_queries_reads, inputs=_queries_inputs, compute=_attacked_queries,
    external=_wordlists_external, path=lambda p, c: [p["corpus"], p["attack"], p["first_stage"]], check=robustness_settings,
    describe="a corpus's test queries under one seeded query attack, and the first-stage pool for them",
)


# -- shared: manipulated documents of a corpus ---------------------------------------------------------------
def _docs_reads(p: dict, cuda: bool) -> list[str]:
    kind = attacks.check_manipulation(p["kind"])
    return ["robustness.seed", *(["robustness.stuff.repeats", "robustness.stuff.from_rank"] if kind == "stuff"
                                 else ["robustness.noise.rate"])]


def _manipulated_docs(ctx: Context, tmp: Path) -> dict:
    """``documents.tsv``/``.parquet``: stuffed documents (qid, docno, first_stage_rank, query, text), one per
    topic, or noisy documents (docno, edited_words, text) of every document in the corpus's first-stage pools."""
    r, kind = ctx.settings("robustness"), ctx.params["kind"]
    seed = r.seed
    run, docs = ctx.inputs["run"], ctx.inputs["collection"].docs
    if kind == "stuff":
        repeats = r.stuff.repeats
        frame = attacks.stuffing_targets(run, r.stuff.from_rank, seed)
        frame["text"] = [attacks.stuff_document(docs[d], q, repeats, attacks.query_rng(seed, "stuff-text", str(qid)))
                         for qid, q, d in zip(frame.qid, frame["query"], frame.docno)]
    else:
        rate, rows = r.noise.rate, []
        for d in sorted(set(run.docno)):
            text, n = attacks.noise_document(docs[d], rate, attacks.query_rng(seed, "noise", str(d)))
            if n:
                rows.append({"docno": d, "edited_words": n, "text": text})
        frame = pd.DataFrame(rows, columns=["docno", "edited_words", "text"])
    frame.to_parquet(tmp / "documents.parquet", index=False)
    (tmp / "documents.tsv").write_text(frame.to_csv(sep="\t", index=False), encoding="utf-8")
    return {"documents": len(frame)}


MANIPULATED_DOCS = Stage(
    DOCS, version=1, reads=_docs_reads, compute=_manipulated_docs,
    inputs=lambda p, c: {"run": Ask.of("firststage", corpus=p["corpus"]),
                         "collection": Ask.of("collection", corpus=p["corpus"])},
    path=lambda p, c: [p["corpus"], p["kind"]],
    describe="a corpus's documents under one seeded manipulation (query stuffing or character noise)",
)


# -- per cell ----------------------------------------------------------------------------------------------
def _part_params(extra: str):
    """A part depends on the re-ranking (the model and the corpus it ranks) and on ``extra`` (attack, kind)."""
    return lambda p: {**rerank_params(p), extra: p[extra]}


def _part_path(p: dict, *extra: str) -> list[str]:
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


def _own(ctx: Context, tmp: Path) -> dict:
    """The model on its own corpus's test topics (the corpus whose leaked queries a leaked model saw; Wu et al.'s
    P_I.I.D., though nothing here is an i.i.d. test split: the models are trained on MS MARCO / ORCAS)."""
    m = ctx.settings("robustness").measure
    pq = _values(ctx, pd.read_parquet(ctx.inputs["run"] / "run.parquet"), _own_measures(ctx))
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    ap = pq[pq.measure == "AP"].value
    return {"mean": float(pq[pq.measure == m].value.mean()), "MAP": float(ap.mean()), "VNAP": vnap(ap),
            "%no": pct_no(pq[pq.measure == "P@10"].value)}


def _ood(ctx: Context, tmp: Path) -> dict:
    """The model on another corpus (P_OOD, Eq. 13), per topic, with ``shared``: whether the topic is also one of
    the source corpus's topics (:func:`shared_topics`; Core 2017 reuses Robust04's)."""
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


def _scoring_reads(p: dict, cuda: bool) -> list[str]:
    """What scoring with the cell's model reads: the model's config (whether it reads idf), bf16 on CUDA."""
    return ["models.{model}", "!models.{model}.train.score_batch_size"] + (["precision.rerank_bf16"] if cuda else [])


def _model_inputs(p: dict, c: Config) -> dict:
    """The re-ranking, the trained model, the ranked collection and (for models that read idf) its df table."""
    inputs = {**_eval_inputs(p, c), "model": Ask.of("train", **train_params(p))}
    if reads_idf(c, p["model"]):
        inputs["df"] = Ask.of("df", name=p["target"])
    return inputs


def _query_inputs(p: dict, c: Config) -> dict:
    queries = Ask.of(QUERIES, corpus=p["target"], attack=p["attack"],
                     first_stage=str(c.at("robustness.first_stage", "pool")))
    return {**_model_inputs(p, c), "queries": queries}


def _query(ctx: Context, tmp: Path) -> dict:
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
    pq = pd.DataFrame({"qid": before.index, "applied": before.index.isin(applied),
                       "original": before.values, "attacked": after.reindex(before.index).values})
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    a = pq[pq.applied]
    return {"applied": len(a), "scored_pairs": len(new),
            "original": float(a.original.mean()) if len(a) else None,
            "attacked": float(a.attacked.mean()) if len(a) else None,
            "DR_query": drop_rate(a.attacked.mean(), a.original.mean()) if len(a) else None}


def _doc(ctx: Context, tmp: Path) -> dict:
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
    rows = []
    for qid, g in run.groupby("qid", sort=True):
        changed = pairs[pairs.qid == qid]
        if changed.empty:
            continue
        rb, ra = rescored_rankings(g, dict(zip(changed.docno, changed.before)), dict(zip(changed.docno, changed.after)))
        row = {"qid": qid, "documents": len(g), "manipulated": len(changed),
               "TC": top_change(rb, ra), "KT": kendall_tau_distance(rb, ra), "before_is_stored": rb == strict_ranking(g)}
        if kind == "stuff":
            d = str(changed.docno.iloc[0])
            row.update(docno=d, rank_before=rb.index(d), rank_after=ra.index(d), relevant=(str(qid), d) in relevant)
            row["gain"] = row["rank_before"] - row["rank_after"]
        rows.append(row)
    pq = pd.DataFrame(rows)
    pq.to_parquet(tmp / "perquery.parquet", index=False)
    out = {"topics": len(pq), "scored_pairs": 2 * len(pairs), "TC": float(pq.TC.mean()) if len(pq) else None,
           "KT": float(pq.KT.mean()) if len(pq) else None}
    if kind == "stuff" and len(pq):
        other = pq[~pq.relevant]
        out.update(relevant_targets=int(pq.relevant.sum()),
                   mean_gain=float(other.gain.mean()) if len(other) else None)
    return out


OWN_STAGE = Stage(
    OWN, version=2, reads=("robustness.measure", "evaluate.no_relevant"), inputs=_eval_inputs, compute=_own,
    normalise=rerank_params, path=lambda p, c: _part_path(p),
    describe="per-topic effectiveness, AP and P@10 of a cell's re-ranking of its own corpus (VNAP, %no, gMAP)",
)
OOD_STAGE = Stage(
    OOD, version=2, reads=("robustness.measure", "evaluate.no_relevant", "rerank.query_field"),
    inputs=lambda p, c: {**_eval_inputs(p, c), "source": Ask.of("collection", corpus=p["corpus"])},
    compute=_ood, normalise=lambda p: {**rerank_params(p), "corpus": p["corpus"]},
    path=lambda p, c: _part_path(p),
    describe="per-topic effectiveness of a model's re-ranking of another corpus, topics shared or not (OOD, DR_OOD)",
)
QUERY_STAGE = Stage(
    QUERY, version=2, reads=lambda p, cuda: ["robustness.measure", "robustness.first_stage", "evaluate.no_relevant",
                                             *_scoring_reads(p, cuda)],
    inputs=_query_inputs, compute=_query, normalise=_part_params("attack"),
    path=lambda p, c: _part_path(p, p["attack"]), device=True,
    describe="a cell's model re-ranking its corpus's attacked queries (DR_query)",
)
DOC_STAGE = Stage(
    DOC, version=2, reads=_scoring_reads, compute=_doc, normalise=_part_params("kind"),
    inputs=lambda p, c: {**_model_inputs(p, c), "docs": Ask.of(DOCS, corpus=p["target"], kind=p["kind"])},
    path=lambda p, c: _part_path(p, p["kind"]), device=True,
    describe="a cell's rankings before and after manipulated documents (Top Change, Kendall-tau distance)",
)

ROBUSTNESS_STAGES = (ATTACKED_QUERIES, MANIPULATED_DOCS, OWN_STAGE, OOD_STAGE, QUERY_STAGE, DOC_STAGE)


# =========================================================================================================
# Requests of a cell's robustness, and running them through a runner
# =========================================================================================================
def ood_targets(s: RobustnessOptions, cfg: DictConfig, cell: Cell) -> list[str]:
    targets = s.ood if s.ood is not None else tuple(cfg.grid.corpora)
    return [c for c in dict.fromkeys(targets) if c != cell.corpus]


def asks(cfg: DictConfig, cell: Cell) -> dict[str, Ask]:
    """Every part of ``cell``'s robustness: part name (own, ood-<corpus>, <attack>, doc-<kind>) -> request."""
    s = robustness_settings(cfg)
    out = {"own": cell.ask(OWN)}
    out.update({f"ood-{t}": cell.ask(OOD, target=t) for t in ood_targets(s, cfg, cell)})
    out.update({a: cell.ask(QUERY, attack=a) for a in s.query_attacks})
    out.update({f"doc-{k}": cell.ask(DOC, kind=k) for k in s.doc_manipulations})
    return out


def queries_ask(cfg: DictConfig, corpus: str, attack: str) -> Ask:
    """The shared attacked queries of ``corpus`` under ``attack`` (with this config's first stage)."""
    return Ask.of(QUERIES, corpus=corpus, attack=attack, first_stage=robustness_settings(cfg).first_stage)


def docs_ask(corpus: str, kind: str) -> Ask:
    """The shared manipulated documents of ``corpus`` (``kind``: stuff or noise)."""
    return Ask.of(DOCS, corpus=corpus, kind=kind)


def robust(cfg: DictConfig, runner, cell: Cell) -> dict[str, Path]:
    """Compute (once) every robustness part of ``cell`` and everything it lacks upstream; part -> artifact."""
    return {name: runner.ensure(ask) for name, ask in asks(cfg, cell).items()}


def robust_all(cfg: DictConfig, runner, cells: list[Cell]) -> list[tuple[Cell, Exception]]:
    """``robust`` for every cell with a progress bar; a failing cell is logged and skipped. Returns failures."""
    return each(cells, lambda cell: robust(cfg, runner, cell), desc="robustness")


def cell_state(cfg: DictConfig, runner, cell: Cell) -> str:
    """done if every robustness part of the cell is done, else the first of failed, damaged, stale, running,
    missing among its parts. Computes nothing."""
    states = [runner.state(ask)[0] for ask in asks(cfg, cell).values()]
    for s in ("failed", "damaged", "stale", "running", "missing", "data missing"):
        if s in states:
            return s
    return "done"


def stored_values(cfg: DictConfig, runner, cells: list[Cell]) -> tuple[pd.DataFrame, dict[Cell, str]]:
    """Per-topic values of every finished robustness part: columns corpus, leakage, size, model, seed, part,
    kind (own, ood, query, doc), target (the ranked corpus), qid, measure, value, original (query attacks),
    applied (query attacks: the attack changed the topic), shared (OOD: the topic is also a topic of the model's
    own corpus), relevant_target (stuffing: the stuffed document is judged relevant). Document parts give TC and
    KT per topic, stuffing also ``gain`` (ranks climbed) and ``top10`` (1 if the stuffed document reaches the top
    10). Also the state of every cell lacking a part. Reads finished artifacts only."""
    measure = robustness_settings(cfg).measure
    frames, states = [], {}
    for cell in cells:
        parts = {name: runner.state(ask) for name, ask in asks(cfg, cell).items()}
        st = next((s for s in ("failed", "damaged", "stale", "running", "missing", "data missing")
                   if s in {v[0] for v in parts.values()}), "done")
        if st != "done":
            states[cell] = st
        for name, (state, path, _) in parts.items():
            if state != "done":
                continue
            pq = pd.read_parquet(path / "perquery.parquet")
            if name == "own":
                f = pq.assign(kind="own", target=cell.corpus, applied=True)
            elif name.startswith("ood-"):
                f = pq.assign(kind="ood", target=name[4:], applied=True)
            elif name.startswith("doc-"):
                if pq.empty:
                    continue
                if "gain" in pq:
                    pq = pq.assign(top10=(pq.rank_after < 10).astype(float), relevant_target=pq.relevant)
                ms = [m for m in ("TC", "KT", "gain", "top10") if m in pq]
                keep = ["qid"] + (["relevant_target"] if "relevant_target" in pq else [])
                f = pd.concat([pq[keep].assign(measure=m, value=pq[m].astype(float)) for m in ms])
                f = f.assign(kind="doc", target=cell.corpus, applied=True)
            else:
                f = pq.rename(columns={"attacked": "value"}).assign(kind="query", target=cell.corpus, measure=measure)
            frames.append(f.assign(part=name, corpus=cell.corpus, leakage=cell.leakage, size=cell.size,
                                   model=cell.model, seed=cell.seed))
    if not frames:
        return pd.DataFrame(columns=VALUE_COLUMNS), states
    out = pd.concat(frames, ignore_index=True).reindex(columns=VALUE_COLUMNS)
    out["qid"] = out.qid.astype(str)
    return out, states


VALUE_COLUMNS = ["corpus", "leakage", "size", "model", "seed", "part", "kind", "target", "qid", "measure", "value",
                 "original", "applied", "shared", "relevant_target"]


class _Stuff(Section):
    repeats: PositiveInt
    from_rank: PositiveInt


class _Noise(Section):
    rate: Annotated[float, Field(gt=0, le=1)]


class RobustnessSettings(Section):
    """``robustness``: which cells, attacks and manipulations (attack names, the measure and word lists are checked
    further by :func:`settings`)."""

    enabled: bool
    corpora: list[Name] | None
    sizes: Annotated[list[PositiveInt], Field(min_length=1)] | Literal["largest"] | None
    ood: list[Name] | None
    ood_topics: Literal["disjoint", "all"]
    measure: Name
    gmap_epsilon: Annotated[float, Field(gt=0, lt=1)]
    worst: list[Annotated[float, Field(gt=0, le=1)]]
    bootstrap: Annotated[int, Field(ge=100)]  # resamples of the topics (at least 100 for a stable interval)
    seed: Annotated[int, Field(ge=0)]
    first_stage: Literal["bm25", "pool"]
    query_attacks: list[Name] | None
    doc_manipulations: list[Name] | None
    stuff: _Stuff
    noise: _Noise
    synonyms: Name
    misspellings: Name

    def files(self):
        return [(f"robustness.{k}", Path(getattr(self, k))) for k in ("synonyms", "misspellings")
                if getattr(self, k) != "bundled"]
