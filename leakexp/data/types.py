"""Core data types: test topics, test collections, and the training pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Protocol

import pandas as pd

TOPIC_FIELDS = ("title", "description", "variant")
SOURCES = ("msmarco", "orcas")


@dataclass(frozen=True)
class Topic:
    """A TREC topic with its expert query variants (Benham & Culpepper)."""

    qid: str
    title: str
    description: str = ""
    narrative: str = ""
    variants: tuple[str, ...] = ()

    def text(self, field_name: str = "title") -> str:
        if field_name not in ("title", "description", "narrative"):
            raise ValueError(f"unknown topic field {field_name!r}; use title, description or narrative")
        return getattr(self, field_name)


class DocStore(Protocol):
    """docno -> text lookup plus iteration, backed by a dict or by an ir_datasets docstore."""

    def __getitem__(self, docno: str) -> str: ...
    def __iter__(self) -> Iterator[tuple[str, str]]: ...
    def __len__(self) -> int: ...


class DictDocStore:
    """A DocStore over an in-memory mapping."""

    def __init__(self, docs: Mapping[str, str]):
        self._docs = dict(docs)

    def __getitem__(self, docno: str) -> str:
        return self._docs[docno]

    def __contains__(self, docno: str) -> bool:
        return docno in self._docs

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._docs.items())

    def __len__(self) -> int:
        return len(self._docs)


@dataclass
class Collection:
    """A test scenario: topics, graded qrels (qid, docno, label) and the documents they judge."""

    name: str
    topics: dict[str, Topic]
    qrels: pd.DataFrame
    docs: DocStore

    def topics_frame(self, field_name: str = "title") -> pd.DataFrame:
        """PyTerrier topics frame (qid, query) for one topic field."""
        return pd.DataFrame(
            [(t.qid, t.text(field_name)) for t in self.topics.values()], columns=["qid", "query"]
        )


@dataclass
class TrainPool:
    """Training queries from both sources with their relevant documents and the training documents."""

    queries: pd.DataFrame  # qid, text, source
    qrels: pd.DataFrame  # qid, docno
    docs: DocStore
    name: str = "train"
    extra: dict = field(default_factory=dict)

    def source_queries(self, source: str) -> pd.DataFrame:
        return self.queries[self.queries.source == source]
