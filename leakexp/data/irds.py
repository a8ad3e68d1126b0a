"""Collections and training pools through ir_datasets (the paper's data sources)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Callable, Iterator, TypeVar, TYPE_CHECKING

from leakexp.data.doctext import document_text
from leakexp.data.files import DataFormatError, DataUnavailable, file_identity, read_variants
from leakexp.data.irds_files import dataset_files, home, missing_message, shown
from leakexp.data.types import Collection, Topic, TrainPool
from leakexp.runner.store import atomic_write_json

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


T = TypeVar("T")
log = logging.getLogger(__name__)

PARTS = {"documents": "docs", "topics": "queries", "queries": "queries", "qrels": "qrels"}


def _package(exc: ImportError) -> str | None:
    """The Python package an ImportError asks for (ir_datasets' lazy_libs wrap ModuleNotFoundError, e.g. unlzw3 in
    ir_datasets/lazy_libs.py:138-145)."""
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, ImportError) and e.name:
            return e.name.split(".")[0]
    match = re.search(r"requires (\w+)", str(exc))
    return match.group(1) if match else None


def _guard(dataset_id: str, what: str, fn: Callable[[], T]) -> T:
    """``fn()``, with ir_datasets' errors told as what to do: a missing package names the package; missing files are
    named with their paths under $IR_DATASETS_HOME and whether they are public or licensed."""
    try:
        return fn()
    except DataUnavailable:
        raise
    except ImportError as exc:
        pkg = _package(exc)
        raise DataUnavailable(
            f"reading the {what} of ir_datasets '{dataset_id}' needs the Python package {pkg}, which is not "
            f"installed: pip install {pkg} ({type(exc).__name__}: {exc})" if pkg else
            f"reading the {what} of ir_datasets '{dataset_id}' needs a Python package that is not installed "
            f"({type(exc).__name__}: {exc}); install it with pip") from exc
    except Exception as exc:  # ir_datasets raises IOError, URLError, ... for missing or licensed data
        absent = missing_message([(dataset_id, (PARTS.get(what, "docs"),))])
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        if absent:
            raise DataUnavailable(f"cannot read the {what} of ir_datasets '{dataset_id}' ({detail}). {absent}") from exc
        files = ", ".join(str(f.path) for fs in dataset_files(dataset_id, (PARTS.get(what, "docs"),)).values()
                          for f in fs)
        raise DataUnavailable(
            f"cannot read the {what} of ir_datasets '{dataset_id}' ({detail})"
            + (f"; the files it reads are all there ({files})" if files else
               "; see https://ir-datasets.com/ for how to provide it (files go under $IR_DATASETS_HOME)")) from exc


def require_files(requests, *, what: str | None = None) -> None:
    """Every file ir_datasets reads for ``requests`` ((dataset id, parts) pairs) is there, before anything is read;
    else one error naming the absent ones and what to do for each."""
    absent = missing_message(requests)
    if absent:
        raise DataUnavailable(f"cannot read the {what} of {absent}" if what else absent)


def collection_requests(dataset_id: str) -> list:
    """What a test collection reads of ir_datasets: documents, topics and qrels."""
    return [(dataset_id, ("docs", "queries", "qrels"))]


def pool_requests(msmarco_id: str, orcas_id: str) -> list:
    """What the training pool reads: MS MARCO's documents, queries and qrels, and ORCAS's queries and qrels (its
    documents are MS MARCO's: the pool reads them through ``msmarco_id``)."""
    return [(msmarco_id, ("docs", "queries", "qrels")), (orcas_id, ("queries", "qrels"))]


# -- the docstore: built once, under a lock --------------------------------------------------------------------
DOWNLOAD_WAIT_NOTICE_S = 30.0
SIDECAR = "leakexp.json"  # in the docstore's folder: the identity of the files it was built from


def _lock_path(dataset_id: str) -> Path:
    """Next to the documents' archive, so every dataset id of one collection shares it (msmarco-document/train and
    /orcas); else one per dataset id in $IR_DATASETS_HOME."""
    docs = dataset_files(dataset_id, ("docs",))["docs"]
    if docs:
        return Path(f"{docs[0].path}.leakexp.lock")

    return home() / ".leakexp-locks" / (re.sub(r"[^\w.-]", "_", dataset_id) + ".lock")


def _counts(folder: Path) -> tuple[int, int]:
    """(entries, distinct document ids) of a PickleLz4FullStore: ``bin.pos`` holds one int64 per entry,
    ``idx.doc_id.meta`` '<key length> <distinct keys>' (ir_datasets/indices/numpy_sorted_index.py:29-42, 100-140)."""
    try:
        entries = (folder / "bin.pos").stat().st_size // 8
    except OSError:
        entries = 0
    try:
        ids = int((folder / "idx.doc_id.meta").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        ids = 0
    return entries, ids


def _same_file(recorded: dict | None, now: dict | None) -> bool:
    """One file by the identity fields both records have (a sidecar written before a field was added keeps
    matching the same file)."""
    if recorded is None or now is None:
        return recorded == now
    shared = recorded.keys() & now.keys()
    return bool(shared) and all(recorded[k] == now[k] for k in shared)


def _check_docstore(dataset_id: str, store, fresh: bool) -> None:
    """Refuse a damaged docstore, naming the folder to delete: one whose entries changed since leakexp built it, or
    (built before leakexp recorded it) one holding every document at least twice, as two workers building it at
    once leave it; also one built from other files than those there now. A sound one records what it was built
    from and its entry count. Duplicate ids of the source itself (a single build) are logged, not refused."""
    import json

    import ir_datasets


    folder = getattr(store, "path", None)
    if not isinstance(folder, (str, Path)) or not (Path(folder) / "bin.pos").exists():
        return  # another kind of docstore, or an empty collection
    folder = Path(folder)
    docs = dataset_files(dataset_id, ("docs",))["docs"]
    entries, ids = _counts(folder)
    built_from = {shown(f.path): file_identity(f.path) for f in docs}
    sidecar = folder / SIDECAR
    try:
        recorded = json.loads(sidecar.read_text()) if sidecar.exists() and not fresh else {}
    except (OSError, ValueError):
        recorded = {}
    expected = recorded.get("entries") if isinstance(recorded, dict) else None
    if (entries != expected) if isinstance(expected, int) else (not fresh and entries != ids and entries >= 2 * ids):
        source = ", ".join(str(f.path) for f in docs) or "its source files"
        raise DataUnavailable(
            f"the ir_datasets docstore {folder} of '{dataset_id}' is damaged: it holds {entries:,} entries for {ids:,} "
            f"distinct document ids" + (f" ({expected:,} entries when it was built)" if isinstance(expected, int) else
                                        " (built twice by parallel workers, or interrupted)")
            + f"; delete the folder (rm -r {folder}) and run again: it is rebuilt once from {source}")
    if entries != ids:
        log.warning("ir_datasets '%s': its documents hold %d entries for %d distinct document ids (ids repeated in "
                    "the collection itself)", dataset_id, entries, ids)
    if isinstance(recorded, dict) and recorded.get("built_from") is not None:
        changed = [p for p in {**recorded["built_from"], **built_from}
                   if not _same_file(recorded["built_from"].get(p), built_from.get(p))]
        if changed:
            changed = ", ".join(changed)
            raise DataUnavailable(
                f"the ir_datasets docstore {folder} of '{dataset_id}' was built from another version of {changed} "
                f"(size or modification time differ), and ir_datasets would go on reading the old documents from it; "
                f"delete the folder (rm -r {folder}) and run again: it is rebuilt once from the files there now")
        return
    if not fresh:
        log.info("ir_datasets docstore %s of '%s': %d documents; recording the files it reads (%s)", folder,
                 dataset_id, ids, ", ".join(built_from) or "none found")
    try:
        atomic_write_json(sidecar, {"built_from": built_from, "entries": entries, "documents": ids,
                                    "ir_datasets": ir_datasets.__version__})
    except OSError as exc:  # a read-only home: it is read as it is
        log.warning("cannot record what the docstore %s was built from (%s)", folder, exc)


def open_docstore(dataset_id: str, ds):
    """The dataset's docstore, built by one process only: ir_datasets checks whether it is built before it takes
    its own lock (indices/lz4_pickle.py:317-333, ``built()`` is ``len(lookup) > 0``), so two workers opening a
    fresh one both build it and every document is stored twice. Here the first worker builds it under a file lock
    while the others wait, then they read the finished store; a damaged one is refused (see ``_check_docstore``)."""
    import time

    from filelock import FileLock, Timeout

    require_files([(dataset_id, ("docs",))], what="documents")
    lock_path = _lock_path(dataset_id)
    lock, start = FileLock(str(lock_path)), time.time()
    while True:
        try:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            lock.acquire(timeout=DOWNLOAD_WAIT_NOTICE_S)
            break
        except Timeout:
            log.info("waiting for another worker to build the ir_datasets docstore of '%s' (%.0fs; lock %s)",
                     dataset_id, time.time() - start, lock_path)
        except OSError as exc:  # a read-only home: nothing can be built there, a built store is read unlocked
            log.warning("cannot lock %s (%s); reading the docstore of '%s' without a lock", lock_path, exc, dataset_id)
            lock = None
            break
    try:
        store = _guard(dataset_id, "documents", ds.docs_store)
        built = getattr(store, "built", None)
        fresh = callable(built) and not built()
        if fresh:
            log.info("building the ir_datasets docstore of '%s' (once; other workers wait for it)", dataset_id)
            _guard(dataset_id, "documents", store.build)
        _check_docstore(dataset_id, store, fresh)
    finally:
        if lock is not None:
            lock.release()
    return store


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

    def _open(self):
        if self._store is None:
            self._store = open_docstore(self.dataset_id, self._ds)
        return self._store

    def __getitem__(self, docno: str) -> str:
        store = self._open()
        return _guard(self.dataset_id, "documents", lambda: document_text(store.get(docno)))

    def __iter__(self) -> Iterator[tuple[str, str]]:
        self._open()  # built once before anything reads it (NYT and WaPo iterate their docstore)
        it = iter(_guard(self.dataset_id, "documents", self._ds.docs_iter))
        while True:  # errors surface lazily, on the first read
            doc = _guard(self.dataset_id, "documents", lambda: next(it, None))
            if doc is None:
                return
            yield doc.doc_id, document_text(doc)

    def __len__(self) -> int:
        self._open()  # ir_datasets counts the documents of a built docstore only
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
    import pandas as pd

    ds = load_dataset(dataset_id)
    require_files(collection_requests(dataset_id))
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
    import pandas as pd

    for dataset_id in (msmarco_id, orcas_id):
        load_dataset(dataset_id)  # an unknown id first
    require_files(pool_requests(msmarco_id, orcas_id))  # MS MARCO's documents, queries, qrels and ORCAS's: at once
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
