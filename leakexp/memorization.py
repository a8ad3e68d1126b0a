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
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from leakexp.store import atomic_write_text, config_hash

if TYPE_CHECKING:
    from leakexp.pipeline import Cell, Pipeline

log = logging.getLogger(__name__)

LEAKED = ("msm", "test")
ORIGIN = {"msm": "msm-leak", "test": "test-leak"}
VARIANTS = ("with", "without")
FILE = "memorization.parquet"
SIZE_SELECTORS = ("each", "cv", "pooled")
ROW_COLUMNS = ["corpus", "leakage", "size", "model", "seed", "variant", "topic", "query", "pair", "train_qid",
               "train_query", "source", "docno", "label", "score", "rank", "in_run", "depth"]
LEAKAGE_LABEL = {"msm": "MSM", "test": "Test"}


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
    *, always_score: bool,
) -> pd.DataFrame:
    """Score and rank of every leaked document (``leaked_documents``) in one model's re-ranked run.

    ``run``: the stored re-ranking (qid, docno, score, rank 0-based). ``queries``: topic -> the query text
    re-ranking used. ``score(queries, texts)``: the model's scores, called once with every document that is
    not in the run (``always_score``: every document, for MS MARCO / ORCAS documents). Adds query, score,
    rank (1-based), in_run and depth (the topic's run length).
    """
    run = run.assign(qid=run.qid.astype(str), docno=run.docno.astype(str))
    stored = {(q, d): (float(s), int(r)) for q, d, s, r in zip(run.qid, run.docno, run.score, run["rank"])}
    by_topic = {q: (g.score.to_numpy(np.float64), g.docno.to_numpy(str)) for q, g in run.groupby("qid", sort=False)}
    out = docs.copy()
    out["docno"] = out.docno.astype(str)
    out["query"] = [queries[t] for t in out.topic]
    keys = list(zip(out.topic, out.docno))
    in_run = np.array([not always_score and k in stored for k in keys], dtype=bool)
    need = out.loc[~in_run, ["topic", "query", "docno", "text"]].drop_duplicates(["topic", "docno"])
    scored = {}
    if len(need):
        values = score(need["query"].tolist(), need.text.tolist())
        if len(values) != len(need):
            raise ValueError(f"the scorer returned {len(values)} scores for {len(need)} documents")
        scored = dict(zip(zip(need.topic, need.docno), map(float, values)))
    empty = (np.empty(0, np.float64), np.empty(0, str))
    scores, ranks = [], []
    for k, inside in zip(keys, in_run):
        if inside:
            s, r = stored[k]
            scores.append(s)
            ranks.append(r + 1)
        else:
            s = scored[k]
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
def settings(cfg: DictConfig) -> dict:
    """The ``memorization`` block with its defaults, normalised (sizes always a list)."""
    m = OmegaConf.to_container(cfg.get("memorization") or OmegaConf.create({}), resolve=True)
    sizes = m.get("sizes", ["each", "cv"])
    sizes = [sizes] if isinstance(sizes, (str, int)) else list(sizes)
    return {"enabled": m.get("enabled", True), "sizes": sizes, "cv_measure": m.get("cv_measure", "nDCG@10")}


def validate(cfg: DictConfig) -> None:
    """Check the ``memorization`` block before any work; a bad value names the key and the fix."""
    from leakexp.config import ConfigError

    s = settings(cfg)
    if not isinstance(s["enabled"], bool):
        raise ConfigError(f"memorization.enabled={s['enabled']!r} must be true or false")
    grid_sizes = [int(x) for x in cfg.grid.sizes]
    if not s["sizes"]:
        raise ConfigError("memorization.sizes is empty; use e.g. [each, cv]")
    for v in s["sizes"]:
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise ConfigError(f"memorization.sizes has {v!r}; use each, cv, pooled or sizes of grid.sizes")
        if isinstance(v, str) and v not in SIZE_SELECTORS:
            raise ConfigError(f"memorization.sizes has {v!r}; use each, cv, pooled or sizes of grid.sizes")
        if isinstance(v, int) and v not in grid_sizes:
            raise ConfigError(f"memorization.sizes has {v}, which is not in grid.sizes {grid_sizes}")
    if s["cv_measure"] not in list(cfg.evaluate.measures):
        raise ConfigError(f"memorization.cv_measure={s['cv_measure']!r} is not one of evaluate.measures "
                          f"{list(cfg.evaluate.measures)}")


def wanted(cfg: DictConfig, cell: "Cell") -> bool:
    """Whether the grid computes the memorization stage for ``cell`` (a leaked cell, stage enabled)."""
    return cell.leakage in LEAKED and bool(settings(cfg)["enabled"])


# -- the stage ------------------------------------------------------------------------------------------
def _finished_rerank(p: "Pipeline", cell: "Cell") -> dict | None:
    config = p.rerank_config(cell)
    if config is None or not p.store.is_done(p.store.keyed("rerank", *cell.parts(), config=config), config):
        return None
    return config


def memorization_config(p: "Pipeline", cell: "Cell") -> dict | None:
    """What a cell's memorization artifact depends on; None while the with- or the without-leakage
    re-ranking is not finished. Cheap: reads markers, loads no data."""
    if cell.leakage not in LEAKED:
        raise ValueError(f"memorization needs a leaked cell (msm or test), got {cell}")
    with_rerank, without_rerank = _finished_rerank(p, cell), _finished_rerank(p, without_cell(cell))
    if with_rerank is None or without_rerank is None:
        return None
    return {
        "stage": "memorization", "leakage": cell.leakage,
        "with": config_hash(with_rerank), "without": config_hash(without_rerank),
        "query_field": str(p.cfg.rerank.query_field),
        # MSM leaks map to their topics through the verified annotations
        "leaks": config_hash(p.verify_config()) if cell.leakage == "msm" else None,
    }


def memorization_path(p: "Pipeline", cell: "Cell") -> Path | None:
    """Where the memorization artifact of ``cell`` lives under this config (None while upstream is missing)."""
    config = memorization_config(p, cell)
    return None if config is None else p.store.keyed("memorization", *cell.parts(), config=config)


def memorization_state(p: "Pipeline", cell: "Cell") -> tuple[str, Path | None, str]:
    """(state, path, detail) of the cell's memorization artifact, as ``Pipeline.cell_state`` for the others."""
    from leakexp.pipeline import artifact_state

    try:
        path = memorization_path(p, cell)
    except Exception as exc:  # e.g. annotation files not given yet
        return "missing", None, f"{type(exc).__name__}: {exc}"
    return artifact_state(p.store, path)


def _annotations(p: "Pipeline") -> pd.DataFrame:
    """The verify artifact's annotations, read directly (no need to load the training pool)."""
    path = p.verify_path()
    if not p.store.is_done(path, p.verify_config()):
        return p.annotations()
    return pd.read_parquet(path / "annotations.parquet")


def _queries(p: "Pipeline", cell: "Cell", topics: list[str], runs: list[pd.DataFrame]) -> dict[str, str]:
    """The query text re-ranking used per topic (from the runs; the collection for a topic without run)."""
    out: dict[str, str] = {}
    for run in runs:
        for q, text in zip(run.qid.astype(str), run["query"]):
            out.setdefault(q, text)
    missing = [t for t in topics if t not in out]
    if missing:
        coll = p.collection(cell.corpus).topics
        for t in missing:
            out[t] = coll[t].text(p.cfg.rerank.query_field)
    return out


def memorized(p: "Pipeline", cell: "Cell") -> Path:
    """The memorization artifact of a leaked cell, computing whatever the store lacks (sets, models, runs).

    Scores only documents outside the runs, batched, once per model; ranks in the stored runs otherwise.
    """
    from leakexp import verify as verifier

    if cell.leakage not in LEAKED:
        raise ValueError(f"memorization needs a leaked cell (msm or test), got {cell}")
    base = without_cell(cell)
    run_paths = {"with": p.reranked(cell), "without": p.reranked(base)}
    set_path = p.training_set(cell.corpus, cell.leakage, cell.size)
    config = memorization_config(p, cell)
    if config is None:
        raise RuntimeError(f"{cell}: the re-rankings were computed but are not finished in the store")
    path = p.store.keyed("memorization", *cell.parts(), config=config)
    if p.store.is_done(path, config):
        return path

    def compute(tmp: Path) -> dict:
        pairs = leaked_pairs(pd.read_parquet(set_path / "instances.parquet"), cell.leakage)
        if cell.leakage == "test":
            topics = pairs[["pair"]].assign(topic=pairs.train_qid)
        else:
            topic_ids = list(p.collection(cell.corpus).topics)
            topics = msm_topics(pairs, verifier.verified_leaks(_annotations(p), topic_ids), cell.corpus)
        docs = leaked_documents(pairs, topics)
        runs = {v: pd.read_parquet(run_paths[v] / "run.parquet") for v in VARIANTS}
        queries = _queries(p, cell, sorted(set(docs.topic)), list(runs.values()))
        batch = int(p.model_cfg(cell.model).get("train", {}).get("score_batch_size", 64))
        frames, scored = [], {}
        for variant in VARIANTS:
            def score(qs: list[str], texts: list[str], variant: str = variant) -> list[float]:
                model = p.load_model({"with": cell, "without": base}[variant])
                scored[variant] = len(texts)
                # scored as the re-ranking scored the run (same precision), so ranks can be compared
                return model.score(qs, texts, batch_size=batch, device=p.device, bf16=p.rerank_bf16())

            ranked = rank_leaked(docs, runs[variant], queries, score, always_score=cell.leakage == "msm")
            frames.append(ranked.assign(variant=variant))
        rows = pd.concat(frames, ignore_index=True).assign(
            corpus=cell.corpus, leakage=cell.leakage, size=int(cell.size), model=cell.model, seed=int(cell.seed))
        rows = rows[ROW_COLUMNS]
        rows.to_parquet(tmp / FILE, index=False)
        rel = rows[rows.label == 1]
        figures = {"rows": len(rows), "topics": int(rows.topic.nunique()), "leaked_queries": int(pairs.pair.nunique()),
                   "scored_with": scored.get("with", 0), "scored_without": scored.get("without", 0)}
        for variant in VARIANTS:
            figures[f"mean_rank_relevant_{variant}"] = round(macro_average(rel[rel.variant == variant], "rank")[0], 4)
        log.info("memorization %s: %s", cell, figures)
        return figures

    return p.store.ensure(path, config, compute)


def ready_cells(p: "Pipeline", cell: "Cell") -> list["Cell"]:
    """The leaked cells whose memorization can be computed now that ``cell`` is finished: the cell itself
    (leaked) or its MSM and test siblings (no leakage), where both re-rankings are in the store. Cheap."""
    family = [cell] if cell.leakage in LEAKED else [dataclasses.replace(cell, leakage=l) for l in LEAKED]
    return [c for c in family if wanted(p.cfg, c) and memorization_config(p, c) is not None]


def memorize_ready(p: "Pipeline", cell: "Cell") -> list[Path]:
    """After a cell's re-ranking: the memorization artifacts it completes (see ``ready_cells``).

    Whichever of a leaked cell and its no-leakage cell finishes last computes it, so grid workers never
    wait for, or train, a model of another cell (``compute_all`` does, for grids without ``none``).
    """
    return [memorized(p, c) for c in ready_cells(p, cell)]


def compute_all(p: "Pipeline", cells: list["Cell"]) -> tuple[list[Path], list[tuple["Cell", Exception]]]:
    """The memorization artifacts of every wanted cell among ``cells`` (and what they lack upstream); a
    failing cell is reported and does not stop the others."""
    from tqdm.auto import tqdm

    done, failed = [], []
    for cell in tqdm([c for c in cells if wanted(p.cfg, c)], desc="memorization", unit="cell"):
        try:
            done.append(memorized(p, cell))
        except Exception as exc:  # one failed cell must not stop the others
            log.error("memorization of %s failed: %s: %s", cell, type(exc).__name__, exc)
            failed.append((cell, exc))
    return done, failed


# -- tables ---------------------------------------------------------------------------------------------
def stored_cv_sizes(cfg: DictConfig, p: "Pipeline", cells: list["Cell"]) -> pd.DataFrame | None:
    """The cross-validation's size choices (as ``tables.write_tables`` makes them for Tables 3-5) from the
    stored evaluations of ``cells``; None when none is finished. For callers outside ``write_tables``."""
    from leakexp.stats import evaluate_corpus, seed_average
    from leakexp.tables import TABLE_MEASURES

    results, _ = p.stored_results(cells)
    if len(results) == 0:
        return None
    avg, e = seed_average(results), cfg.evaluate
    frames = [evaluate_corpus(avg, corpus, list(TABLE_MEASURES), n_folds=int(e.get("folds", 5)),
                              fold_seed=int(e.get("fold_seed", 0)), selection=e.get("cv_selection", "best"),
                              alpha=float(e.get("alpha", 0.05)))[1]
              for corpus in dict.fromkeys(cfg.grid.corpora) if corpus in set(avg.corpus)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _fmt(mean: float, std: float, digits: int, std_digits: int) -> str:
    if np.isnan(mean):
        return "–"
    return f"{mean:.{digits}f} ± " + ("–" if np.isnan(std) else f"{std:.{std_digits}f}")


def _labels():
    from leakexp.tables import CORPUS_LABEL, MODEL_LABEL

    return CORPUS_LABEL, MODEL_LABEL


def table_rows(rows: pd.DataFrame, corpora: list[str], models: list[str]) -> dict[str, pd.DataFrame]:
    """Long numeric frames of Tables 6 (rank), 7 (score) and 8 (offset increase): one row per leakage,
    model, corpus (and variant), with mean, std, topics, leaked queries and seeds."""
    out = {"table6": [], "table7": [], "table8": []}
    increase = offset_increase(rows) if len(rows) else pd.DataFrame(columns=["corpus", "leakage", "model", "topic", "increase"])
    for leakage in LEAKED:
        for model in models:
            for corpus in corpora:
                sel = rows[(rows.leakage == leakage) & (rows.model == model) & (rows.corpus == corpus)]
                if sel.empty:
                    continue
                info = {"leakage": leakage, "model": model, "corpus": corpus,
                        "sizes": ",".join(str(s) for s in sorted(sel["size"].unique())),
                        "leaked_queries": int(sel.groupby(["size", "seed"]).pair.nunique().max()),
                        "seeds": int(sel.seed.nunique())}
                rel = sel[sel.label == 1]
                for table, value in (("table6", "rank"), ("table7", "score")):
                    for variant in VARIANTS:
                        mean, std, n = macro_average(rel[rel.variant == variant], value)
                        out[table].append({**info, "variant": variant, "mean": mean, "std": std, "topics": n})
                inc = increase[(increase.leakage == leakage) & (increase.model == model) & (increase.corpus == corpus)]
                mean, std, n = macro_average(inc, "increase")
                out["table8"].append({**info, "variant": "increase", "mean": mean, "std": std, "topics": n})
    cols = ["leakage", "model", "corpus", "variant", "mean", "std", "topics", "leaked_queries", "seeds", "sizes"]
    return {k: pd.DataFrame(v, columns=cols) for k, v in out.items()}


def _display(long: pd.DataFrame, table: str, corpora: list[str], models: list[str]) -> pd.DataFrame:
    corpus_label, model_label = _labels()
    idx = long.set_index(["leakage", "model", "corpus", "variant"])
    digits = (3, 2) if table == "table8" else (2, 2)

    def cell(*key) -> str:
        if key not in idx.index:
            return "–"
        r = idx.loc[key]
        return _fmt(float(r["mean"]), float(r["std"]), *digits)

    present = [m for m in models if m in set(long.model)]
    rows = []
    if table == "table8":
        for m in present:
            row = {"Model": model_label.get(m, m)}
            for leakage in LEAKED:
                for c in corpora:
                    row[f"Δ on {LEAKAGE_LABEL[leakage]} {corpus_label.get(c, c)}"] = cell(leakage, m, c, "increase")
            rows.append(row)
    else:
        for leakage in LEAKED:
            for m in present:
                if not ((long.leakage == leakage) & (long.model == m)).any():
                    continue
                row = {"Leakage": LEAKAGE_LABEL[leakage], "Model": model_label.get(m, m)}
                for c in corpora:
                    for variant in VARIANTS:
                        row[f"{corpus_label.get(c, c)} {variant.capitalize()}"] = cell(leakage, m, c, variant)
                rows.append(row)
    return pd.DataFrame(rows)


def _latex(display: pd.DataFrame, caption: str, label: str) -> str:
    from leakexp.report import latex_escape

    def esc(v) -> str:
        return latex_escape(v).replace("±", r"$\pm$").replace("Δ", r"$\Delta$").replace("–", "--")

    lines = [r"\begin{table}", r"\centering", rf"\caption{{{esc(caption)}}}", rf"\label{{{label}}}",
             r"\begin{tabular}{" + "l" * (2 if "Leakage" in display.columns else 1)
             + "r" * (len(display.columns) - (2 if "Leakage" in display.columns else 1)) + "}",
             r"\toprule", " & ".join(esc(c) for c in display.columns) + r" \\", r"\midrule"]
    for row in display.itertuples(index=False):
        lines.append(" & ".join(esc(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _counts(long: pd.DataFrame, corpora: list[str]) -> str:
    """'toy_robust: MSM 25 topics / 60 leaked queries, Test 30 / 60; ...' (ranges where models differ)."""
    corpus_label, _ = _labels()

    def span(values) -> str:
        lo, hi = int(min(values)), int(max(values))
        return str(lo) if lo == hi else f"{lo}–{hi}"

    parts = []
    for c in corpora:
        bits = []
        for leakage in LEAKED:
            sel = long[(long.corpus == c) & (long.leakage == leakage)]
            if len(sel):
                bits.append(f"{LEAKAGE_LABEL[leakage]} {span(sel.topics)} topics / {span(sel.leaked_queries)} leaked queries")
        if bits:
            parts.append(f"{corpus_label.get(c, c)}: " + ", ".join(bits))
    return "; ".join(parts)


def _table_sets(s: dict, rows: pd.DataFrame, grid_sizes: list[int], cv_sizes: pd.DataFrame | None) -> list[tuple]:
    """(file suffix, sizes sentence, rows, selection of (corpus, leakage, size, model)) per table set."""
    sets, seen = [], set()
    present = sorted(int(x) for x in rows["size"].unique())
    for spec in s["sizes"]:
        if spec == "each" or isinstance(spec, int):
            for size in ([int(x) for x in grid_sizes] if spec == "each" else [spec]):
                if size in seen or size not in present:
                    continue
                seen.add(size)
                sets.append((f"size{size}", f"training-set size {size}", rows[rows["size"] == size],
                             lambda c, size=size: c.size == size))
        elif spec == "pooled":
            sets.append(("pooled", f"all training-set sizes pooled ({', '.join(map(str, present))}; each topic's "
                         "mean covers every size)", rows, lambda c: True))
        elif spec == "cv":
            if cv_sizes is None or len(cv_sizes) == 0:
                log.warning("memorization.sizes has cv but no cross-validation sizes are available; skipping the CV tables")
                continue
            choice = cv_choice(cv_sizes, s["cv_measure"])
            if choice.empty:
                log.warning("no cross-validation size choices for %s; skipping the CV memorization tables", s["cv_measure"])
                continue
            keys = set(zip(choice.corpus, choice.model, choice.leakage, choice["size"]))
            sel = rows[[k in keys for k in zip(rows.corpus, rows.model, rows.leakage, rows["size"])]]
            _, model_label = _labels()
            listed = "; ".join(f"{c} {model_label.get(m, m)} {LEAKAGE_LABEL[l]} {z} ({n}/{o} folds)"
                               for c, m, l, z, n, o in choice.itertuples(index=False))
            sets.append(("cv", f"the training-set size the cross-validation chose most often (over its folds) for "
                         f"{s['cv_measure']} per corpus, model and leakage type ({listed})", sel,
                         lambda c, keys=keys: (c.corpus, c.model, c.leakage, c.size) in keys))
    return sets


def write_tables(cfg: DictConfig, p: "Pipeline", out_dir: Path, cells: list["Cell"],
                 cv_sizes: pd.DataFrame | None) -> list[Path]:
    """Tables 6-8 per configured size selection and the per-instance CSV, from the stored memorization
    artifacts alone (no scoring). Returns the written files (none when no artifact is finished)."""
    from leakexp.report import markdown_table
    from leakexp.tables import incomplete_note

    s = settings(cfg)
    if not s["enabled"]:
        log.info("memorization.enabled is false: Tables 6-8 are not written")
        return []
    leaked = [c for c in cells if c.leakage in LEAKED]
    frames, states = [], {}
    for cell in leaked:
        state, path, _ = memorization_state(p, cell)
        if state == "done":
            frames.append(pd.read_parquet(path / FILE))
        else:
            states[cell] = state
    if not frames:
        log.warning("no finished memorization artifact among %d leaked cells; Tables 6-8 are not written", len(leaked))
        return []
    rows = pd.concat(frames, ignore_index=True)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out_dir / "memorization.csv", rows.sort_values(
        ["corpus", "leakage", "size", "model", "seed", "variant", "topic", "pair", "label"],
        ascending=[True] * 8 + [False], kind="mergesort").to_csv(index=False))]
    corpora = [c for c in dict.fromkeys(cfg.grid.corpora) if c in set(rows.corpus)]
    models = [m for m in dict.fromkeys(cfg.grid.models) if m in set(rows.model)]
    depth = int(cfg.rerank.depth)
    for suffix, sizes_text, sel, in_set in _table_sets(s, rows, list(cfg.grid.sizes), cv_sizes):
        long = table_rows(sel, corpora, models)
        seeds = sorted(int(x) for x in sel.seed.unique())
        note = incomplete_note({c: st for c, st in states.items() if in_set(c)})
        common = (f"data={cfg.data.name}, {sizes_text}, {len(seeds)} seed(s): {', '.join(map(str, seeds))}. "
                  f"Ranks are 1-based in each model's re-ranking of the BM25 top-{depth} for the topic's "
                  f"{cfg.rerank.query_field} query; a leaked document outside it (every MS MARCO / ORCAS document) "
                  f"gets the hypothetical rank its score earns among the re-ranked {depth} (ties by docno), so the "
                  f"maximal rank is {depth + 1}. Macro-averaged over topics (each topic's leaked queries and seeds "
                  f"averaged first; ± = standard deviation over topics): MSM over the topics with leaking queries in "
                  f"the training set, Test over all topics with test leakage. Topics / leaked queries: "
                  f"{_counts(long['table6'], corpora)}.")
        captions = {
            "table6": "Table 6. Mean rank of the (leaked) relevant training documents (± standard deviation) for "
                      "models trained with and without leakage from MS MARCO / ORCAS (MSM) or from the test data "
                      f"(Test); {common}",
            "table7": "Table 7. Mean retrieval score of the (leaked) relevant training documents (± standard "
                      "deviation; higher = more relevant; each model's own score scale) for models trained with and "
                      f"without leakage from MS MARCO / ORCAS (MSM) or the test data (Test); {common}",
            "table8": "Table 8. Macro-averaged increase of the rank offset between the leaked relevant and "
                      "non-relevant documents (rank of the non-relevant minus rank of the relevant; ± standard "
                      "deviation) for models trained on MSM leakage (Δ on MSM) or on test leakage (Δ on Test) over "
                      f"the no-leakage models; {common}",
        }
        for table, caption in captions.items():
            caption += note
            display = _display(long[table], table, corpora, models)
            stem = f"{table}-{suffix}"
            written.append(atomic_write_text(out_dir / f"{stem}.md", f"**{caption}**\n\n{markdown_table(display)}"))
            written.append(atomic_write_text(out_dir / f"{stem}.csv", long[table].to_csv(index=False)))
            written.append(atomic_write_text(out_dir / f"{stem}.tex", _latex(display, caption, f"tab:{stem}")))
    log.info("memorization tables: %d files in %s", len(written), out_dir)
    return written
