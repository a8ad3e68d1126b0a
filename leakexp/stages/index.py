"""The ``index`` stage: the BM25 index (PISA or Anserini, ``bm25.backend``) of a test collection or of the
training pool, one per collection in the store; its analysis is config (``bm25.stemmer``, ``bm25.stopwords``).

What Anserini indexes is ``bm25.collection``: ``json``, leakexp's text of every document (the text the models
read, ``leakexp.data.doctext``) as a JsonCollection; ``trec``, for a corpus ir_datasets reads from raw TREC SGML
files (TREC Disks 4 & 5: Robust04), those very files through Anserini's own ``TrecCollection``, as the SPIRE-22
authors' Robust04 index was built (``leakexp.lib.bm25.write_trec_index``); other corpora (NYT, WaPo, the training
pool, the toy world, local files) are indexed as ``json`` either way."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from leakexp.data.irds_files import TrecFiles
from leakexp.lib.bm25 import (ANSERINI_VERSION, JavaMissing, anserini_jar, check_anserini, check_java, write_index,
                              write_trec_index)
from leakexp.runner.schema import Fraction, NonNegativeFloat, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Config, ConfigError, Context, DataUnavailable, Stage, register_stage, stages
from leakexp.stages.corpus_stats import corpus_stats_input, documents_input, stats_figures
from leakexp.stages.sources import collection_source

log = logging.getLogger(__name__)
BM25 = ("bm25.k1", "bm25.b", "bm25.stemmer", "bm25.stopwords", "bm25.backend")


def bm25_options(ctx: Context) -> dict:
    """BM25's parameters, analysis and backend (from the stage's config) and the runtime's threads and verbosity."""
    b = ctx.settings("bm25")
    return dict(k1=b.k1, b=b.b, stemmer=b.stemmer, stopwords=b.stopwords, backend=b.backend,
                threads=ctx.runtime.threads, verbose=ctx.runtime.verbose)


@register_stage
class Index(Stage):
    """BM25 index (PISA or Anserini, bm25.backend) of a test collection or of the training pool (name=train)"""

    # 2: leakexp's own analysis (analyze(), for stemmer=porter); 3: Lucene's Porter (bli->ble, logi->log), backend
    name, version = "index", 3
    section = "bm25"
    help = ("build the BM25 indexes the grid reads: the training pool's and those of the corpora whose first stage is "
            "leakexp's BM25 (not a bundled or file run)")

    def reads(self, p: dict, cuda: bool) -> tuple[str, ...]:
        """BM25's settings and, for a test corpus, what Anserini indexes and where its documents come from (the
        training pool is never raw TREC files: ``bm25.collection`` does not re-key it, nor the training sets its
        negatives make)."""
        if p["name"] == "train":
            return BM25
        return (*BM25, "bm25.collection", f"corpora.{p['name']}.kind", f"corpora.{p['name']}.irds_id")

    def inputs(self, p: dict, c: Config) -> dict:
        return {"docs": documents_input(p["name"]), "stats": corpus_stats_input(p["name"])}

    def external(self, p: dict, c: Config):
        """Anserini's release and, for a TrecCollection index, the identity of the raw files it reads (its folder's
        listing: every file's path, size and modification time; the globs that select them)."""
        trec = self.raw_trec(p, c)
        tool = {"anserini": ANSERINI_VERSION} if c.settings("bm25").backend == "anserini" else None
        return tool if trec is None else {**tool, "collection": "TrecCollection", "files": trec.identity()}

    @staticmethod
    def raw_trec(p: dict, c: Config) -> TrecFiles | None:
        """The raw TREC files Anserini's TrecCollection indexes for this index (``bm25.collection=trec``, Anserini,
        an ir_datasets corpus read from TREC SGML files), or None: leakexp's text is indexed."""
        bm25 = c.settings("bm25")
        if p["name"] == "train" or bm25.backend != "anserini" or bm25.collection != "trec":
            return None
        corpus = c.settings(f"corpora.{p['name']}").dump()
        return collection_source(corpus).raw_trec(corpus)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        stats = stats_figures(ctx.inputs["stats"])
        trec = self.raw_trec(ctx.params, ctx.config)
        if trec is None:
            docs = ctx.inputs["docs"].docs
            return {**write_index(tmp, iter(docs), **bm25_options(ctx)), **stats}
        o = bm25_options(ctx)
        figures = write_trec_index(tmp, trec.root, trec.files(), threads=o["threads"], verbose=o["verbose"],
                                   stemmer=o["stemmer"], stopwords=o["stopwords"])
        if figures["documents"] != stats["corpus_documents"]:
            log.warning("%s: Anserini's TrecCollection read %d documents (%d indexed), ir_datasets %d, from the same "
                        "files", ctx.params["name"], figures["documents"], figures["documents_indexed"],
                        stats["corpus_documents"])
        return {**figures, **stats, "collection": "TrecCollection"}

    def asks(self, r, cells) -> list[Ask]:
        """The indexes the grid reads, and no other: those upstream of the other stages' artifacts (the training
        pool's for every set's negatives, a corpus's where its first stage is leakexp's BM25 or robustness re-runs
        BM25; a corpus that re-ranks a bundled or file run needs none), the training pool's first."""
        found, seen = [], set()
        todo = [a for st in stages() if st is not self and not st.demo for a in st.asks(r, cells)]
        while todo:
            a = r.normal(todo.pop())
            if a in seen:
                continue
            seen.add(a)
            if a.stage == self.name:
                found.append(a)
                continue
            try:
                todo.extend(r.direct(a))
            except (ConfigError, DataUnavailable, OSError):  # inputs not known yet (e.g. no annotations): status says
                continue
        corpora = list(r.settings.grid.corpora)
        return sorted(found, key=lambda a: (a.params["name"] != "train", corpora.index(a.params["name"])
                                            if a.params["name"] in corpora else len(corpora), a.params["name"]))

    def check(self, s: Settings) -> None:
        """The stemmers Anserini offers, when it is the backend, and TrecCollection only with Anserini (each
        setting's own domain is :class:`Index.Settings`')."""
        b = s.bm25
        if b.collection == "trec" and b.backend != "anserini":
            raise ConfigError(f"bm25.collection=trec indexes the raw TREC files with Anserini's TrecCollection, which "
                              f"bm25.backend={b.backend} does not have; add bm25.collection=json (leakexp's text) "
                              "or use bm25.backend=anserini")
        if b.backend == "anserini":
            try:
                check_anserini(b.stemmer, b.stopwords)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None

    class Settings(Section):
        """``bm25``: the first stage's BM25 and its analysis (one per store: indexes, runs and negatives read it)."""

        k1: NonNegativeFloat
        b: Fraction
        stemmer: Literal["porter2", "porter", "krovetz", "none"]
        stopwords: Literal["terrier", "lucene", "none"]
        depth: PositiveInt
        threads: PositiveInt
        backend: Literal["pisa", "anserini"]
        collection: Literal["json", "trec"]

        def files(self) -> list[tuple[str, Path]]:
            """Anserini's jar, and a Java that runs it, before a run that computes (one error naming the fix)."""
            if self.backend != "anserini":
                return []
            try:
                check_java()
                return [("bm25.backend=anserini (Anserini's jar)", anserini_jar())]
            except (JavaMissing, FileNotFoundError) as exc:
                raise ConfigError(str(exc)) from None
