"""Corpus statistics, and the checks that stop a run whose documents cannot be what the collection holds.

A corpus read wrongly does not fail: it reaches the models almost empty (WaPo through ir_datasets' default text kept
10 words of a 302-word article) or with documents under one id twice, and every number downstream is quietly wrong.
The figures here are cheap to compute in one pass and make that visible: the ``corpus-stats`` stage computes them before
any index, idf table, token array or training set reads a corpus's documents, and stops the run on an implausible
corpus; ``leakexp corpus-stats`` prints them (:func:`corpus_figures`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from leakexp.data.files import DataFormatError
from leakexp.data.sources import source_of

# the settings of a corpus (``corpora.<name>``) and of the training pool (``data``) that the documents check reads:
# what kind of documents they are, and whether a run goes on with a corpus that fails the check, on purpose
CHECK_SETTINGS = ("documents", "accept_short_documents", "accept_duplicate_docnos")
# The lowest plausible median length, in white-space words, per kind of document. News articles (Robust04, NYT, WaPo)
# and web documents (MS MARCO) have medians of hundreds of words; a median under 20 means the body was not read.
# Passages (e.g. MS MARCO's) have a median of about 50 words.
MIN_MEDIAN_WORDS = {"news": 20, "web": 20, "passages": 5}
FIGURES = ("documents", "median_words", "empty_documents", "duplicate_docnos")


class DocumentStats:
    """Counts documents, words per document, empty documents and repeated ids while documents stream past."""

    def __init__(self) -> None:
        self.words = array("q")
        self.hashes = array("q")  # the ids' hashes: 8 bytes a document, not a set of millions of strings

    def add(self, docno: str, text: str) -> None:
        self.words.append(len(text.split()))
        self.hashes.append(hash(docno))

    def counted(self, docs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
        """``docs`` unchanged, counted on the way."""
        for docno, text in docs:
            self.add(docno, text)
            yield docno, text

    def repeated_hashes(self) -> set[int]:
        values, counts = np.unique(np.frombuffer(self.hashes, dtype=np.int64), return_counts=True)
        return set(values[counts > 1].tolist())

    def figures(self, docs: Iterable[tuple[str, str]] | None = None) -> dict:
        """The figures; ``docs`` (the same documents again) turns ids whose hashes repeat into exact duplicates."""
        words = np.frombuffer(self.words, dtype=np.int64)
        out = {"documents": int(len(words)), "median_words": float(np.median(words)) if len(words) else 0.0,
               "empty_documents": int((words == 0).sum()), "duplicate_docnos": 0, "duplicate_examples": []}
        suspects = self.repeated_hashes()
        if suspects and docs is not None:
            seen: dict[str, int] = {}
            for docno, _ in docs:
                if hash(docno) in suspects:
                    seen[docno] = seen.get(docno, 0) + 1
            dup = sorted(d for d, n in seen.items() if n > 1)
            out["duplicate_docnos"], out["duplicate_examples"] = len(dup), dup[:3]
        elif suspects:  # hashes alone: an upper bound (a collision of 64-bit hashes is unlikely, not impossible)
            out["duplicate_docnos"] = len(suspects)
        return out


def document_figures(docs) -> dict:
    """The figures of a DocStore (iterated once, twice if ids repeat)."""
    stats = DocumentStats()
    for docno, text in docs:
        stats.add(docno, text)
    return stats.figures(iter(docs))


def check_documents(name: str, figures: Mapping, settings: Mapping) -> None:
    """A one-line error naming the corpus, the figure and the likely cause, unless the setting accepts it."""
    where = "data" if name == "train" else "corpus"
    if figures["duplicate_docnos"] and not settings.get("accept_duplicate_docnos"):
        ex = ", ".join(figures.get("duplicate_examples") or [])
        raise DataFormatError(
            f"{name}: {figures['duplicate_docnos']} document id(s) occur more than once{f' (e.g. {ex})' if ex else ''} "
            f"among {figures['documents']} documents; the corpus files are probably given twice or overlap (a "
            f"look-up would see only one of the texts); accept it on purpose with "
            f"{where}.accept_duplicate_docnos=true")
    kind = str(settings.get("documents") or "news")
    low = MIN_MEDIAN_WORDS[kind]
    if figures["documents"] and figures["median_words"] < low and not settings.get("accept_short_documents"):
        raise DataFormatError(
            f"{name}: median document length {figures['median_words']:g} words, under {low} for {kind} documents "
            f"({figures['empty_documents']} of {figures['documents']} empty); the documents' text is probably not "
            f"read (a parser keeping only titles or the first element of each paragraph); set "
            f"{where}.documents to the right kind or accept it on purpose with {where}.accept_short_documents=true")


def corpus_figures(corpora: Mapping[str, Mapping], data: Mapping, made: Path | None = None
                   ) -> tuple[list[tuple[str, object]], list[str]]:
    """(``name: value`` lines, check errors) for every test corpus of ``corpora`` (name -> its settings) and the
    training pool (``train_…``; its topics are the training queries of both sources, judged: those with a relevant
    document); ``data``: the ``data`` settings, ``made``: the folder of the world a stage made, where one did.

    Computed from the collections themselves, not the store, so a corpus the check refuses still shows its figures.
    """
    lines: list[tuple[str, object]] = []
    errors: list[str] = []
    for name, corpus in corpora.items():
        c = source_of(corpus["kind"], "corpus.kind").collection(corpus, data, made)
        fig = document_figures(c.docs)
        judged = set(c.qrels.qid) & set(c.topics)
        relevant = set(c.qrels[c.qrels.label >= 1].qid) & set(c.topics)
        lines += _lines(name, fig, len(c.topics), len(judged), len(relevant))
        errors += _errors(name, fig, corpus)
    pool = source_of(data["kind"], "data.kind").pool(data, made)
    fig = document_figures(pool.docs)
    judged = len(pool.qrels[["source", "qid"]].drop_duplicates())
    lines += _lines("train", fig, len(pool.queries), judged, judged)
    errors += _errors("train", fig, data)
    return lines, errors


def _lines(name: str, fig: dict, topics: int, judged: int, relevant: int) -> list[tuple[str, object]]:
    return [(f"{name}_documents", fig["documents"]), (f"{name}_median_words", fig["median_words"]),
            (f"{name}_empty_documents", fig["empty_documents"]), (f"{name}_duplicate_docnos", fig["duplicate_docnos"]),
            (f"{name}_topics", topics), (f"{name}_judged_topics", judged), (f"{name}_topics_with_relevant", relevant)]


def _errors(name: str, fig: dict, settings: Mapping) -> list[str]:
    try:
        check_documents(name, fig, settings)
    except DataFormatError as exc:
        return [str(exc)]
    return []
