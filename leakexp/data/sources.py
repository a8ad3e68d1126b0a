"""Where collections and training pools come from, one class per kind (``data.kind`` and ``corpora.<name>.kind``):

- :class:`ToySource`: the generated toy world (its folder, written by the ``toy`` stage);
- :class:`IrdsSource`: ir_datasets, which reads its own files under ``IR_DATASETS_HOME`` (no download at run time);
- :class:`LocalSource`: local files (TREC topics and qrels, JSONL or TSV documents, query and variant TSVs).

Each loads a corpus's test collection and the training pool, and says what identifies the files it reads (part of
the keys of what reads them), which of them are absent (one message saying what to do) and which files they are.
The stages ask :func:`source_of` for the source of a kind and ask it, instead of branching on the kind themselves:
whether a stage makes its files (``made_by``), its raw TREC files, what the settings alone say of the pool.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.data.files import (DataFormatError, files_identity, read_docs, read_qrels, read_queries, read_trec_topics,
                                read_variants)
from leakexp.data.types import SOURCES, Collection, DictDocStore, Topic, TrainPool

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


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
    import pandas as pd

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


class Source:
    """What every kind of data source answers; ``data`` is the ``data:`` section, ``corpus`` a ``corpora.<name>``
    section, ``toy_dir`` the generated toy world (for the toy source only). Code asks the source, never its kind."""

    kind = ""
    # the stage that makes this source's files in the store (the toy world's: ``toy``), whose artifact the pool and the
    # collections read; such a world knows its planted leaks (ground truth) and has every topic's query variants.
    # None: data read from outside leakexp
    made_by: str | None = None
    # the settings of the ``data`` and of a ``corpora.<name>`` section that name files this source reads (checked
    # before a run that computes)
    pool_settings: tuple[str, ...] = ()
    corpus_settings: tuple[str, ...] = ("variants",)

    def raw_trec(self, corpus: Mapping):
        """The raw TREC files a corpus is read from, which Anserini's TrecCollection can index (``TrecFiles``), or
        None (the toy world, local files, an ir_datasets corpus of another format)."""
        return None

    def pool_queries(self, data: Mapping) -> tuple[int, str] | None:
        """How many training queries the pool holds at most and which setting says so, where the settings alone
        tell; None where only the data does."""
        return None

    def query_counts(self, data: Mapping) -> dict[str, int] | None:
        """Training queries per source from the data's metadata, without loading the pool; None where the pool must
        be loaded to count them."""
        return None

    def planted_leaks(self, made: Path) -> pd.DataFrame:
        """The leaking queries a generated world planted (train_qid, source, topic_qid, type), from its folder
        ``made`` (the artifact of ``made_by``): the ground truth that plays the annotators."""
        raise ValueError(f"data of kind {self.kind} has no planted leaks: only a generated world knows its leaks")

    def collection(self, corpus: Mapping, data: Mapping, toy_dir: Path | None = None) -> Collection:
        raise NotImplementedError

    def pool(self, data: Mapping, toy_dir: Path | None = None) -> TrainPool:
        raise NotImplementedError

    def corpus_identity(self, corpus: Mapping):
        """What identifies the files a corpus is read from (None: its configuration alone makes it)."""
        return None

    def pool_identity(self, data: Mapping):
        """What identifies the files the training pool is read from (None: its configuration alone makes it)."""
        return None

    def corpus_missing(self, corpus: Mapping) -> str | None:
        """The corpus's files that are absent and what to do (None: all there)."""
        return None

    def pool_missing(self, data: Mapping) -> str | None:
        """The training pool's files that are absent and what to do (None: all there)."""
        return None

    def corpus_files(self, corpus: Mapping) -> list[Path]:
        """The files a corpus is read from (none for a source that makes its data)."""
        return []

    def corpus_datasets(self, corpus: Mapping) -> list[tuple[str, tuple[str, ...]]]:
        """The ir_datasets datasets (id, parts) a corpus is read through: what ``leakexp fetch`` can download."""
        return []

    def pool_datasets(self, data: Mapping) -> list[tuple[str, tuple[str, ...]]]:
        """The ir_datasets datasets (id, parts) the training pool is read through."""
        return []

    def pool_files(self, data: Mapping) -> list[Path]:
        """The files the training pool is read from."""
        return []


class ToySource(Source):
    """The toy world: its files are what the ``toy`` stage generated from ``data.*``, so its keys need no file."""

    kind = "toy"
    made_by = "toy"

    def planted_leaks(self, made: Path) -> pd.DataFrame:
        import pandas as pd

        return pd.read_csv(Path(made) / "truth" / "leaks.tsv", sep="\t", dtype=str)

    def pool_queries(self, data: Mapping) -> tuple[int, str] | None:
        per = data.get("queries_per_source")
        return (len(SOURCES) * per, f"{len(SOURCES)} x data.queries_per_source={per}") if per else None

    def query_counts(self, data: Mapping) -> dict[str, int] | None:
        """The world's queries per source from its settings: planning generates nothing."""
        per = data.get("queries_per_source")
        return {s: int(per) for s in SOURCES} if per else None

    def collection(self, corpus: Mapping, data: Mapping, toy_dir: Path | None = None) -> Collection:
        if data["kind"] != "toy" or toy_dir is None:
            raise ValueError(f"corpus={corpus['name']} is a toy-world corpus but data={data['name']}; use data=toy")
        d = Path(toy_dir) / corpus["collection"]
        return load_local_collection(corpus["name"], topics=d / "topics.txt", qrels=d / "qrels.txt",
                                     docs=d / "docs.jsonl", variants=d / "variants.tsv")

    def pool(self, data: Mapping, toy_dir: Path | None = None) -> TrainPool:
        d = Path(toy_dir) / "train"
        return load_local_train_pool(msmarco=d / "msmarco.queries.tsv", orcas=d / "orcas.queries.tsv",
                                     msmarco_qrels=d / "msmarco.qrels.txt", orcas_qrels=d / "orcas.qrels.txt",
                                     docs=d / "docs.jsonl", name=data["name"])


class IrdsSource(Source):
    """ir_datasets: the files it reads are identified by size and time (archives) or content (queries, qrels)."""

    kind = "irds"

    def collection(self, corpus: Mapping, data: Mapping, toy_dir: Path | None = None) -> Collection:
        from leakexp.data.irds import load_irds_collection

        return load_irds_collection(corpus["name"], corpus["irds_id"], variants=corpus.get("variants"))

    def pool(self, data: Mapping, toy_dir: Path | None = None) -> TrainPool:
        from leakexp.data.irds import load_irds_train_pool

        return load_irds_train_pool(data["msmarco"], data["orcas"], name=data["name"])

    def raw_trec(self, corpus: Mapping):
        from leakexp.data.irds_files import trec_files

        return trec_files(str(corpus["irds_id"]))

    def query_counts(self, data: Mapping) -> dict[str, int] | None:
        from leakexp.data.irds import load_dataset

        return {s: int(load_dataset(data[s]).queries_count()) for s in SOURCES}

    def corpus_datasets(self, corpus: Mapping) -> list[tuple[str, tuple[str, ...]]]:
        from leakexp.data.irds import collection_requests

        return list(collection_requests(corpus["irds_id"]))

    def pool_datasets(self, data: Mapping) -> list[tuple[str, tuple[str, ...]]]:
        from leakexp.data.irds import pool_requests

        return list(pool_requests(data["msmarco"], data["orcas"]))

    @staticmethod
    def _fingerprint(requests) -> list[dict]:
        from leakexp.data.irds_files import fingerprint

        return [fingerprint(dataset_id, parts) for dataset_id, parts in requests]

    def corpus_identity(self, corpus: Mapping):
        variants = corpus.get("variants")
        return {"irds": self._fingerprint(self.corpus_datasets(corpus)),
                "variants": files_identity(Path(str(variants))) if variants and Path(str(variants)).exists()
                else None}

    def pool_identity(self, data: Mapping):
        return self._fingerprint(self.pool_datasets(data))

    def corpus_missing(self, corpus: Mapping) -> str | None:
        from leakexp.data.irds_files import missing_message

        return missing_message(self.corpus_datasets(corpus))

    def pool_missing(self, data: Mapping) -> str | None:
        from leakexp.data.irds_files import missing_message

        return missing_message(self.pool_datasets(data))

    @staticmethod
    def _paths(requests) -> list[Path]:
        from leakexp.data.irds_files import dataset_files

        return [Path(f.path) for dataset_id, parts in requests for fs in dataset_files(dataset_id, parts).values()
                for f in fs]

    def corpus_files(self, corpus: Mapping) -> list[Path]:
        variants = [Path(str(corpus["variants"]))] if corpus.get("variants") else []
        return self._paths(self.corpus_datasets(corpus)) + variants

    def pool_files(self, data: Mapping) -> list[Path]:
        return self._paths(self.pool_datasets(data))


POOL_KEYS = ("msmarco", "orcas", "msmarco_qrels", "orcas_qrels", "docs")


class LocalSource(Source):
    """Local files: identified by content (small files) or size, time and their first and last MiB."""

    kind = "local"
    pool_settings = POOL_KEYS
    corpus_settings = ("variants", "topics", "qrels", "docs")

    def collection(self, corpus: Mapping, data: Mapping, toy_dir: Path | None = None) -> Collection:
        return load_local_collection(
            corpus["name"], topics=Path(corpus["topics"]), qrels=Path(corpus["qrels"]), docs=Path(corpus["docs"]),
            variants=Path(corpus["variants"]) if corpus.get("variants") else None)

    def pool(self, data: Mapping, toy_dir: Path | None = None) -> TrainPool:
        self._check_keys(data)
        return load_local_train_pool(**{k: Path(data[k]) for k in POOL_KEYS}, name=data["name"])

    @staticmethod
    def _check_keys(data: Mapping) -> None:
        if data.get("qrels") is not None and data.get("msmarco_qrels") is None:
            raise ValueError("data.qrels is replaced by data.msmarco_qrels and data.orcas_qrels: judgments are read "
                             "per source, because one query id may name different queries in MS MARCO and ORCAS")

    def corpus_files(self, corpus: Mapping) -> list[Path]:
        keys = ["topics", "qrels", "docs"] + (["variants"] if corpus.get("variants") else [])
        return [Path(corpus[k]) for k in keys]

    def pool_files(self, data: Mapping) -> list[Path]:
        self._check_keys(data)
        return [Path(data[k]) for k in POOL_KEYS]

    def corpus_identity(self, corpus: Mapping):
        return files_identity(*self.corpus_files(corpus))

    def pool_identity(self, data: Mapping):
        return files_identity(*self.pool_files(data))


DATA_SOURCES: dict[str, Source] = {s.kind: s for s in (ToySource(), IrdsSource(), LocalSource())}


def source_of(kind: str, setting: str = "data.kind") -> Source:
    """The source of a ``kind`` (the value of ``setting``: ``data.kind``, ``corpus.kind``): toy, irds or local."""
    try:
        return DATA_SOURCES[str(kind)]
    except KeyError:
        raise ValueError(f"{setting}={kind!r} is unknown; use toy, irds or local") from None
