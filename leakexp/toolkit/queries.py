"""The two sides of a train/test pair as query sets: queries (their title, description and variant texts) and
their judgments, read from ir_datasets ids or files (TSV ``qid<TAB>text``, TREC topics, TREC qrels), or taken from
a training pool or test collections."""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np

from leakexp.data.files import (DataFormatError, DataUnavailable, read_qrels, read_trec_topics, read_tsv_pairs,
                                read_variants)
from leakexp.data.irds import _guard, load_dataset

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd
    from leakexp.data.types import Collection, TrainPool


log = logging.getLogger(__name__)


FIELDS = ("title", "description", "variant")


TEXT_COLUMNS = ["source", "qid", "field", "variant_index", "text"]


QREL_COLUMNS = ["source", "qid", "docno", "label"]


FILE_SUFFIXES = {".gz", ".tsv", ".txt", ".trec", ".xml", ".qrels", ".topics", ".jsonl", ".csv"}


def no_qrels() -> pd.DataFrame:
    """An empty qrels table (a side without judgments)."""
    import pandas as pd

    return pd.DataFrame(columns=QREL_COLUMNS)


@dataclass
class QuerySide:
    """One side of an audit: the texts to compare (one row per query field) and the qrels, by source.

    A query is identified by (source, qid): two sources may use the same qid. A plain query (TSV line,
    ir_datasets query with only a text) has its text as ``title``, as leakexp's ``Topic`` does.
    """

    texts: pd.DataFrame  # source, qid, field, variant_index, text
    qrels: pd.DataFrame = field(default_factory=no_qrels)
    sources: list[str] = field(default_factory=list)

    @cached_property
    def queries(self) -> pd.DataFrame:
        """One row per query (source, qid, text = its first compared text), in input order."""
        return self.texts.drop_duplicates(["source", "qid"])[["source", "qid", "text"]].reset_index(drop=True)

    @cached_property
    def owner(self) -> np.ndarray:
        """For every text row, the index of its query in ``queries``."""
        import pandas as pd

        index = pd.MultiIndex.from_frame(self.queries[["source", "qid"]])
        return index.get_indexer(pd.MultiIndex.from_frame(self.texts[["source", "qid"]])).astype(np.int64)


def _side(texts: list[tuple], qrels: list[pd.DataFrame], sources: list[str]) -> QuerySide:
    import pandas as pd

    t = pd.DataFrame(texts, columns=TEXT_COLUMNS)
    t["variant_index"] = t["variant_index"].astype(np.int64)
    q = pd.concat(qrels, ignore_index=True) if qrels else pd.DataFrame(columns=QREL_COLUMNS)
    q = q[QREL_COLUMNS].astype({"source": str, "qid": str, "docno": str}).reset_index(drop=True)
    q["label"] = q["label"].astype(np.int64)
    return QuerySide(t, q, sources)


def _topic_rows(source: str, qid: str, title: str, description: str, variants: Sequence[str],
                fields: Sequence[str]) -> list[tuple]:
    rows = []
    for f in fields:
        if f == "title" and title:
            rows.append((source, qid, "title", -1, title))
        elif f == "description" and description:
            rows.append((source, qid, "description", -1, description))
        elif f == "variant":
            rows.extend((source, qid, "variant", i, v) for i, v in enumerate(variants) if v)
    return rows


def _check_fields(fields: Sequence[str]) -> list[str]:
    bad = [f for f in fields if f not in FIELDS]
    if bad or not fields:
        raise ValueError(f"fields {list(fields)!r}: use one or more of {', '.join(FIELDS)} (a plain query's text is its title)")
    return list(dict.fromkeys(fields))


def source_name(spec: str) -> tuple[str, str]:
    """``NAME=TARGET`` or ``TARGET`` -> (name, target); a file's name is its stem without query suffixes."""
    name, sep, target = spec.partition("=")
    if sep and name and "/" not in name and not Path(spec).exists():
        return name, target
    target = spec
    p = Path(target)
    if p.exists():
        stem = p.name
        for suffix in (".gz", ".tsv", ".txt", ".trec", ".xml", ".run", ".res", ".queries", ".topics", ".qrels", ".qrel"):
            stem = stem.removesuffix(suffix)
        return stem or p.name, target
    return target, target


def _read_query_file(path: Path, source: str, fields: Sequence[str], variants: Mapping[str, list[str]]) -> list[tuple]:
    with (gzip.open(path, "rt", encoding="utf-8", errors="replace") if path.suffix == ".gz"
          else open(path, encoding="utf-8", errors="replace")) as f:
        head = f.read(4096)
    rows = []
    if "<top>" in head.lower():
        for t in read_trec_topics(path):
            rows += _topic_rows(source, t.qid, t.title, t.description, variants.get(t.qid, ()), fields)
    else:
        for qid, text in read_tsv_pairs(path, "queries"):
            rows += _topic_rows(source, qid, text, "", variants.get(qid, ()), fields)
    return rows


def _irds_source(dataset_id: str, source: str, fields: Sequence[str], variants: Mapping[str, list[str]]):
    import pandas as pd

    ds = load_dataset(dataset_id)
    if not ds.has_queries():
        raise DataUnavailable(f"ir_datasets '{dataset_id}' has no queries; give a dataset id with queries "
                              "(e.g. msmarco-passage/train) or a local queries file")

    def read_queries() -> list[tuple]:
        rows = []
        for q in ds.queries_iter():
            title = getattr(q, "title", None) or getattr(q, "text", "") or ""
            rows += _topic_rows(source, str(q.query_id), " ".join(title.split()),
                                " ".join((getattr(q, "description", "") or "").split()),
                                variants.get(str(q.query_id), ()), fields)
        return rows

    rows = _guard(dataset_id, "queries", read_queries)
    qrels = pd.DataFrame(columns=QREL_COLUMNS)
    if ds.has_qrels():
        qrels = pd.DataFrame(
            _guard(dataset_id, "qrels", lambda: [(source, str(x.query_id), str(x.doc_id), int(x.relevance))
                                                  for x in ds.qrels_iter()]),
            columns=QREL_COLUMNS)
    return rows, qrels


def read_qrels_file(path: str | Path, option: str) -> pd.DataFrame:
    """TREC qrels of a command-line option; an empty file is an error that names the option and the file."""
    q = read_qrels(Path(path))
    if q.empty:
        raise DataFormatError(f"{option} {path}: no qrels lines (an empty file?); give TREC qrels "
                              "'qid 0 docno label', one judgment per line")
    return q


def load_side(
    specs: Sequence[str] = (),
    qrels: Sequence[str] = (),
    *,
    fields: Sequence[str] = ("title",),
    variants: Sequence[str] = (),
    role: str = "test",
) -> QuerySide:
    """A side from ir_datasets ids and/or local files.

    ``specs``: ir_datasets ids (queries and qrels) or query files (TSV ``qid<TAB>text`` or TREC topics),
    each optionally ``NAME=...`` to name the source. ``qrels``: TREC qrels files, one per local query file
    (paired in order) or one for all of them; with no ``specs`` at all they form a qrels-only side (label
    overlap alone). ``variants``: TSV ``qid<TAB>variant`` files (the ``variant`` field).
    """
    import pandas as pd

    fields = _check_fields(fields)
    variant_map: dict[str, list[str]] = {}
    for v in variants:
        for qid, texts in read_variants(Path(v)).items():
            variant_map.setdefault(qid, []).extend(texts)
    texts: list[tuple] = []
    qrel_frames: list[pd.DataFrame] = []
    sources: list[str] = []
    local: list[str] = []
    for spec in specs:
        name, target = source_name(spec)
        if name in sources:
            raise ValueError(f"--{role}: two sources are named {name!r}; name them NAME=PATH")
        sources.append(name)
        if Path(target).exists():
            texts += _read_query_file(Path(target), name, fields, variant_map)
            local.append(name)
        elif Path(target).suffix in FILE_SUFFIXES or target.startswith(("/", ".", "~")):
            raise FileNotFoundError(f"--{role} {target}: no such file")
        else:
            rows, q = _irds_source(target, name, fields, variant_map)
            texts += rows
            qrel_frames.append(q)
    if not specs:  # qrels-only: one source per qrels file
        for path in qrels:
            name, target = source_name(path)
            q = read_qrels_file(target, f"--{role}-qrels")
            q.insert(0, "source", name)
            qrel_frames.append(q)
            sources.append(name)
        return _side([], qrel_frames, sources)
    if qrels and not local:
        raise ValueError(f"--{role}-qrels go with local query files; an ir_datasets id brings its own qrels")
    if qrels and len(qrels) not in (1, len(local)):
        raise ValueError(f"--{role}-qrels: give one qrels file per local query file ({len(local)}) or one for all; "
                         f"got {len(qrels)}")
    if qrels:
        frame = pd.DataFrame(texts, columns=TEXT_COLUMNS)
        for i, name in enumerate(local):
            q = read_qrels_file(qrels[0 if len(qrels) == 1 else i], f"--{role}-qrels")
            if len(qrels) == 1 and len(local) > 1:  # a shared file: each source takes the qids it has
                q = q[q.qid.isin(set(frame.qid[frame.source == name]))]
            q.insert(0, "source", name)
            qrel_frames.append(q)
    side = _side(texts, qrel_frames, sources)
    dup = side.texts[side.texts.duplicated(["source", "qid", "field", "variant_index"])]
    if len(dup):
        raise DataFormatError(f"--{role} {dup.iloc[0].source}: query id {dup.iloc[0].qid!r} appears twice; "
                              "query ids must be unique within a source")
    if side.texts.empty:
        raise ValueError(f"--{role}: no query text in fields {fields} ({', '.join(specs)}); check --fields")
    return side


def side_from_pool(pool: "TrainPool") -> QuerySide:
    """The training side of a pipeline's pool (every source's queries; relevant docs have label 1)."""
    q = pool.queries
    texts = list(zip(q.source, q.qid.astype(str), ["title"] * len(q), [-1] * len(q), q.text))
    rel = pool.qrels.astype({"qid": str})[["source", "qid", "docno"]].copy()  # keyed by (source, qid)
    rel["label"] = 1
    return _side(texts, [rel], list(dict.fromkeys(q.source)))


def side_from_collections(collections: Iterable["Collection"], fields: Sequence[str] = ("title",)) -> QuerySide:
    """The test side of pipeline collections: one source per collection, topics in the given fields."""
    fields = _check_fields(fields)
    texts, qrels, sources = [], [], []
    for c in collections:
        sources.append(c.name)
        for t in c.topics.values():
            texts += _topic_rows(c.name, t.qid, t.title, t.description, t.variants, fields)
        q = c.qrels[["qid", "docno", "label"]].copy()
        q.insert(0, "source", c.name)
        qrels.append(q)
    return _side(texts, qrels, sources)
