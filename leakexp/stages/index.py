"""The ``index`` stage: the BM25 index (PISA or Anserini, ``bm25.backend``) of a test collection or of the
training pool, one per collection in the store; its analysis is config (``bm25.stemmer``, ``bm25.stopwords``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from leakexp.lib.bm25 import ANSERINI_VERSION, JavaMissing, anserini_jar, check_anserini, check_java, write_index
from leakexp.runner.schema import Fraction, NonNegativeFloat, PositiveInt, Section
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage
from leakexp.stages.docstats import docstats_input, stats_figures

BM25 = ("bm25.k1", "bm25.b", "bm25.stemmer", "bm25.stopwords", "bm25.backend")


def bm25_options(ctx: Context) -> dict:
    """BM25's parameters, analysis and backend (from the stage's config) and the runtime's threads and verbosity."""
    b = ctx.settings("bm25")
    return dict(k1=b.k1, b=b.b, stemmer=b.stemmer, stopwords=b.stopwords, backend=b.backend,
                threads=int(ctx.runtime.get("threads", 2)), verbose=bool(ctx.runtime.get("verbose", False)))


def backend_identity(p: dict, c: Config):
    """What a stage's key records of the tool beside its settings: Anserini's release (None for PISA, whose
    version the environment pins)."""
    return {"anserini": ANSERINI_VERSION} if c.at("bm25.backend") == "anserini" else None


def _docs_input(name: str) -> Ask:
    return Ask.of("pool") if name == "train" else Ask.of("collection", corpus=name)


def _index(ctx: Context, tmp: Path) -> dict:
    docs = ctx.inputs["docs"].docs
    return {**write_index(tmp, iter(docs), **bm25_options(ctx)), **stats_figures(ctx.inputs["stats"])}


def check(cfg) -> None:
    """The stemmers Anserini offers, when it is the backend (each setting's own domain is :class:`BM25Settings`')."""
    if cfg.bm25.backend == "anserini":
        try:
            check_anserini(str(cfg.bm25.stemmer), str(cfg.bm25.stopwords))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


INDEX = Stage(
    # 2: leakexp's own analysis (analyze(), for stemmer=porter); 3: Lucene's Porter (bli->ble, logi->log), backend
    "index", version=3,
    reads=BM25, inputs=lambda p, c: {"docs": _docs_input(p["name"]), "stats": docstats_input(p["name"])},
    compute=_index, check=check,
    external=backend_identity,
    describe="BM25 index (PISA or Anserini, bm25.backend) of a test collection or of the training pool (name=train)",
)



class BM25Settings(Section):
    """``bm25``: the first stage's BM25 and its analysis (one per store: indexes, runs and negatives read it)."""

    k1: NonNegativeFloat
    b: Fraction
    stemmer: Literal["porter2", "porter", "krovetz", "none"]
    stopwords: Literal["terrier", "lucene", "none"]
    depth: PositiveInt
    threads: PositiveInt
    backend: Literal["pisa", "anserini"]

    def files(self) -> list[tuple[str, Path]]:
        """Anserini's jar, and a Java that runs it, before a run that computes (one error naming the fix)."""
        if self.backend != "anserini":
            return []

        try:
            check_java()
            return [("bm25.backend=anserini (Anserini's jar)", anserini_jar())]
        except (JavaMissing, FileNotFoundError) as exc:
            raise ConfigError(str(exc)) from None


