"""Collections and training pools through ir_datasets (the paper's data sources)."""

from __future__ import annotations

import logging
from typing import Callable, Iterator, TypeVar

import pandas as pd

from leakexp.data.doctext import document_text
from leakexp.data.files import DataFormatError, DataUnavailable, read_variants
from leakexp.data.types import Collection, Topic, TrainPool

T = TypeVar("T")
log = logging.getLogger(__name__)

HOW_TO = {
    "disks45": "TREC Disks 4 & 5 are licensed by NIST: obtain them and place the files as "
    "https://ir-datasets.com/disks45.html describes (under $IR_DATASETS_HOME/disks45/).",
    "nyt": "The New York Times Annotated Corpus is licensed by the LDC (LDC2008T19): place nyt_corpus_LDC2008T19.tgz "
    "as https://ir-datasets.com/nyt.html describes (under $IR_DATASETS_HOME/nyt/).",
    "wapo": "The Washington Post v2 collection is licensed by TREC/NIST: place the archive as "
    "https://ir-datasets.com/wapo.html describes (under $IR_DATASETS_HOME/wapo/).",
    "msmarco-document": "MS MARCO documents are a public download that needs network access: run "
    "`ir_datasets export msmarco-document/train docs` once on a connected machine and copy "
    "$IR_DATASETS_HOME/msmarco-document/ here.",
}


def _how_to(dataset_id: str) -> str:
    return HOW_TO.get(dataset_id.split("/")[0], "See https://ir-datasets.com/ for how to provide it; files go "
                      "under $IR_DATASETS_HOME (default ~/.ir_datasets).")


def _guard(dataset_id: str, what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except DataUnavailable:
        raise
    except Exception as exc:  # ir_datasets raises IOError, URLError, ... for missing or licensed data
        raise DataUnavailable(
            f"cannot read the {what} of ir_datasets '{dataset_id}' ({type(exc).__name__}: {exc}). "
            f"{_how_to(dataset_id)}"
        ) from exc


def load_dataset(dataset_id: str):
    import ir_datasets

    try:
        return ir_datasets.load(dataset_id)
    except KeyError:
        raise DataUnavailable(
            f"ir_datasets has no dataset '{dataset_id}'; check the id at https://ir-datasets.com/ "
            "(or register a local one with ir_datasets.registry.register)"
        ) from None


class IrdsDocStore:
    """DocStore over an ir_datasets docstore; text = what the collection holds (leakexp.data.doctext)."""

    def __init__(self, dataset_id: str):
        self.dataset_id = dataset_id
        self._ds = load_dataset(dataset_id)
        self._store = None

    def __getitem__(self, docno: str) -> str:
        if self._store is None:
            self._store = _guard(self.dataset_id, "documents", self._ds.docs_store)
        return _guard(self.dataset_id, "documents", lambda: document_text(self._store.get(docno)))

    def __iter__(self) -> Iterator[tuple[str, str]]:
        it = iter(_guard(self.dataset_id, "documents", self._ds.docs_iter))
        while True:  # errors surface lazily, on the first read
            doc = _guard(self.dataset_id, "documents", lambda: next(it, None))
            if doc is None:
                return
            yield doc.doc_id, document_text(doc)

    def __len__(self) -> int:
        return _guard(self.dataset_id, "documents", self._ds.docs_count)


def _topic(q, variants: dict[str, list[str]]) -> Topic:
    title = getattr(q, "title", None) or getattr(q, "text", "")
    return Topic(
        qid=q.query_id,
        title=" ".join(title.split()),
        description=" ".join(getattr(q, "description", "").split()),
        narrative=" ".join(getattr(q, "narrative", "").split()),
        variants=tuple(variants.get(q.query_id, ())),
    )


def load_irds_collection(name: str, dataset_id: str, *, variants: str | None = None) -> Collection:
    """A test collection from ir_datasets; query variants come from a separate TSV (not in ir_datasets)."""
    ds = load_dataset(dataset_id)
    variant_map = read_variants(variants) if variants else {}
    topics: dict[str, Topic] = {}
    for t in (_topic(q, variant_map) for q in _guard(dataset_id, "topics", lambda: list(ds.queries_iter()))):
        if t.qid in topics:
            raise DataFormatError(f"ir_datasets '{dataset_id}': topic {t.qid} occurs twice; topic ids must be unique")
        topics[t.qid] = t
    untitled = [t.qid for t in topics.values() if not t.title]
    if untitled:  # the title is the query: such a topic would score 0 on every measure
        raise DataFormatError(f"ir_datasets '{dataset_id}': topic {untitled[0]} has an empty title ({len(untitled)} of "
                              f"{len(topics)} topics); use a dataset whose topics have titles")
    qrels = pd.DataFrame(
        [(q.query_id, q.doc_id, int(q.relevance)) for q in _guard(dataset_id, "qrels", lambda: list(ds.qrels_iter()))],
        columns=["qid", "docno", "label"],
    )
    return Collection(name, topics, qrels, IrdsDocStore(dataset_id))


def load_irds_train_pool(msmarco_id: str, orcas_id: str, *, name: str = "train") -> TrainPool:
    """MS MARCO + ORCAS training queries with their relevant documents (label >= 1), keyed by (source, qid)."""
    frames, qrels = [], []
    for source, dataset_id in (("msmarco", msmarco_id), ("orcas", orcas_id)):
        ds = load_dataset(dataset_id)
        q = pd.DataFrame(
            [(x.query_id, x.text) for x in _guard(dataset_id, "queries", lambda: list(ds.queries_iter()))],
            columns=["qid", "text"],
        )
        dup = q.duplicated("qid", keep="first")
        if dup.any():
            first = q.qid[dup].iloc[0]
            if q[q.qid.isin(set(q.qid[dup]))].drop_duplicates().qid.duplicated().any():
                raise DataFormatError(f"ir_datasets '{dataset_id}': query id {first!r} occurs with different texts; "
                                      "query ids must be unique within a source")
            log.warning("ir_datasets '%s': %d repeated identical queries dropped", dataset_id, int(dup.sum()))
            q = q[~dup].reset_index(drop=True)
        q["source"] = source
        frames.append(q)
        rel = pd.DataFrame(
            [(x.query_id, x.doc_id) for x in _guard(dataset_id, "qrels", lambda: list(ds.qrels_iter()))
             if int(x.relevance) >= 1],
            columns=["qid", "docno"],
        )
        qrels.append(rel.drop_duplicates().assign(source=source)[["source", "qid", "docno"]])
    return TrainPool(
        pd.concat(frames, ignore_index=True),
        pd.concat(qrels, ignore_index=True),
        IrdsDocStore(msmarco_id),
        name=name,
    )
