"""Where collections and training pools come from: the toy world, ir_datasets, or local files."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

import pandas as pd
from pydantic import Field

from leakexp.data import toy
from leakexp.data.files import (DataFormatError, DataUnavailable, files_identity, read_docs, read_qrels, read_queries,
                                read_trec_topics, read_variants)
from leakexp.data.irds import collection_requests, pool_requests as requests
from leakexp.data.irds_files import fingerprint, missing_message
from leakexp.data.types import Collection, DictDocStore, Topic, TrainPool
from leakexp.runner.config import resolved_corpus_config
from leakexp.runner.schema import Fraction, Name, NonNegativeInt, PositiveInt, Section
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage

log = logging.getLogger(__name__)


def load_local_collection(
    name: str, *, topics: Path, qrels: Path, docs: Path, variants: Path | None = None
) -> Collection:
    """A test collection from local files: TREC topics, TREC qrels, JSONL/TSV docs, variants TSV."""
    variant_map = read_variants(variants) if variants else {}
    parsed = {}
    for t in read_trec_topics(topics):
        if t.qid in parsed:
            raise DataFormatError(f"{topics}: topic {t.qid} occurs twice; topic ids must be unique")
        parsed[t.qid] = Topic(t.qid, t.title, t.description, t.narrative, tuple(variant_map.get(t.qid, ())))
    return Collection(name, parsed, read_qrels(qrels), DictDocStore(read_docs(docs)))


def load_local_train_pool(
    *, msmarco: Path, orcas: Path, msmarco_qrels: Path, orcas_qrels: Path, docs: Path, name: str = "train"
) -> TrainPool:
    """Training queries and their judgments per source (one id may name different queries in the two sources)."""
    frames, judged = [], []
    for source, path, qrels_path in (("msmarco", msmarco, msmarco_qrels), ("orcas", orcas, orcas_qrels)):
        q = read_queries(path)
        q["source"] = source
        frames.append(q)
        tq = read_qrels(qrels_path)
        tq = tq[tq.label >= 1]
        unknown = ~tq.qid.isin(set(q.qid))
        if unknown.any():
            log.warning("%s: %d judgment(s) of %d query id(s) that %s does not contain dropped (e.g. %r)", qrels_path,
                        int(unknown.sum()), tq.qid[unknown].nunique(), path, tq.qid[unknown].iloc[0])
        tq = tq[~unknown].drop_duplicates(["qid", "docno"])
        judged.append(tq.assign(source=source)[["source", "qid", "docno"]])
    queries = pd.concat(frames, ignore_index=True)
    qrels = pd.concat(judged, ignore_index=True)
    return TrainPool(queries, qrels, DictDocStore(read_docs(docs)), name=name)


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


# -- dispatch on config ------------------------------------------------------------------------------
def load_collection(data: Mapping, corpus: Mapping, toy_dir: Path | None = None) -> Collection:
    """The test collection a corpus config names (``toy_dir``: the generated toy world, for toy corpora)."""
    if corpus["kind"] == "toy":
        if data["kind"] != "toy" or toy_dir is None:
            raise ValueError(f"corpus={corpus['name']} is a toy-world corpus but data={data['name']}; use data=toy")
        d = Path(toy_dir) / corpus["collection"]
        return load_local_collection(
            corpus["name"], topics=d / "topics.txt", qrels=d / "qrels.txt", docs=d / "docs.jsonl",
            variants=d / "variants.tsv",
        )
    if corpus["kind"] == "irds":
        from leakexp.data.irds import load_irds_collection

        return load_irds_collection(corpus["name"], corpus["irds_id"], variants=corpus.get("variants"))
    if corpus["kind"] == "local":
        return load_local_collection(
            corpus["name"], topics=Path(corpus["topics"]), qrels=Path(corpus["qrels"]), docs=Path(corpus["docs"]),
            variants=Path(corpus["variants"]) if corpus.get("variants") else None,
        )
    raise ValueError(f"corpus.kind={corpus['kind']!r} is unknown; use toy, irds or local")


def load_train_pool(data: Mapping, toy_dir: Path | None = None) -> TrainPool:
    """The training pool a data config names (``toy_dir``: the generated toy world)."""
    if data["kind"] == "toy":
        d = Path(toy_dir) / "train"
        return load_local_train_pool(
            msmarco=d / "msmarco.queries.tsv", orcas=d / "orcas.queries.tsv", msmarco_qrels=d / "msmarco.qrels.txt",
            orcas_qrels=d / "orcas.qrels.txt", docs=d / "docs.jsonl", name=data["name"],
        )
    if data["kind"] == "irds":
        from leakexp.data.irds import load_irds_train_pool

        return load_irds_train_pool(data["msmarco"], data["orcas"], name=data["name"])
    if data["kind"] == "local":
        _check_local_keys(data)
        return load_local_train_pool(
            msmarco=Path(data["msmarco"]), orcas=Path(data["orcas"]), msmarco_qrels=Path(data["msmarco_qrels"]),
            orcas_qrels=Path(data["orcas_qrels"]), docs=Path(data["docs"]), name=data["name"],
        )
    raise ValueError(f"data.kind={data['kind']!r} is unknown; use toy, irds or local")


def _check_local_keys(data: Mapping) -> None:
    if data.get("qrels") is not None and data.get("msmarco_qrels") is None:
        raise ValueError("data.qrels is replaced by data.msmarco_qrels and data.orcas_qrels: judgments are read per "
                         "source, because one query id may name different queries in MS MARCO and ORCAS")


def _irds_fingerprint(requests) -> list[dict]:
    return [fingerprint(dataset_id, parts) for dataset_id, parts in requests]


def pool_files(data: Mapping) -> str | list | None:
    """Identity of a training pool's files: a local pool's files, or the files ir_datasets reads for MS MARCO and
    ORCAS (archives by size and modification time, queries and qrels by content); None for the toy world, which
    its config makes."""
    if data["kind"] == "irds":
        from leakexp.data.irds import pool_requests as requests

        return _irds_fingerprint(requests(data["msmarco"], data["orcas"]))
    if data["kind"] != "local":
        return None
    _check_local_keys(data)
    return files_identity(*(Path(data[k]) for k in ("msmarco", "orcas", "msmarco_qrels", "orcas_qrels", "docs")))


def corpus_files(corpus: Mapping) -> str | dict | None:
    """Identity of a corpus's local files (topics, qrels, docs, variants), or of the files ir_datasets reads for an
    ir_datasets corpus (documents, topics, qrels) and its variants."""
    if corpus["kind"] == "local":
        keys = ["topics", "qrels", "docs"] + (["variants"] if corpus.get("variants") else [])
        return files_identity(*(Path(corpus[k]) for k in keys))
    if corpus["kind"] == "irds":
        from leakexp.data.irds import collection_requests

        variants = corpus.get("variants")
        return {"irds": _irds_fingerprint(collection_requests(corpus["irds_id"])),
                "variants": files_identity(Path(str(variants))) if variants and Path(str(variants)).exists()
                else None}
    return None


def pool_missing(data: Mapping) -> str | None:
    """The files of an ir_datasets training pool that are absent, and what to do (None: all there, or not irds)."""
    if data["kind"] != "irds":
        return None

    return missing_message(requests(data["msmarco"], data["orcas"]))


def corpus_missing(corpus: Mapping) -> str | None:
    """The files of an ir_datasets corpus that are absent, and what to do (None: all there, or not irds)."""
    if corpus["kind"] != "irds":
        return None

    return missing_message(collection_requests(corpus["irds_id"]))


# -- stages ----------------------------------------------------------------------------------------------
def _toy(params: dict, c: Config) -> dict:
    return {"toy": Ask.of("toy")} if c.at("data.kind") == "toy" else {}


def _generate(ctx: Context, tmp: Path) -> dict:
    d = ctx.settings("data")
    return toy.generate(tmp, seed=d.seed, queries_per_source=d.queries_per_source,
                        leak_fraction=d.leak_fraction)["train"]


# What a corpus's config holds beyond its collection: the leak counts of its training sets (the sets stage reads
# them) and the documents check (the docstats stage reads it, for the pool in data.*): changing them must not re-key
# the collection or the pool, and with them detection, verification and every training set and model.
DOCUMENTS_CHECK = ("documents", "accept_short_documents", "accept_duplicate_docnos")
NOT_THE_COLLECTION = ("fixed_leak_queries", "test_leak_queries", *DOCUMENTS_CHECK)

TOY = Stage(
    # the generator: 5 = the real data's hazards (see leakexp.data.toy); 6 = a query that leaks for two topics
    "toy", version=6,
    reads=("data.seed", "data.queries_per_source", "data.leak_fraction"), compute=_generate,
    path=lambda p, c: ["toy", f"seed-{c.at('data.seed')}"], describe="the generated toy world",
)
POOL = Stage(
    "pool", version=2,  # 2: document texts as their collection holds them (leakexp.data.doctext)
    reads=("data", "!data.corpora", *(f"!data.{k}" for k in DOCUMENTS_CHECK)), inputs=_toy,
    external=lambda p, c: pool_files(c["data"]), missing=lambda p, c: pool_missing(c["data"]),
    value=lambda ctx: load_train_pool(ctx.settings("data").dump(),
                                      ctx.inputs["toy"] if "toy" in ctx.input_names else None),
    describe="the training pool (queries, qrels, documents)",
)
def require_variants_of_corpora(cfg) -> None:
    """Every corpus of the data names the query variants detection searches, before detection runs (a requirement,
    not a check: `plan` and `status` list it instead of refusing)."""
    from omegaconf import OmegaConf


    for c in ([] if OmegaConf.is_missing(cfg.data, "corpora") else cfg.data.corpora):
        try:  # variants missing by accident would make detection search without them
            require_variants(OmegaConf.to_container(resolved_corpus_config(cfg, c), resolve=True),
                             list(cfg.detect.fields))
        except DataUnavailable as exc:
            raise ConfigError(str(exc)) from None


COLLECTION = Stage(
    "collection", version=2,  # 2: document texts as their collection holds them (leakexp.data.doctext)
    reads=("data.kind", "data.name", "corpora.{corpus}", *(f"!corpora.{{corpus}}.{k}" for k in NOT_THE_COLLECTION)),
    inputs=lambda p, c: _toy(p, c) if c.at(f"corpora.{p['corpus']}.kind") == "toy" else {},
    external=lambda p, c: corpus_files(c["corpora"][p["corpus"]]),
    missing=lambda p, c: corpus_missing(c["corpora"][p["corpus"]]),
    value=lambda ctx: load_collection(ctx.settings("data").dump(),
                                      ctx.settings(f"corpora.{ctx.params['corpus']}").dump(),
                                      ctx.inputs["toy"] if "toy" in ctx.input_names else None),
    describe="a test collection (topics, qrels, documents)",
)


# The kind of a collection's documents: it sets the shortest plausible median document (leakexp.stages.docstats);
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
