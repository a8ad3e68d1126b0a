"""Scores and ranks of leaked documents (paper, Section 4, "Memorization of Leaked Instances"; Tables 6-8), as pure
functions: the leaked pairs of a training set, the topics an MSM leak belongs to, the hypothetical rank of a document
outside the re-ranked run, the pairing of the models with and without leakage, rank offsets and macro averages over
topics, and the size the cross-validation chose."""

from __future__ import annotations

from typing import Callable, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


LEAKED = ("msm", "test")
ORIGIN = {"msm": "msm-leak", "test": "test-leak"}
VARIANTS = ("with", "without")
MSM_QUERIES = ("topic", "training")  # what an MSM-leaked document is scored with (memorization.msm_query)


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
    import pandas as pd

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
    import pandas as pd

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
    import pandas as pd

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
    import pandas as pd

    s = cv_sizes[(cv_sizes.measure == measure) & cv_sizes.leakage.isin(LEAKED)]
    rows = []
    for (corpus, model, leakage), g in s.groupby(["corpus", "model", "leakage"], sort=True):
        counts = g["size"].astype(int).value_counts()
        best = int(counts.max())
        rows.append({"corpus": corpus, "model": model, "leakage": leakage,
                     "size": int(min(counts.index[counts == best])), "folds": best, "of": int(len(g))})
    return pd.DataFrame(rows, columns=["corpus", "model", "leakage", "size", "folds", "of"])
