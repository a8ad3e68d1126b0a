"""Where collections and training pools come from: the toy world, ir_datasets, or local files."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from leakexp.data import toy
from leakexp.data.files import DataFormatError, DataUnavailable
from leakexp.data.sources import Source, source_of
from leakexp.data.types import Collection
from leakexp.runner.schema import Fraction, Name, NonNegativeInt, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage

log = logging.getLogger(__name__)


def require_variants(corpus: Mapping, fields: list[str]) -> None:
    """Real data: searching the ``variant`` field needs a variants file; say how to give it or drop the field.

    In the paper most candidates came from the query variants (Robust04: 3,356 of 3,960; Core 2018: all 973),
    so detection without them must be a decision, not an accident.
    """
    if "variant" not in fields or corpus["kind"] == "toy" or corpus.get("variants"):
        return
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
def collection_source(corpus: Mapping) -> Source:
    return source_of(corpus["kind"], "corpus.kind")


def pool_source(data: Mapping) -> Source:
    return source_of(data["kind"], "data.kind")


# -- stages ----------------------------------------------------------------------------------------------
def _toy(params: dict, c: Config) -> dict:
    return {"toy": Ask.of("toy")} if c.settings("data").kind == "toy" else {}


def _generate(ctx: Context, tmp: Path) -> dict:
    d = ctx.settings("data")
    return toy.generate(tmp, seed=d.seed, queries_per_source=d.queries_per_source,
                        leak_fraction=d.leak_fraction)["train"]


def _toy_dir(ctx: Context) -> Path | None:
    return ctx.inputs["toy"] if "toy" in ctx.input_names else None


def _pool(ctx: Context):
    data = ctx.settings("data").dump()
    return pool_source(data).pool(data, _toy_dir(ctx))


def _collection(ctx: Context) -> Collection:
    corpus = ctx.settings(f"corpora.{ctx.params['corpus']}").dump()
    return collection_source(corpus).collection(corpus, ctx.settings("data").dump(), _toy_dir(ctx))


# What a corpus's config holds beyond its collection: the leak counts of its training sets (the build stage reads
# them) and the documents check (the corpus-stats stage reads it, for the pool in data.*): changing them must not re-key
# the collection or the pool, and with them detection, verification and every training set and model.
DOCUMENTS_CHECK = ("documents", "accept_short_documents", "accept_duplicate_docnos")
NOT_THE_COLLECTION = ("fixed_leak_queries", "test_leak_queries", *DOCUMENTS_CHECK)

TOY = Stage(
    # the generator: 5 = the real data's hazards (see leakexp.data.toy); 6 = a query that leaks for two topics
    "toy", version=6,
    reads=("data.seed", "data.queries_per_source", "data.leak_fraction"), compute=_generate,
    path=lambda p, c: ["toy", f"seed-{c.settings('data').seed}"], describe="the generated toy world",
)
POOL = Stage(
    "pool", version=2,  # 2: document texts as their collection holds them (leakexp.data.doctext)
    reads=("data", "!data.corpora", *(f"!data.{k}" for k in DOCUMENTS_CHECK)), inputs=_toy,
    external=lambda p, c: pool_source(c["data"]).pool_identity(c["data"]),
    missing=lambda p, c: pool_source(c["data"]).pool_missing(c["data"]),
    value=lambda ctx: _pool(ctx), describe="the training pool (queries, qrels, documents)",
)


def require_variants_of_corpora(s: Settings) -> None:
    """Every corpus of the data names the query variants detection searches, before detection runs (a requirement,
    not a check: `plan` and `status` list it instead of refusing)."""
    for c in ([] if s.data.corpora == "???" else s.data.corpora):
        try:  # variants missing by accident would make detection search without them
            require_variants(s.corpus_of(c).model_dump(), list(s.detect.fields))
        except DataUnavailable as exc:
            raise ConfigError(str(exc)) from None


COLLECTION = Stage(
    "collection", version=2,  # 2: document texts as their collection holds them (leakexp.data.doctext)
    reads=("data.kind", "data.name", "corpora.{corpus}", *(f"!corpora.{{corpus}}.{k}" for k in NOT_THE_COLLECTION)),
    inputs=lambda p, c: _toy(p, c) if c.settings(f"corpora.{p['corpus']}").kind == "toy" else {},
    external=lambda p, c: collection_source(c["corpora"][p["corpus"]]).corpus_identity(c["corpora"][p["corpus"]]),
    missing=lambda p, c: collection_source(c["corpora"][p["corpus"]]).corpus_missing(c["corpora"][p["corpus"]]),
    value=lambda ctx: _collection(ctx), describe="a test collection (topics, qrels, documents)",
)


# The kind of a collection's documents: it sets the shortest plausible median document (leakexp.stages.corpus_stats);
# accept_short_documents / accept_duplicate_docnos let a run go on with a corpus that fails that check, on purpose.
DocumentKind = Literal["news", "web", "passages"]


class DataSettings(Section):
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
        if self.kind != "local":
            return []
        keys = ("msmarco", "orcas", "msmarco_qrels", "orcas_qrels", "docs")
        return [(f"data.{k}", Path(getattr(self, k))) for k in keys if getattr(self, k) not in (None, "???")]


class CorpusSettings(Section):
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
        keys = ("variants", "topics", "qrels", "docs") if self.kind == "local" else ("variants",)
        return [(f"{prefix}.{k}", Path(getattr(self, k))) for k in keys if getattr(self, k) not in (None, "???")]
