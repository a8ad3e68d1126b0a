"""How much of a test set a training set already holds, three ways: query overlap (each test text's most similar
training queries, exact inner product on normalised SBERT vectors), lexical overlap (normalised duplicates and word
n-gram containment, as LLM decontamination checks), and label overlap (extrapolate-eval's rule: a test query with a
relevant document that is relevant for some training query)."""

from __future__ import annotations

import logging
import sys
import time
import unicodedata
from functools import lru_cache
from typing import Iterable, Sequence, TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from leakexp.lib.decisions import above, rounded
from leakexp.lib.dense import exact_topk

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


def nearest(train_emb: np.ndarray, test_emb: np.ndarray, k: int, shard_size: int = 1_000_000):
    """Exact top-k training neighbours (similarity, row) of every test text (leakexp.lib.dense.exact_topk, sharded)."""
    start = time.perf_counter()
    sims, ids = exact_topk(train_emb, test_emb, k, shard_size=shard_size)
    log.info("searched %d test texts against %d training queries (top-%d) in %.2fs", len(test_emb), len(train_emb),
             k, time.perf_counter() - start)
    return sims, ids


def best_per_key(keys: np.ndarray, sims: np.ndarray, rows: np.ndarray):
    """Per distinct key: the highest similarity, rounded (leakexp.lib.decisions; ties: the lowest row)."""
    order = np.lexsort((rows, -rounded(sims), keys))
    keys, sims, rows = keys[order], sims[order], rows[order]
    first = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.zeros(0, bool)
    return keys[first], sims[first], rows[first]


def train_best_match(
    train_emb: np.ndarray, test_emb: np.ndarray, sims: np.ndarray, ids: np.ndarray, threshold: float,
    *, chunk_size: int = 65536,
) -> tuple[np.ndarray, np.ndarray]:
    """For every training query above ``threshold`` for some test text: its best test text and similarity.

    Returns (similarity, test row) per training query; -inf and -1 where no test text is above the
    threshold. Exact: a test text whose k-th neighbour is still above the threshold may have more
    training queries above it than its top-k shows, so those texts are searched again from the training
    side (every training query against them, in chunks).
    """
    n = len(train_emb)
    best = np.full(n, -np.inf, dtype=np.float32)
    row = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(test_emb) == 0 or sims.size == 0:
        return best, row
    saturated = (sims.shape[1] < n) & above(sims[:, -1], threshold)
    r, c = np.nonzero(above(sims, threshold) & (ids >= 0) & ~saturated[:, None])
    keys, s, rr = best_per_key(ids[r, c], sims[r, c], r)
    best[keys], row[keys] = s, rr
    sat_rows = np.flatnonzero(saturated)
    if len(sat_rows):
        log.info("%d test texts have more than %d training queries above %.3f: searching them exhaustively",
                 len(sat_rows), sims.shape[1], threshold)
        base = np.ascontiguousarray(test_emb[sat_rows], dtype=np.float32)
        for s0 in tqdm(range(0, n, chunk_size), desc="above threshold", unit="chunk", leave=False):
            e0 = min(s0 + chunk_size, n)
            sc, ix = exact_topk(base, train_emb[s0:e0], 1)
            cand_s, cand_r = sc[:, 0], sat_rows[np.maximum(ix[:, 0], 0)]
            cur_s, cur_r = best[s0:e0], row[s0:e0]
            cand, cur = rounded(cand_s), rounded(cur_s)
            better = above(cand_s, threshold) & ((cand > cur) | ((cand == cur) & (cand_r < cur_r)))
            cur_s[better], cur_r[better] = cand_s[better], cand_r[better]
    return best, row


@lru_cache(maxsize=1)
def _strip_table() -> dict[int, None]:
    # lm-evaluation-harness deletes string.punctuation after lower-casing (lm_eval/decontamination/janitor.py
    # @4e7e0d4, lines 117 and 130-134); here every Unicode punctuation and symbol character, after NFKC.
    return {c: None for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c))[0] in "PS"}


def normalize(text: str) -> str:
    """Unicode NFKC, case-folded, punctuation and symbols deleted, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().translate(_strip_table()).split())


# NLTK's English stop list (nltk_data corpora/stopwords/english, 179 words), normalised as the texts are (the
# apostrophe deleted). A shared n-gram of stop words only ("what is the", "of the the") says nothing about
# overlap, and in short queries such n-grams would dominate the 3-gram figure.
NLTK_ENGLISH_STOPWORDS = """i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their theirs themselves what
which who whom this that that'll these those am is are was were be been being have has had having do does did
doing a an the and but if or because as until while of at by for with about against between into through during
before after above below to from up down in out on off over under again further then once here there when where
why how all any both each few more most other some such no nor not only own same so than too very s t can will
just don don't should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't
hadn hadn't hasn hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't
shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't""".split()


STOPLIST_NAME = "NLTK's English stop list (179 words)"


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    """The stop list, normalised: an n-gram of these words only is not counted as overlap."""
    return frozenset(w.replace("'", "") for w in NLTK_ENGLISH_STOPWORDS)


def word_ngrams(tokens: Sequence[str], n: int, *, skip_stopwords: bool = False) -> list[str]:
    """Word n-grams of a token list (none when it is shorter than n; lm-evaluation-harness janitor.py:42);
    ``skip_stopwords`` leaves out the n-grams made of stop words only."""
    grams = [tokens[i:i + n] for i in range(len(tokens) - n + 1)]
    if skip_stopwords:
        stop = stopwords()
        grams = [g for g in grams if not all(t in stop for t in g)]
    return [" ".join(g) for g in grams]


def lexical_overlap(
    train_texts: Iterable[str], test_texts: Sequence[str], owner: np.ndarray, n_queries: int,
    ngrams: Sequence[int] = (13, 3), *, total: int | None = None,
) -> pd.DataFrame:
    """Per test query: exact duplicate after normalisation and word n-gram containment.

    A test query (the union of its texts) is contaminated under lm-evaluation-harness's rule when any of
    its n-grams occurs in a training query (lm_eval/decontamination/decontaminate.py @4e7e0d4, lines 20-22
    and 88: 13-grams of the normalised document). Queries are short, so a smaller n is reported too, and
    ``containment`` is the share of the query's n-grams found in training. N-grams of stop words only
    (``stopwords()``) are left out on both sides. As lm-evaluation-harness does,
    the test n-grams are indexed and the training side is streamed, so memory follows the test side.
    """
    import pandas as pd

    ngrams = sorted(set(int(n) for n in ngrams), reverse=True)
    if any(n < 1 for n in ngrams):
        raise ValueError(f"n-gram sizes {ngrams}: must be >= 1")
    exact_of: dict[str, list[int]] = {}
    grams_of: dict[int, list[set[str]]] = {n: [set() for _ in range(n_queries)] for n in ngrams}
    for text, q in zip(test_texts, owner):
        norm = normalize(text)
        exact_of.setdefault(norm, []).append(int(q))
        tokens = norm.split()
        for n in ngrams:
            grams_of[n][q].update(word_ngrams(tokens, n, skip_stopwords=True))
    wanted = {n: set().union(*grams_of[n]) if n_queries else set() for n in ngrams}
    found: dict[int, set[str]] = {n: set() for n in ngrams}
    exact_train = np.full(n_queries, -1, dtype=np.int64)
    exact_of.pop("", None)
    for i, text in enumerate(tqdm(train_texts, total=total, desc="lexical overlap", unit="q", leave=False)):
        norm = normalize(text)
        for q in exact_of.get(norm, ()):
            if exact_train[q] < 0:
                exact_train[q] = i
        tokens = norm.split()
        for n in ngrams:
            if len(tokens) >= n and wanted[n]:
                w = wanted[n]
                for g in word_ngrams(tokens, n, skip_stopwords=True):
                    if g in w:
                        found[n].add(g)
    out = pd.DataFrame({"exact_duplicate": exact_train >= 0, "exact_train_row": exact_train})
    for n in ngrams:
        total_n = np.array([len(g) for g in grams_of[n]], dtype=np.int64)
        hit = np.array([len(g & found[n]) for g in grams_of[n]], dtype=np.int64)
        out[f"ngram{n}_total"] = total_n
        out[f"ngram{n}_found"] = hit
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"ngram{n}_containment"] = np.where(total_n > 0, hit / np.maximum(total_n, 1), np.nan)
        out[f"ngram{n}_any"] = hit > 0
    return out


def label_pairs(train_qrels: pd.DataFrame, test_qrels: pd.DataFrame, *, train_rel: int = 1,
                test_rel: int = 1) -> pd.DataFrame:
    """(test source, test qid, docno, train source, train qid) for every document relevant on both sides."""
    test = test_qrels[test_qrels.label >= test_rel][["source", "qid", "docno"]].drop_duplicates()
    train = train_qrels[(train_qrels.label >= train_rel) & train_qrels.docno.isin(set(test.docno))]
    train = train[["source", "qid", "docno"]].drop_duplicates()
    pairs = test.merge(train, on="docno", suffixes=("", "_train"))
    pairs = pairs.rename(columns={"source": "test_source", "qid": "test_qid", "source_train": "train_source",
                                  "qid_train": "train_qid"})
    cols = ["test_source", "test_qid", "docno", "train_source", "train_qid"]
    return pairs[cols].sort_values(cols, kind="mergesort").reset_index(drop=True)


def label_overlap(train_qrels: pd.DataFrame, test_qrels: pd.DataFrame, *, train_rel: int = 1,
                  test_rel: int = 1) -> pd.DataFrame:
    """Per test query in the test qrels: relevant documents, how many are relevant for training, verdicts.

    ``label_overlap`` counts a test query when at least one of its relevant documents (label >= test_rel)
    is relevant (label >= train_rel) for some training query. extrapolate-eval's
    ``extrapolate_eval/compute_label_overlap.py`` (@2f0127f) line 27 counts only ``len(overlap) > 1``,
    which misses every query that shares exactly one document; its verdict is kept as
    ``reference_rule`` so that published figures can be compared. As there (lines 17-19 and 49), every
    test query in the qrels counts in the denominator, also one without a relevant document.
    """
    queries = test_qrels[["source", "qid"]].drop_duplicates().reset_index(drop=True)
    rel = test_qrels[test_qrels.label >= test_rel][["source", "qid", "docno"]].drop_duplicates()
    train_pos = set(train_qrels.docno[train_qrels.label >= train_rel])
    rel = rel.assign(shared=rel.docno.isin(train_pos))
    per = rel.groupby(["source", "qid"], sort=False).agg(relevant=("docno", "size"), shared=("shared", "sum"))
    out = queries.merge(per.reset_index(), on=["source", "qid"], how="left")
    out[["relevant", "shared"]] = out[["relevant", "shared"]].fillna(0).astype(np.int64)
    out["label_overlap"] = out.shared >= 1
    out["reference_rule"] = out.shared > 1
    pairs = label_pairs(train_qrels, test_qrels, train_rel=train_rel, test_rel=test_rel)
    if len(pairs):
        ex = pairs.groupby(["test_source", "test_qid"], sort=False).agg(
            shared_docs=("docno", lambda d: " ".join(list(dict.fromkeys(d))[:3])),
            shared_train=("train_qid", lambda d: " ".join(list(dict.fromkeys(d))[:3])),
        ).reset_index().rename(columns={"test_source": "source", "test_qid": "qid"})
        out = out.merge(ex, on=["source", "qid"], how="left")
    else:
        out["shared_docs"], out["shared_train"] = "", ""
    out[["shared_docs", "shared_train"]] = out[["shared_docs", "shared_train"]].fillna("")
    return out


def label_overlap_line(table: pd.DataFrame) -> str:
    n, m = int(table.label_overlap.sum()), len(table)
    return f"label_overlap: {n} of {m} test queries ({100.0 * n / m if m else 0.0:.1f}%)"
