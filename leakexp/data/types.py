"""Core data types: test topics, test collections, and the training pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Protocol, TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
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
        import pandas as pd

        return pd.DataFrame(
            [(t.qid, t.text(field_name)) for t in self.topics.values()], columns=["qid", "query"]
        )


QUERY_KEY = ["source", "qid"]  # a training query is identified by its source and its id within that source


@dataclass
class TrainPool:
    """Training queries from both sources with their relevant documents and the training documents.

    MS MARCO and ORCAS number their queries independently, so one id may name two different queries:
    queries and judgments are keyed by (source, qid) everywhere.
    """

    queries: pd.DataFrame  # qid, text, source; (source, qid) unique
    qrels: pd.DataFrame  # source, qid, docno: the relevant documents of each query
    docs: DocStore
    name: str = "train"
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for frame, what, columns in ((self.queries, "queries", ("qid", "text", "source")),
                                     (self.qrels, "qrels", ("source", "qid", "docno"))):
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise ValueError(f"training pool {self.name}: {what} lack column(s) {', '.join(missing)}")
        dup = self.queries[self.queries.duplicated(QUERY_KEY, keep=False)]
        if len(dup):
            r = dup.iloc[0]
            raise ValueError(f"training pool {self.name}: query id {r.qid!r} occurs {int((dup.qid == r.qid).sum())} "
                             f"times in source {r.source}; (source, qid) must be unique")

    def source_queries(self, source: str) -> pd.DataFrame:
        return self.queries[self.queries.source == source]

    def locate(self, refs: pd.DataFrame) -> pd.DataFrame:
        """The pool queries that (train_qid, query) references (e.g. annotations, which carry no source) name.

        One output row per matching pool query, with ``source``, ``qid``, ``text`` and ``match``: ``exact`` (id
        and text), ``normalised`` (id, and text equal up to case and white space), ``id`` (the id exists in one
        source only), ``ambiguous`` (the id exists in several sources and no text matches: one row per
        source), ``missing`` (no pool query has the id; source, qid and text are empty).
        """
        import pandas as pd

        norm = lambda t: " ".join(str(t).casefold().split())  # noqa: E731
        by_id: dict[str, list[tuple[str, str]]] = {}
        for qid, text, source in zip(self.queries.qid, self.queries.text, self.queries.source):
            by_id.setdefault(str(qid), []).append((source, text))
        rows = []
        for ref in refs.itertuples(index=False):
            ident, query = str(ref.train_qid), ref.query
            found = by_id.get(ident, [])
            for kind, hits in (("exact", [h for h in found if h[1] == query]),
                               ("normalised", [h for h in found if norm(h[1]) == norm(query)]),
                               ("id", found if len(found) == 1 else []),
                               ("ambiguous", found),
                               ("missing", [("", "")])):
                if hits:
                    rows += [(*ref, source, ident if source else "", text, kind) for source, text in hits]
                    break
        return pd.DataFrame(rows, columns=[*refs.columns, "source", "qid", "text", "match"])
