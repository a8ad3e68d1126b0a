"""Readers for local files: TREC topics, qrels, query variants, documents, training queries."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd

from leakexp.data.types import Topic


class DataFormatError(ValueError):
    """A data file that cannot be parsed; the message names the file and line."""


def _open_text(path: Path):
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


_TOP = re.compile(r"<top>(.*?)</top>", re.S | re.I)
_TAG = re.compile(r"<(num|title|desc|narr)>", re.I)
_PREFIX = {
    "num": re.compile(r"^\s*number:\s*", re.I),
    "desc": re.compile(r"^\s*description:\s*", re.I),
    "narr": re.compile(r"^\s*narrative:\s*", re.I),
    "title": re.compile(r"^\s*(topic:\s*)?", re.I),
}


def read_trec_topics(path: str | Path) -> list[Topic]:
    """Parse a TREC topic file (``<top><num> Number: …<title>…<desc> Description: …<narr>…</top>``).

    Tolerates the real files' irregularities: unclosed tags, ``Number:`` prefixes, line breaks inside
    fields, and SGML entities left as text.
    """
    path = Path(path)
    with _open_text(path) as f:
        text = f.read()
    topics = []
    for block in _TOP.findall(text):
        fields: dict[str, str] = {}
        parts = _TAG.split(block)
        for tag, value in zip(parts[1::2], parts[2::2]):
            tag = tag.lower()
            value = re.sub(r"</\w+>", " ", value)
            value = _PREFIX[tag].sub("", value.strip())
            fields[tag] = " ".join(value.split())
        if not fields.get("num"):
            raise DataFormatError(f"{path}: a <top> block has no <num>")
        topics.append(
            Topic(
                qid=fields["num"].strip(),
                title=fields.get("title", ""),
                description=fields.get("desc", ""),
                narrative=fields.get("narr", ""),
            )
        )
    if not topics:
        raise DataFormatError(f"{path}: no <top> blocks found; is this a TREC topic file?")
    return topics


def read_topic_ids(path: str | Path) -> list[str]:
    """Topic ids from a TREC topic file, or from a plain text file with one id per line."""
    path = Path(path)
    with _open_text(path) as f:
        head = f.read(4096)
    if "<top>" in head.lower():
        return [t.qid for t in read_trec_topics(path)]
    with _open_text(path) as f:
        return [line.split()[0] for line in f if line.strip()]


def read_qrels(path: str | Path) -> pd.DataFrame:
    """TREC qrels ``qid iter docno label`` -> frame (qid, docno, label)."""
    path = Path(path)
    rows = []
    with _open_text(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 4:
                raise DataFormatError(f"{path}:{n}: expected 'qid 0 docno label', got {line.strip()!r}")
            try:
                rows.append((parts[0], parts[2], int(parts[3])))
            except ValueError:
                raise DataFormatError(f"{path}:{n}: label {parts[3]!r} is not an integer") from None
    return pd.DataFrame(rows, columns=["qid", "docno", "label"])


def write_qrels(path: str | Path, qrels: pd.DataFrame) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in qrels.itertuples(index=False):
            f.write(f"{r.qid} 0 {r.docno} {int(r.label)}\n")


def read_tsv_pairs(path: str | Path, what: str = "rows") -> list[tuple[str, str]]:
    """Two-column TSV ``id<TAB>text`` (a header line ``qid``/``docno`` is skipped)."""
    path = Path(path)
    rows = []
    with _open_text(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            parts = line.split("\t", 1)
            if len(parts) != 2:
                raise DataFormatError(f"{path}:{n}: expected '<id><TAB><text>' for {what}, got {line!r}")
            if n == 1 and parts[0].lower() in ("qid", "docno", "id", "query_id", "doc_id"):
                continue
            rows.append((parts[0].strip(), parts[1].strip()))
    return rows


def read_variants(path: str | Path) -> dict[str, list[str]]:
    """Query variants TSV ``qid<TAB>variant`` -> qid -> variants, in file order."""
    out: dict[str, list[str]] = {}
    for qid, text in read_tsv_pairs(path, "query variants"):
        out.setdefault(qid, []).append(text)
    return out


def read_queries(path: str | Path) -> pd.DataFrame:
    """Training queries TSV ``qid<TAB>text`` -> frame (qid, text)."""
    return pd.DataFrame(read_tsv_pairs(path, "queries"), columns=["qid", "text"])


def iter_docs(path: str | Path) -> Iterator[tuple[str, str]]:
    """Documents from JSONL (``{"docno", "text"}``) or TSV (``docno<TAB>text``)."""
    path = Path(path)
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl") or name.endswith(".json"):
        with _open_text(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    yield str(d["docno"]), d["text"]
                except (ValueError, KeyError) as exc:
                    raise DataFormatError(f"{path}:{n}: expected a JSON object with docno and text ({exc})")
    else:
        yield from read_tsv_pairs(path, "documents")


def write_docs_jsonl(path: str | Path, docs: Iterable[tuple[str, str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for docno, text in docs:
            f.write(json.dumps({"docno": docno, "text": text}) + "\n")


def write_trec_topics(path: str | Path, topics: Iterable[Topic]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for t in topics:
            f.write(
                f"<top>\n\n<num> Number: {t.qid}\n<title> {t.title}\n\n<desc> Description:\n{t.description}\n\n"
                f"<narr> Narrative:\n{t.narrative}\n\n</top>\n\n"
            )
