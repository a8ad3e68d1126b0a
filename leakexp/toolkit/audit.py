"""Audit any train/test pair: how much of the test set is already in the training data?

Three views of overlap (measured by ``leakexp.toolkit.overlap``), side by side, so that a user sees what the semantic
match adds:

- query overlap: every test query's most similar training queries (SBERT, exact Faiss inner product on
  normalised float32 vectors, as the detection stage does) and the share of test queries with a training
  query above the threshold;
- lexical overlap: exact duplicates after normalisation and word n-gram containment, the checks LLM
  decontamination tools use (lm-evaluation-harness: a test document is contaminated when any of its
  13-grams occurs in the training data);
- label overlap (extrapolate-eval's ``compute_label_overlap.py``): test queries with a relevant document
  that is also relevant for some training query.

The two sides are query sets read by ``leakexp.toolkit.queries``; this module embeds them (with a cache in the
store), writes the report and its figure. ``leakexp.toolkit.split_eval`` reports per-query results on the leaked and
on the other test queries (DuReader-retrieval, Section 3.4, Table 6); ``leakexp decontaminate`` and ``leakexp
resample`` (``leakexp.toolkit.resample``) act on what the audit finds.

Example::

    train = load_side(["msmarco-passage/train/judged"])
    test = load_side(["msmarco-passage/trec-dl-2019/judged"])
    figures = audit(train, test, SbertEmbedder(Store("store")), Path("audit-dl19"))
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence, TYPE_CHECKING

import numpy as np

from leakexp.lib.decisions import above
from leakexp.lib.dense import embedded, encode, sbert_slug
from leakexp.lib.report import markdown_table, save_figure, write_table
from leakexp.runner.store import Store, atomic_write_json, atomic_write_text
from leakexp.toolkit.overlap import STOPLIST_NAME, best_per_key, label_overlap, lexical_overlap, nearest
from leakexp.toolkit.queries import QuerySide, load_side

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


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


# -- embeddings -----------------------------------------------------------------------------------------
class Embedder(Protocol):
    """Normalised float32 embeddings of ``texts``; ``name`` labels the cache entry (e.g. train, test)."""

    def __call__(self, texts: list[str], name: str) -> np.ndarray: ...


def texts_digest(texts: Sequence[str]) -> str:
    """Content hash of a text list (order matters), for cache keys."""
    import pandas as pd

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


# -- lexical overlap ---------------------------------------------------------------------------------------


# -- label overlap -----------------------------------------------------------------------------------------


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
    import pandas as pd

    q = test.queries.copy()
    owner = test.owner
    nq = len(q)
    top_s = sims[:, 0] if sims.shape[1] else np.full(len(owner), -np.inf, np.float32)
    top_i = ids[:, 0] if ids.shape[1] else np.full(len(owner), -1, np.int64)
    keys, s, rows = best_per_key(owner, top_s, np.arange(len(owner)))
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
    r, c = np.nonzero(above(sims, threshold) & (ids >= 0))
    in_top_k = pd.DataFrame({"q": owner[r], "t": ids[r, c]}).drop_duplicates().groupby("q").size()
    q["above_in_top_k"] = in_top_k.reindex(range(nq), fill_value=0).to_numpy().astype(np.int64)
    q["leaked"] = above(np.nan_to_num(best, nan=-np.inf), threshold)
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
    import pandas as pd

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
    import pandas as pd

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


