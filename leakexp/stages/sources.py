"""The ``pool`` and ``collection`` stages: the training pool and a test collection, each read through the source of
its kind (the toy world the ``toy`` stage generated, ir_datasets, or local files: ``leakexp.data.sources``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from leakexp.data.files import DataFormatError, DataUnavailable
from leakexp.data.sources import Source, source_of
from leakexp.data.statistics import CHECK_SETTINGS
from leakexp.data.types import Collection
from leakexp.runner.schema import Fraction, Name, NonNegativeInt, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Config, ConfigError, ConfigErrors, Context, Stage, register_stage

log = logging.getLogger(__name__)


def require_variants(corpus: Mapping, fields: list[str]) -> None:
    """Real data: searching the ``variant`` field needs a variants file; say how to give it or drop the field.

    In the paper most candidates came from the query variants (Robust04: 3,356 of 3,960; Core 2018: all 973),
    so detection without them must be a decision, not an accident.
    """
    if "variant" not in fields or collection_source(corpus).made_by or corpus.get("variants"):
        return  # a generated world has every topic's variants
    raise DataUnavailable(
        f"corpus {corpus['name']} has no query variants but detect.fields includes 'variant': give a TSV file of "
        f"qid<TAB>variant lines (e.g. Benham & Culpepper's UQV variants; ir_datasets does not have them) with "
        f"corpus.variants=/path/to/variants.tsv or the environment variable "
        f"LEAKEXP_VARIANTS_{corpus['name'].upper()}=/path/to/variants.tsv, or search without variants on purpose "
        f"with detect.fields=[title,description]"
    )


def check_variants(collection: Collection, corpus: Mapping, fields: list[str]) -> None:
    """A variants file that matches no topic is an error; topics without variants are counted in a warning."""
    if "variant" not in fields:
        return
    without = [t.qid for t in collection.topics.values() if not t.variants]
    if without and len(without) == len(collection.topics):
        raise DataFormatError(
            f"corpus {corpus['name']}: the variants file {corpus.get('variants')} names none of the "
            f"{len(without)} topic ids (e.g. {without[0]!r}); its first column must be the topic id"
        )
    if without:
        log.warning("corpus %s: %d of %d topics have no query variants (e.g. %s)", corpus["name"], len(without),
                    len(collection.topics), without[0])


# -- the source of a configuration's data (leakexp.data.sources) ------------------------------------------
def collection_source(corpus) -> Source:
    """The source a corpus's settings name (``corpora.<name>.kind``; a mapping or its typed section)."""
    return source_of(corpus["kind"] if isinstance(corpus, Mapping) else corpus.kind, "corpus.kind")


def pool_source(data) -> Source:
    """The source the ``data`` settings name (``data.kind``; a mapping or the typed section)."""
    return source_of(data["kind"] if isinstance(data, Mapping) else data.kind, "data.kind")


# The kind of a collection's documents: it sets the shortest plausible median document (leakexp.data.statistics);
# accept_short_documents / accept_duplicate_docnos let a run go on with a corpus that fails that check, on purpose.
DocumentKind = Literal["news", "web", "passages"]


# -- stages ----------------------------------------------------------------------------------------------
def _made(c: Config) -> dict:
    """The artifact the data's source is made of, when a stage makes it (the toy world), as an input of its name."""
    made = pool_source(c.settings("data")).made_by
    return {made: Ask.of(made)} if made else {}


def _made_dir(ctx: Context) -> Path | None:
    made = pool_source(ctx.settings("data")).made_by
    return ctx.inputs[made] if made in ctx.input_names else None


# What a corpus's config holds beyond its collection: the leak counts of its training sets (the build stage reads
# them) and the documents check (the corpus-stats stage reads it, for the pool in data.*): changing them must not re-key
# the collection or the pool, and with them detection, verification and every training set and model.
NOT_THE_COLLECTION = ("fixed_leak_queries", "test_leak_queries", *CHECK_SETTINGS)


@register_stage
class Pool(Stage):
    """the training pool (queries, qrels, documents)"""

    name, version = "pool", 2  # 2: document texts as their collection holds them (leakexp.data.doctext)
    section = "data"
    reads = ("data", "!data.corpora", *(f"!data.{k}" for k in CHECK_SETTINGS))

    def inputs(self, p: dict, c: Config) -> dict:
        return _made(c)

    def external(self, p: dict, c: Config):
        return pool_source(c["data"]).pool_identity(c["data"])

    def missing(self, p: dict, c: Config) -> str | None:
        return pool_source(c["data"]).pool_missing(c["data"])

    def value(self, ctx: Context):
        data = ctx.settings("data").dump()
        return pool_source(data).pool(data, _made_dir(ctx))

    class Settings(Section):
        """``data``: the training pool and the test corpora leakage is detected against (toy, irds or local)."""

        kind: Literal["toy", "irds", "local"]
        name: Name
        corpora: Annotated[list[Name], Field(min_length=1)] | Literal["???"]
        seed: NonNegativeInt | None = None
        queries_per_source: PositiveInt | None = None
        leak_fraction: Fraction | None = None
        msmarco: Name | None = None
        orcas: Name | None = None
        msmarco_qrels: Name | None = None
        orcas_qrels: Name | None = None
        docs: Name | None = None
        documents: DocumentKind = "web"
        accept_short_documents: bool = False
        accept_duplicate_docnos: bool = False

        def files(self):
            keys = pool_source(self).pool_settings
            return [(f"data.{k}", Path(getattr(self, k))) for k in keys if getattr(self, k) not in (None, "???")]


def require_variants_of_corpora(s: Settings) -> None:
    """Every corpus of the data names the query variants detection searches, before detection runs (a requirement,
    not a check: `plan` and `status` list it instead of refusing)."""
    missing = []
    for c in ([] if s.data.corpora == "???" else s.data.corpora):
        try:  # variants missing by accident would make detection search without them
            require_variants(s.corpus_of(c).model_dump(), list(s.detect.fields))
        except DataUnavailable as exc:
            missing.append(str(exc))
    if len(missing) == 1:
        raise ConfigError(missing[0])
    if missing:  # every corpus at once, not one a run
        raise ConfigErrors(missing)


@register_stage
class TestCollection(Stage):
    """a test collection (topics, qrels, documents)"""

    name, version = "collection", 2  # 2: document texts as their collection holds them (leakexp.data.doctext)
    section = "corpora.*"
    reads = ("data.kind", "data.name", "corpora.{corpus}", *(f"!corpora.{{corpus}}.{k}" for k in NOT_THE_COLLECTION))

    def inputs(self, p: dict, c: Config) -> dict:
        return _made(c) if collection_source(c.settings(f"corpora.{p['corpus']}")).made_by else {}

    def external(self, p: dict, c: Config):
        corpus = c["corpora"][p["corpus"]]
        return collection_source(corpus).corpus_identity(corpus)

    def missing(self, p: dict, c: Config) -> str | None:
        corpus = c["corpora"][p["corpus"]]
        return collection_source(corpus).corpus_missing(corpus)

    def value(self, ctx: Context) -> Collection:
        corpus = ctx.settings(f"corpora.{ctx.params['corpus']}").dump()
        return collection_source(corpus).collection(corpus, ctx.settings("data").dump(), _made_dir(ctx))

    class Settings(Section):
        """A test corpus (``corpus`` and ``corpora.<name>``): where its topics, qrels and documents come from."""

        name: Name
        kind: Literal["toy", "irds", "local"]
        collection: Name | None = None
        irds_id: Name | None = None
        variants: Name | None = None
        topics: Name | None = None
        qrels: Name | None = None
        docs: Name | None = None
        fixed_leak_queries: NonNegativeInt
        test_leak_queries: NonNegativeInt
        documents: DocumentKind = "news"
        accept_short_documents: bool = False
        accept_duplicate_docnos: bool = False

        def files(self, prefix: str = "corpus"):
            keys = collection_source(self).corpus_settings
            return [(f"{prefix}.{k}", Path(getattr(self, k))) for k in keys if getattr(self, k) not in (None, "???")]
