"""Audit any train/test pair: how much of the test set is already in the training data?

Three views of overlap, side by side, so that a user sees what the semantic match adds:

- query overlap: every test query's most similar training queries (SBERT, exact Faiss inner product on
  normalised float32 vectors, as the detection stage does) and the share of test queries with a training
  query above the threshold;
- lexical overlap: exact duplicates after normalisation and word n-gram containment, the checks LLM
  decontamination tools use (lm-evaluation-harness: a test document is contaminated when any of its
  13-grams occurs in the training data);
- label overlap (extrapolate-eval's ``compute_label_overlap.py``): test queries with a relevant document
  that is also relevant for some training query.

``split_eval`` reports per-query results on the leaked and on the other test queries, with paired t-tests
(DuReader-retrieval, Section 3.4, Table 6). ``leakexp decontaminate`` and ``leakexp resample`` (module
``leakexp.toolkit.resample``) act on what the audit finds.

Example::

    train = load_side(["msmarco-passage/train/judged"])
    test = load_side(["msmarco-passage/trec-dl-2019/judged"])
    figures = audit(train, test, SbertEmbedder(Store("store")), Path("audit-dl19"))
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import sys
import time
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Collection as CollectionT, Hashable, Iterable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from leakexp.data.files import (DataFormatError, DataUnavailable, read_qrels, read_trec_topics, read_tsv_pairs,
                                read_variants)
from leakexp.data.irds import _guard, load_dataset
from leakexp.lib.dense import embedded, encode, exact_topk, sbert_slug
from leakexp.lib.measures import average, mean_by, mfr_caption, per_query
from leakexp.lib.report import markdown_table, save_figure, write_table
from leakexp.lib.stats import bonferroni, paired_t
from leakexp.lib.trec import read_run
from leakexp.runner.store import Store, atomic_write_json, atomic_write_text

if TYPE_CHECKING:
    from leakexp.data.types import Collection, TrainPool

log = logging.getLogger(__name__)

FIELDS = ("title", "description", "variant")
TEXT_COLUMNS = ["source", "qid", "field", "variant_index", "text"]
QREL_COLUMNS = ["source", "qid", "docno", "label"]
LEAK_RULES = ("semantic", "exact", "label", "any")
FILE_SUFFIXES = {".gz", ".tsv", ".txt", ".trec", ".xml", ".qrels", ".topics", ".jsonl", ".csv"}

# Defaults of the pair commands on real data, from the papers whose methods they offer. The demo's values
# (conf/experiment/demo.yaml: the bundled all-MiniLM at 0.8, tuned to the toy lexicon) apply only to the demo
# or when asked for (experiment=demo, detect.*=..., --model/--k/--threshold).
# - SBERT model, threshold and k: Fröbe et al. 2022, Sec. 3: paraphrase-MiniLM-L6-v2, the 100 exact nearest
#   neighbours, and 0.91, the lowest threshold with precision 0.9 on 100 judged pairs. DuReader-retrieval (Qiu et
#   al. 2022, Sec. 2.3) removes training queries above 0.5 of its own query-matching model, a score on another
#   scale, so its 0.5 does not carry over to SBERT cosine; extrapolate-eval (Zhan et al. 2022) uses cosine of a
#   dense retriever's query encoder without publishing a threshold.
# - ReSTTest: K = 5 buckets (Zhan et al. 2022; extrapolate-eval's README: "In the paper, K is set to 5"). ReSTrain
#   sizes: 14k, 45k, 200k for MS MARCO (extrapolate-eval's released files); a size there names a released qrels
#   file, hence --size-unit.
# - Label overlap: at least one shared relevant document (extrapolate-eval's compute_label_overlap.py, rule fixed).
#   The model is pinned to a commit (as detect.sbert in conf/experiment/paper.yaml: the embeddings' keys name it).
PAPER_DEFAULTS = {"sbert": "sentence-transformers/paraphrase-MiniLM-L6-v2@c9a2bfebc254878aee8c3aca9e6844d5bbb102d1",
                  "threshold": 0.91, "k": 100}
PAPER_DEFAULTS_SOURCE = ("Fröbe et al. 2022, Sec. 3: paraphrase-MiniLM-L6-v2, exact top-100, threshold 0.91 "
                        "(precision 0.9 on 100 judged pairs)")
RESTTEST_BUCKETS = 5  # Zhan et al. 2022 (extrapolate-eval)


# -- the two sides ------------------------------------------------------------------------------------
@dataclass
class QuerySide:
    """One side of an audit: the texts to compare (one row per query field) and the qrels, by source.

    A query is identified by (source, qid): two sources may use the same qid. A plain query (TSV line,
    ir_datasets query with only a text) has its text as ``title``, as leakexp's ``Topic`` does.
    """

    texts: pd.DataFrame  # source, qid, field, variant_index, text
    qrels: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=QREL_COLUMNS))
    sources: list[str] = field(default_factory=list)

    @cached_property
    def queries(self) -> pd.DataFrame:
        """One row per query (source, qid, text = its first compared text), in input order."""
        return self.texts.drop_duplicates(["source", "qid"])[["source", "qid", "text"]].reset_index(drop=True)

    @cached_property
    def owner(self) -> np.ndarray:
        """For every text row, the index of its query in ``queries``."""
        index = pd.MultiIndex.from_frame(self.queries[["source", "qid"]])
        return index.get_indexer(pd.MultiIndex.from_frame(self.texts[["source", "qid"]])).astype(np.int64)


def _side(texts: list[tuple], qrels: list[pd.DataFrame], sources: list[str]) -> QuerySide:
    t = pd.DataFrame(texts, columns=TEXT_COLUMNS)
    t["variant_index"] = t["variant_index"].astype(np.int64)
    q = pd.concat(qrels, ignore_index=True) if qrels else pd.DataFrame(columns=QREL_COLUMNS)
    q = q[QREL_COLUMNS].astype({"source": str, "qid": str, "docno": str}).reset_index(drop=True)
    q["label"] = q["label"].astype(np.int64)
    return QuerySide(t, q, sources)


def _topic_rows(source: str, qid: str, title: str, description: str, variants: Sequence[str],
                fields: Sequence[str]) -> list[tuple]:
    rows = []
    for f in fields:
        if f == "title" and title:
            rows.append((source, qid, "title", -1, title))
        elif f == "description" and description:
            rows.append((source, qid, "description", -1, description))
        elif f == "variant":
            rows.extend((source, qid, "variant", i, v) for i, v in enumerate(variants) if v)
    return rows


def _check_fields(fields: Sequence[str]) -> list[str]:
    bad = [f for f in fields if f not in FIELDS]
    if bad or not fields:
        raise ValueError(f"fields {list(fields)!r}: use one or more of {', '.join(FIELDS)} (a plain query's text is its title)")
    return list(dict.fromkeys(fields))


def source_name(spec: str) -> tuple[str, str]:
    """``NAME=TARGET`` or ``TARGET`` -> (name, target); a file's name is its stem without query suffixes."""
    name, sep, target = spec.partition("=")
    if sep and name and "/" not in name and not Path(spec).exists():
        return name, target
    target = spec
    p = Path(target)
    if p.exists():
        stem = p.name
        for suffix in (".gz", ".tsv", ".txt", ".trec", ".xml", ".run", ".res", ".queries", ".topics", ".qrels", ".qrel"):
            stem = stem.removesuffix(suffix)
        return stem or p.name, target
    return target, target


def _read_query_file(path: Path, source: str, fields: Sequence[str], variants: Mapping[str, list[str]]) -> list[tuple]:
    with (gzip.open(path, "rt", encoding="utf-8", errors="replace") if path.suffix == ".gz"
          else open(path, encoding="utf-8", errors="replace")) as f:
        head = f.read(4096)
    rows = []
    if "<top>" in head.lower():
        for t in read_trec_topics(path):
            rows += _topic_rows(source, t.qid, t.title, t.description, variants.get(t.qid, ()), fields)
    else:
        for qid, text in read_tsv_pairs(path, "queries"):
            rows += _topic_rows(source, qid, text, "", variants.get(qid, ()), fields)
    return rows


def _irds_source(dataset_id: str, source: str, fields: Sequence[str], variants: Mapping[str, list[str]]):
    ds = load_dataset(dataset_id)
    if not ds.has_queries():
        raise DataUnavailable(f"ir_datasets '{dataset_id}' has no queries; give a dataset id with queries "
                              "(e.g. msmarco-passage/train) or a local queries file")

    def read_queries() -> list[tuple]:
        rows = []
        for q in ds.queries_iter():
            title = getattr(q, "title", None) or getattr(q, "text", "") or ""
            rows += _topic_rows(source, str(q.query_id), " ".join(title.split()),
                                " ".join((getattr(q, "description", "") or "").split()),
                                variants.get(str(q.query_id), ()), fields)
        return rows

    rows = _guard(dataset_id, "queries", read_queries)
    qrels = pd.DataFrame(columns=QREL_COLUMNS)
    if ds.has_qrels():
        qrels = pd.DataFrame(
            _guard(dataset_id, "qrels", lambda: [(source, str(x.query_id), str(x.doc_id), int(x.relevance))
                                                  for x in ds.qrels_iter()]),
            columns=QREL_COLUMNS)
    return rows, qrels


def read_qrels_file(path: str | Path, option: str) -> pd.DataFrame:
    """TREC qrels of a command-line option; an empty file is an error that names the option and the file."""
    q = read_qrels(Path(path))
    if q.empty:
        raise DataFormatError(f"{option} {path}: no qrels lines (an empty file?); give TREC qrels "
                              "'qid 0 docno label', one judgment per line")
    return q


def load_side(
    specs: Sequence[str] = (),
    qrels: Sequence[str] = (),
    *,
    fields: Sequence[str] = ("title",),
    variants: Sequence[str] = (),
    role: str = "test",
) -> QuerySide:
    """A side from ir_datasets ids and/or local files.

    ``specs``: ir_datasets ids (queries and qrels) or query files (TSV ``qid<TAB>text`` or TREC topics),
    each optionally ``NAME=...`` to name the source. ``qrels``: TREC qrels files, one per local query file
    (paired in order) or one for all of them; with no ``specs`` at all they form a qrels-only side (label
    overlap alone). ``variants``: TSV ``qid<TAB>variant`` files (the ``variant`` field).
    """
    fields = _check_fields(fields)
    variant_map: dict[str, list[str]] = {}
    for v in variants:
        for qid, texts in read_variants(Path(v)).items():
            variant_map.setdefault(qid, []).extend(texts)
    texts: list[tuple] = []
    qrel_frames: list[pd.DataFrame] = []
    sources: list[str] = []
    local: list[str] = []
    for spec in specs:
        name, target = source_name(spec)
        if name in sources:
            raise ValueError(f"--{role}: two sources are named {name!r}; name them NAME=PATH")
        sources.append(name)
        if Path(target).exists():
            texts += _read_query_file(Path(target), name, fields, variant_map)
            local.append(name)
        elif Path(target).suffix in FILE_SUFFIXES or target.startswith(("/", ".", "~")):
            raise FileNotFoundError(f"--{role} {target}: no such file")
        else:
            rows, q = _irds_source(target, name, fields, variant_map)
            texts += rows
            qrel_frames.append(q)
    if not specs:  # qrels-only: one source per qrels file
        for path in qrels:
            name, target = source_name(path)
            q = read_qrels_file(target, f"--{role}-qrels")
            q.insert(0, "source", name)
            qrel_frames.append(q)
            sources.append(name)
        return _side([], qrel_frames, sources)
    if qrels and not local:
        raise ValueError(f"--{role}-qrels go with local query files; an ir_datasets id brings its own qrels")
    if qrels and len(qrels) not in (1, len(local)):
        raise ValueError(f"--{role}-qrels: give one qrels file per local query file ({len(local)}) or one for all; "
                         f"got {len(qrels)}")
    if qrels:
        frame = pd.DataFrame(texts, columns=TEXT_COLUMNS)
        for i, name in enumerate(local):
            q = read_qrels_file(qrels[0 if len(qrels) == 1 else i], f"--{role}-qrels")
            if len(qrels) == 1 and len(local) > 1:  # a shared file: each source takes the qids it has
                q = q[q.qid.isin(set(frame.qid[frame.source == name]))]
            q.insert(0, "source", name)
            qrel_frames.append(q)
    side = _side(texts, qrel_frames, sources)
    dup = side.texts[side.texts.duplicated(["source", "qid", "field", "variant_index"])]
    if len(dup):
        raise DataFormatError(f"--{role} {dup.iloc[0].source}: query id {dup.iloc[0].qid!r} appears twice; "
                              "query ids must be unique within a source")
    if side.texts.empty:
        raise ValueError(f"--{role}: no query text in fields {fields} ({', '.join(specs)}); check --fields")
    return side


def side_from_pool(pool: "TrainPool") -> QuerySide:
    """The training side of a pipeline's pool (every source's queries; relevant docs have label 1)."""
    q = pool.queries
    texts = list(zip(q.source, q.qid.astype(str), ["title"] * len(q), [-1] * len(q), q.text))
    rel = pool.qrels.astype({"qid": str})[["source", "qid", "docno"]].copy()  # keyed by (source, qid)
    rel["label"] = 1
    return _side(texts, [rel], list(dict.fromkeys(q.source)))


def side_from_collections(collections: Iterable["Collection"], fields: Sequence[str] = ("title",)) -> QuerySide:
    """The test side of pipeline collections: one source per collection, topics in the given fields."""
    fields = _check_fields(fields)
    texts, qrels, sources = [], [], []
    for c in collections:
        sources.append(c.name)
        for t in c.topics.values():
            texts += _topic_rows(c.name, t.qid, t.title, t.description, t.variants, fields)
        q = c.qrels[["qid", "docno", "label"]].copy()
        q.insert(0, "source", c.name)
        qrels.append(q)
    return _side(texts, qrels, sources)


# -- embeddings -----------------------------------------------------------------------------------------
class Embedder(Protocol):
    """Normalised float32 embeddings of ``texts``; ``name`` labels the cache entry (e.g. train, test)."""

    def __call__(self, texts: list[str], name: str) -> np.ndarray: ...


def texts_digest(texts: Sequence[str]) -> str:
    """Content hash of a text list (order matters), for cache keys."""
    h = hashlib.sha256(str(len(texts)).encode())
    if len(texts):
        h.update(pd.util.hash_pandas_object(pd.Series(list(texts), dtype=object), index=False).values.tobytes())
    return h.hexdigest()[:16]


class SbertEmbedder:
    """SBERT embeddings cached in the store as a chunked memmap that resumes after a kill (as detection)."""

    def __init__(self, store: Store | None, sbert: str = "bundled", *, batch_size: int = 256, chunk_size: int = 65536):
        self.store, self.sbert, self.batch_size, self.chunk_size = store, sbert, batch_size, chunk_size
        self._model = None

    @property
    def model(self):
        if self._model is None:
            from leakexp.lib.dense import load_sbert

            self._model = load_sbert(self.sbert)
        return self._model

    def __call__(self, texts: list[str], name: str) -> np.ndarray:
        if self.store is None:
            return encode(self.model, list(texts), self.batch_size)
        digest = texts_digest(texts)
        path = self.store.path("audit", "embed", sbert_slug(self.sbert), f"{name}-{digest[:12]}")
        config = {"stage": "audit-embed", "sbert": self.sbert, "texts": digest, "n": len(texts)}
        return embedded(self.store, path, config, list(texts), lambda: self.model, batch_size=self.batch_size,
                        chunk_size=self.chunk_size, desc=f"embed {name}")


# -- query overlap (semantic) ------------------------------------------------------------------------------
def nearest(train_emb: np.ndarray, test_emb: np.ndarray, k: int, shard_size: int = 1_000_000):
    """Exact top-k training neighbours (similarity, row) of every test text (leakexp.lib.dense.exact_topk, sharded)."""
    start = time.perf_counter()
    sims, ids = exact_topk(train_emb, test_emb, k, shard_size=shard_size)
    log.info("searched %d test texts against %d training queries (top-%d) in %.2fs", len(test_emb), len(train_emb),
             k, time.perf_counter() - start)
    return sims, ids


def _best_per_key(keys: np.ndarray, sims: np.ndarray, rows: np.ndarray):
    """Per distinct key: the highest similarity (ties: the lowest row)."""
    order = np.lexsort((rows, -sims, keys))
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
    saturated = (sims.shape[1] < n) & (sims[:, -1] > threshold)
    r, c = np.nonzero((sims > threshold) & (ids >= 0) & ~saturated[:, None])
    keys, s, rr = _best_per_key(ids[r, c], sims[r, c], r)
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
            better = (cand_s > threshold) & ((cand_s > cur_s) | ((cand_s == cur_s) & (cand_r < cur_r)))
            cur_s[better], cur_r[better] = cand_s[better], cand_r[better]
    return best, row


# -- lexical overlap ---------------------------------------------------------------------------------------
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


# -- label overlap -----------------------------------------------------------------------------------------
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


# -- the audit --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditOptions:
    """What the audit compares and how. Defaults: the paper's detection (k=100, threshold 0.91)."""

    k: int = 100
    threshold: float = 0.91
    ngrams: tuple[int, ...] = (13, 3)
    train_rel: int = 1
    test_rel: int = 1
    examples: int = 20
    shard_size: int = 1_000_000  # as detection: one shard of 1M x 384 float32 = 1.5 GB in memory at a time


def _pct(n: int, m: int) -> float:
    return 100.0 * n / m if m else 0.0


def query_table(train: QuerySide, test: QuerySide, sims: np.ndarray, ids: np.ndarray, threshold: float) -> pd.DataFrame:
    """Per test query: its best training match over its texts and how many top-k neighbours are above."""
    q = test.queries.copy()
    owner = test.owner
    nq = len(q)
    top_s = sims[:, 0] if sims.shape[1] else np.full(len(owner), -np.inf, np.float32)
    top_i = ids[:, 0] if ids.shape[1] else np.full(len(owner), -1, np.int64)
    keys, s, rows = _best_per_key(owner, top_s, np.arange(len(owner)))
    best = np.full(nq, np.nan)
    best_row = np.full(nq, -1, dtype=np.int64)
    best[keys], best_row[keys] = s, rows
    best[~np.isfinite(best)] = np.nan
    tr = train.texts
    has = best_row >= 0
    train_row = np.where(has, top_i[np.maximum(best_row, 0)], -1)
    has &= train_row >= 0
    q["best_similarity"] = best
    q["best_field"] = np.where(has, test.texts.field.to_numpy()[np.maximum(best_row, 0)], "")
    q["best_test_text"] = np.where(has, test.texts.text.to_numpy()[np.maximum(best_row, 0)], "")
    q["train_source"] = np.where(has, tr.source.to_numpy()[np.maximum(train_row, 0)], "")
    q["train_qid"] = np.where(has, tr.qid.to_numpy()[np.maximum(train_row, 0)], "")
    q["train_text"] = np.where(has, tr.text.to_numpy()[np.maximum(train_row, 0)], "")
    r, c = np.nonzero((sims > threshold) & (ids >= 0))
    above = pd.DataFrame({"q": owner[r], "t": ids[r, c]}).drop_duplicates().groupby("q").size()
    q["above_in_top_k"] = above.reindex(range(nq), fill_value=0).to_numpy().astype(np.int64)
    q["leaked"] = np.nan_to_num(best, nan=-np.inf) > threshold
    return q


def audit(train: QuerySide, test: QuerySide, embed: Embedder, out_dir: Path,
          options: AuditOptions = AuditOptions()) -> dict:
    """Query, lexical and label overlap of ``test`` against ``train``; writes the report into ``out_dir``.

    Returns the summary figures (also in ``out_dir/audit.json``). With no texts on either side
    (qrels-only sides) only the label overlap is computed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    o = options
    labels = None
    if len(train.qrels) and len(test.qrels):
        labels = label_overlap(train.qrels, test.qrels, train_rel=o.train_rel, test_rel=o.test_rel)
    figures: dict = {"options": {"k": o.k, "threshold": o.threshold, "ngrams": list(o.ngrams),
                                 "ngram_stopwords": f"{STOPLIST_NAME}: n-grams of stop words only do not count",
                                 "train_rel": o.train_rel, "test_rel": o.test_rel},
                     "train_sources": train.sources, "test_sources": test.sources}
    if labels is not None:
        figures.update(label_queries=len(labels), label_overlap=int(labels.label_overlap.sum()),
                       label_overlap_reference_rule=int(labels.reference_rule.sum()))
    if train.texts.empty or test.texts.empty:
        if labels is None:
            raise ValueError("nothing to audit: give queries (--train/--test) or both qrels (--train-qrels/--test-qrels)")
        per = labels
        figures["mode"] = "qrels-only"
        _write_report(out_dir, figures, per, o)
        return figures

    figures["mode"] = "queries"
    train_emb = embed(train.texts.text.tolist(), "train")
    test_emb = embed(test.texts.text.tolist(), "test")
    sims, ids = nearest(train_emb, test_emb, o.k, o.shard_size)
    per = query_table(train, test, sims, ids, o.threshold)
    lex = lexical_overlap(train.texts.text, test.texts.text.tolist(), test.owner, len(per), o.ngrams,
                          total=len(train.texts))
    tr = train.texts
    ex_row = lex.pop("exact_train_row").to_numpy()
    per["exact_duplicate"] = lex.pop("exact_duplicate").to_numpy()
    per["exact_train_qid"] = np.where(ex_row >= 0, tr.qid.to_numpy()[np.maximum(ex_row, 0)], "")
    for c in lex.columns:
        per[c] = lex[c].to_numpy()
    if labels is not None:
        per = per.merge(labels.assign(judged=True), on=["source", "qid"], how="left")
        for c in ("judged", "label_overlap", "reference_rule"):
            per[c] = per[c].astype("boolean").fillna(False).astype(bool)
        per[["relevant", "shared"]] = per[["relevant", "shared"]].fillna(0).astype(np.int64)
        per[["shared_docs", "shared_train"]] = per[["shared_docs", "shared_train"]].fillna("")
    nq = len(per)
    lexical_any = per[[f"ngram{n}_any" for n in sorted(set(o.ngrams))]].any(axis=1) | per.exact_duplicate
    figures.update(
        train_queries=len(train.queries), test_queries=nq, test_texts=len(test.texts),
        query_overlap=int(per.leaked.sum()), exact_duplicates=int(per.exact_duplicate.sum()),
        semantic_not_exact=int((per.leaked & ~per.exact_duplicate).sum()),
        semantic_not_lexical=int((per.leaked & ~lexical_any).sum()),
        best_similarity_mean=float(np.nanmean(per.best_similarity)) if nq else float("nan"),
    )
    for n in sorted(set(o.ngrams), reverse=True):
        figures[f"ngram{n}_any"] = int(per[f"ngram{n}_any"].sum())
        figures[f"ngram{n}_contained"] = int((per[f"ngram{n}_containment"] == 1.0).sum())
    neighbours = _neighbour_frame(train, test, sims, ids)
    neighbours.to_parquet(out_dir / ".neighbours.parquet.tmp", index=False)
    (out_dir / ".neighbours.parquet.tmp").replace(out_dir / "neighbours.parquet")
    plot_similarity(per.best_similarity.to_numpy(), o.threshold, out_dir / "similarity.png")
    _write_report(out_dir, figures, per, o)
    return figures


def _neighbour_frame(train: QuerySide, test: QuerySide, sims: np.ndarray, ids: np.ndarray) -> pd.DataFrame:
    k = sims.shape[1]
    rows = np.repeat(np.arange(len(sims)), k)
    flat_i, flat_s = ids.ravel(), sims.ravel()
    keep = flat_i >= 0
    t = test.texts.iloc[rows[keep]].reset_index(drop=True)
    hit = train.texts.iloc[flat_i[keep]].reset_index(drop=True)
    return pd.DataFrame({
        "test_source": t.source, "test_qid": t.qid, "field": t.field, "variant_index": t.variant_index,
        "rank": np.tile(np.arange(1, k + 1), len(sims))[keep], "train_source": hit.source, "train_qid": hit.qid,
        "train_text": hit.text, "similarity": flat_s[keep],
    })


def summary_table(figures: dict) -> pd.DataFrame:
    """The audit's headline figures: overlap, out of how many queries, and the percentage."""
    rows = []
    t = figures["options"]["threshold"]
    if figures.get("mode") == "queries":
        m = figures["test_queries"]
        rows += [
            ("query overlap: best similarity > %g" % t, figures["query_overlap"], m),
            ("exact duplicate after normalisation", figures["exact_duplicates"], m),
        ]
        for key in sorted((k for k in figures if k.startswith("ngram") and k.endswith("_any")),
                          key=lambda k: -int(k[5:-4])):
            n = int(key[5:-4])
            rows.append((f"shares a word {n}-gram (lm-evaluation-harness rule; not of stop words only)", figures[key], m))
            rows.append((f"every word {n}-gram in training", figures[f"ngram{n}_contained"], m))
        rows += [
            ("query overlap, not an exact duplicate", figures["semantic_not_exact"], m),
            ("query overlap, no lexical match at all", figures["semantic_not_lexical"], m),
        ]
    if "label_overlap" in figures:
        m = figures["label_queries"]
        rows.append(("label overlap: >= 1 shared relevant document", figures["label_overlap"], m))
        rows.append(("label overlap, reference script's > 1 rule", figures["label_overlap_reference_rule"], m))
    return pd.DataFrame([{"overlap": name, "test queries": int(n), "of": int(m), "%": round(_pct(n, m), 1)}
                         for name, n, m in rows])


def format_summary(figures: dict) -> str:
    """``name: value`` lines for the terminal, with the issue's ``label_overlap: N of M ...`` line."""
    lines = []
    if figures.get("mode") == "queries":
        m = figures["test_queries"]
        lines.append(f"query_overlap: {figures['query_overlap']} of {m} test queries "
                     f"({_pct(figures['query_overlap'], m):.1f}%) above {figures['options']['threshold']:g}")
        lines.append(f"exact_duplicates: {figures['exact_duplicates']} of {m} test queries "
                     f"({_pct(figures['exact_duplicates'], m):.1f}%)")
        for key in sorted((k for k in figures if k.startswith("ngram") and k.endswith("_any")), key=lambda k: -int(k[5:-4])):
            lines.append(f"{key[:-4]}_overlap: {figures[key]} of {m} test queries ({_pct(figures[key], m):.1f}%)")
    if "label_overlap" in figures:
        m = figures["label_queries"]
        n = figures["label_overlap"]
        lines.append(f"label_overlap: {n} of {m} test queries ({_pct(n, m):.1f}%)")
        r = figures["label_overlap_reference_rule"]
        lines.append(f"label_overlap_reference_rule: {r} of {m} test queries ({_pct(r, m):.1f}%)")
    return "\n".join(lines)


def plot_similarity(best: np.ndarray, threshold: float, path: Path) -> Path:
    """Histogram of every test query's best similarity to a training query, with the threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = best[np.isfinite(best)]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    lo = min(0.0, float(values.min())) if len(values) else 0.0
    ax.hist(values, bins=50, range=(lo, 1.0), color="#4477aa")
    ax.axvline(threshold, color="black", lw=0.8, ls="--", label=f"threshold {threshold:g}")
    ax.set_xlabel("best similarity to a training query")
    ax.set_ylabel("test queries")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def _write_report(out_dir: Path, figures: dict, per: pd.DataFrame, o: AuditOptions) -> None:
    summary = summary_table(figures)
    write_table(summary, out_dir, "summary", "Train-test overlap of the audited pair.")
    write_table(per, out_dir, "per_query", "Per test query: best training match, lexical and label overlap.")
    parts = [f"# Train-test audit\n\ntraining sources: {', '.join(figures['train_sources']) or '-'}  \n"
             f"test sources: {', '.join(figures['test_sources']) or '-'}  \n"]
    opt = figures["options"]
    if figures["mode"] == "queries":
        parts.append(f"{figures['train_queries']} training queries, {figures['test_queries']} test queries "
                     f"({figures['test_texts']} texts); exact top-{opt['k']} neighbours, threshold "
                     f"{opt['threshold']:g}. Word n-grams: n = {', '.join(map(str, sorted(set(opt['ngrams']), reverse=True)))}"
                     f" after normalisation; {STOPLIST_NAME}: n-grams of stop words only do not count.\n")
    parts.append("\n## Overlap\n\n" + markdown_table(summary, floatfmt="{:.1f}"))
    if "label_overlap" in figures:
        parts.append(f"\nLabel overlap counts a test query when at least one of its relevant documents (label >= "
                     f"{opt['test_rel']}) is relevant (label >= {opt['train_rel']}) for a training query. "
                     "extrapolate-eval's compute_label_overlap.py counts only queries sharing more than one "
                     "document (`len(overlap) > 1`, line 27), which undercounts; its figure is shown for comparison.\n")
    if figures["mode"] == "queries":
        parts.append("\n![best similarity per test query](similarity.png)\n")
        worst = per.sort_values(["best_similarity", "source", "qid"], ascending=[False, True, True],
                                kind="mergesort", na_position="last").head(o.examples)
        examples = worst[["source", "qid", "best_field", "best_test_text", "train_source", "train_qid",
                          "train_text", "best_similarity", "exact_duplicate"]].reset_index(drop=True)
        write_table(examples, out_dir, "examples", "The test queries most similar to a training query.")
        parts.append(f"\n## The {len(examples)} most similar test queries\n\n" + markdown_table(examples))
    brief = [c for c in ("source", "qid", "text", "best_similarity", "train_qid", "train_text", "leaked",
                         "exact_duplicate", *[f"ngram{n}_containment" for n in sorted(set(o.ngrams), reverse=True)],
                         "relevant", "shared", "label_overlap") if c in per.columns]
    shown = per[brief].head(50)
    parts.append(f"\n## Per test query ({'first 50 of ' if len(per) > 50 else ''}{len(per)}; all in per_query.csv)\n\n"
                 + markdown_table(shown))
    atomic_write_text(out_dir / "report.md", "".join(parts))
    atomic_write_json(out_dir / "audit.json", figures)


def run_audit(
    *, train: Sequence[str] = (), test: Sequence[str] = (), train_qrels: Sequence[str] = (),
    test_qrels: Sequence[str] = (), fields: Sequence[str] = ("title",), test_variants: Sequence[str] = (),
    out: Path, store: Path | None, sbert: str = "bundled", batch_size: int = 256,
    options: AuditOptions = AuditOptions(),
) -> dict:
    """``leakexp audit``: load both sides from ids or files, audit them, write the report into ``out``."""
    if bool(train) != bool(test):
        raise ValueError("give queries for both sides (--train and --test), or neither for a qrels-only audit")
    if not train and not (train_qrels and test_qrels):
        raise ValueError("a qrels-only audit needs both --train-qrels and --test-qrels")
    tr = load_side(train, train_qrels, fields=["title"], role="train")
    te = load_side(test, test_qrels, fields=fields, variants=test_variants, role="test")
    embed = SbertEmbedder(Store(store) if store else None, sbert, batch_size=batch_size)
    return audit(tr, te, embed, Path(out), options)


# -- leaked vs other topics ------------------------------------------------------------------------------
def split_eval(
    perquery: pd.DataFrame,
    leaked_qids: CollectionT[str] | Mapping[Hashable, CollectionT[str]],
    *,
    systems: Sequence[str] | None = None,
    by: Sequence[str] = (),
    baseline: Mapping[str, object] | None = None,
    leaked_key: str | None = None,
    alpha: float = 0.05,
    mfr: str = "reciprocal_of_mrr",
) -> pd.DataFrame:
    """Every system on the leaked topics, the other topics and all topics, with paired t-tests.

    ``perquery`` has columns qid, measure, value and the columns that name a system (``systems``; default:
    all others), e.g. model and leakage; repeated rows (seeds) are averaged. Within each family (``by``,
    e.g. corpus and model) every system is compared with the family's ``baseline`` (a column -> value
    mapping, e.g. ``{"leakage": "none"}``; default: its first system) by a paired t-test on the topics of
    the group, Bonferroni-corrected over the family's other systems per measure and group, as Tables 3-5
    and pt.Experiment do. ``leaked``: the leaked qids, or a mapping from a value of ``leaked_key`` (e.g. a
    corpus) to its leaked qids. DuReader-retrieval reports its re-rankers this way (Table 6). MFR's first ranks
    are averaged and tested as ``mfr`` says (``evaluate.mfr``; ``leakexp.lib.measures.average``); its delta is
    the difference of the reported means.
    """
    df = perquery.copy()
    df["qid"] = df["qid"].astype(str)
    systems = list(systems) if systems is not None else [c for c in df.columns if c not in ("qid", "measure", "value")]
    missing = [c for c in [*systems, *by] if c not in df.columns] + ([leaked_key] if leaked_key and leaked_key not in df.columns else [])
    if missing:
        raise ValueError(f"split_eval: per-query results have no column {missing[0]!r} (columns: {list(df.columns)})")
    if not set(by) <= set(systems):
        raise ValueError(f"split_eval: by={list(by)} must be among the system columns {systems}")
    if leaked_key:
        sets = {key: {str(q) for q in qids} for key, qids in dict(leaked_qids).items()}
        df["group"] = [("leaked" if q in sets.get(key, ()) else "other") for q, key in zip(df.qid, df[leaked_key])]
    else:
        sets = {str(q) for q in leaked_qids}
        df["group"] = np.where(df.qid.isin(sets), "leaked", "other")
    keys = [*systems, "measure", "qid", "group"]
    df = mean_by(df, keys, mfr)
    rest = [c for c in systems if c not in by]
    rows = []
    families = df.groupby(list(by), sort=False) if by else [((), df)]
    for fam_key, fam in families:
        fam_key = fam_key if isinstance(fam_key, tuple) else (fam_key,)
        names = list(dict.fromkeys(map(tuple, fam[rest].itertuples(index=False)))) if rest else [()]
        base = names[0]
        if baseline:
            match = [n for n in names if all(dict(zip(rest, n)).get(k, dict(zip(by, fam_key)).get(k)) == v
                                              for k, v in baseline.items())]
            if not match:
                raise ValueError(f"split_eval: no system matches baseline {dict(baseline)} in {dict(zip(by, fam_key))}")
            base = match[0]
        for measure in dict.fromkeys(fam.measure):
            m = fam[fam.measure == measure]
            for group in ("leaked", "other", "all"):
                g = m if group == "all" else m[m.group == group]
                vals = {}
                for n in names:
                    sel = g
                    for c, v in zip(rest, n):
                        sel = sel[sel[c] == v]
                    vals[n] = sel.set_index("qid").value
                others = [n for n in names if n != base]
                # fewer than two paired queries: no test (NaN), not the p = 1.0 paired_t returns
                tests = [paired_t(vals[n], vals[base], measure, mfr) for n in others]
                raw = [p if n_pairs >= 2 else float("nan") for p, n_pairs in tests]
                tested = [i for i, p in enumerate(raw) if not np.isnan(p)]
                fixed = bonferroni([raw[i] for i in tested])
                corrected = {n: float("nan") for n in others} | {others[i]: p for i, p in zip(tested, fixed)}
                raw = dict(zip(others, raw))
                for n in names:
                    v = vals[n]
                    row = dict(zip(by, fam_key)) | dict(zip(rest, n))
                    shared = v.dropna().index.intersection(vals[base].dropna().index)
                    row.update({
                        "measure": measure, "group": group, "queries": int(v.notna().sum()),
                        "mean": average(v, measure, mfr),
                        "delta": (average(v[shared], measure, mfr) - average(vals[base][shared], measure, mfr)
                                  if n != base and len(shared) else float("nan")),
                        "p": raw.get(n, float("nan")), "p_bonferroni": corrected.get(n, float("nan")),
                        "significant": bool(corrected.get(n, float("nan")) < alpha),
                    })
                    rows.append(row)
    cols = [*by, *rest, "measure", "group", "queries", "mean", "delta", "p", "p_bonferroni", "significant"]
    return pd.DataFrame(rows, columns=cols)


def read_leaked(audit_dir: Path, *, rule: str = "semantic", source: str | None = None) -> set[str]:
    """The test qids an audit found leaked: by ``semantic`` similarity, ``exact`` duplicate, ``label`` overlap,
    or ``any`` of them; ``source`` picks one test source when qids repeat across sources."""
    path = Path(audit_dir) / "per_query.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no audit here; run `leakexp audit ... --out {audit_dir}` first")
    per = pd.read_csv(path, dtype={"qid": str, "source": str}, keep_default_na=False)
    if rule not in LEAK_RULES:
        raise ValueError(f"--leaked-by {rule}: use one of {', '.join(LEAK_RULES)}")
    if source is not None:
        if source not in set(per.source):
            raise ValueError(f"--source {source}: the audit's test sources are {sorted(set(per.source))}")
        per = per[per.source == source]
    elif per.qid.duplicated().any():
        raise ValueError(f"{path}: qids repeat across test sources {sorted(set(per.source))}; pick one with --source")
    columns = {"semantic": ["leaked"], "exact": ["exact_duplicate"], "label": ["label_overlap"],
               "any": ["leaked", "exact_duplicate", "label_overlap"]}[rule]
    have = [c for c in columns if c in per.columns]
    if not have:
        raise ValueError(f"{path}: the audit has no {rule} overlap (columns {columns[0]!r} missing)")
    flags = np.zeros(len(per), dtype=bool)
    for c in have:
        flags |= per[c].astype(str).str.lower().eq("true").to_numpy()
    return set(per.qid[flags])


class NothingToCompare(ValueError):
    """split-eval on an audit whose leaked group is empty: no figure to print."""


def run_split_eval(
    runs: Sequence[str], *, qrels: Path, audit_dir: Path, measures: Sequence[str] = ("nDCG@10", "P@1", "MFR"),
    baseline: str | None = None, leaked_by: str = "semantic", source: str | None = None, out: Path | None = None,
    mfr_missing: str = "infinite", depth: int = 100, alpha: float = 0.05, mfr: str = "reciprocal_of_mrr",
) -> pd.DataFrame:
    """``leakexp split-eval``: re-score TREC runs on the audit's leaked vs other test queries."""
    leaked = read_leaked(audit_dir, rule=leaked_by, source=source)
    judgments = read_qrels_file(qrels, "--qrels")
    if not leaked & set(judgments.qid.astype(str)):
        raise NothingToCompare(
            f"split-eval: nothing to compare: the audit in {audit_dir} has no leaked test query ({leaked_by}) among "
            f"the {judgments.qid.nunique()} queries of {qrels}"
            + ("" if leaked_by == "any" else "; --leaked-by any counts every kind of overlap"))
    frames, names = [], []
    for spec in runs:
        name, target = source_name(spec)
        if name in names:
            raise ValueError(f"two runs are named {name!r}; name them NAME=PATH")
        names.append(name)
        frames.append(per_query(read_run(Path(target)), judgments, list(measures), mfr_missing=mfr_missing,
                                depth=depth).assign(run=name))
    if baseline is not None and baseline not in names:
        raise ValueError(f"--baseline {baseline}: not one of the runs {names}")
    table = split_eval(pd.concat(frames, ignore_index=True), leaked, systems=["run"],
                       baseline={"run": baseline} if baseline else None, alpha=alpha, mfr=mfr)
    out = Path(out) if out else Path(audit_dir) / "split-eval"
    write_table(table, out, "split_eval",
                f"Runs on the {len(leaked)} leaked ({leaked_by}) and the other test queries; p: paired t-test "
                f"against {baseline or names[0]}, Bonferroni-corrected over the other runs; empty where a group has "
                f"fewer than two queries (no test). {mfr_caption(mfr_missing, depth, mfr)}." if "MFR" in measures else
                "fewer than two queries (no test).")
    return table
