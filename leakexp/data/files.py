"""Readers for local files: TREC topics, qrels, query variants, documents, training queries."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Iterable, Iterator, TYPE_CHECKING

from leakexp.data.types import Topic
from leakexp.runner.stage import DataUnavailable  # noqa: F401  (the data readers raise it; the runner's error)
from leakexp.runner.store import file_digest

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


class DataFormatError(ValueError):
    """A data file that cannot be parsed; the message names the file and line."""


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text without the line break) of a UTF-8 text file, gzipped or not.

    Invalid UTF-8 is an error that names the file, line and byte offset: decoding with replacement characters
    would change texts and ids without a word.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    offset = 0
    with opener(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # a leading byte-order mark is dropped
            except UnicodeDecodeError as exc:
                raise DataFormatError(
                    f"{path}:{n}: invalid UTF-8 at byte {offset + exc.start} "
                    f"({raw[exc.start:exc.start + 4]!r}); re-encode the file as UTF-8, e.g. "
                    f"`iconv -f latin1 -t utf-8 {path.name} > fixed-{path.name}`"
                ) from None
            offset += len(raw)
            yield n, line.rstrip("\r\n")


def _dedup(rows: Iterable[tuple[int, str, str]], path: Path, what: str, key: str) -> dict[str, str]:
    """id -> text of (line, id, text) rows; an id repeated with another text is an error, with the same text
    a warning that counts the dropped lines."""
    out: dict[str, str] = {}
    first: dict[str, int] = {}
    repeated = 0
    for n, ident, text in rows:
        if ident in out:
            if out[ident] != text:
                raise DataFormatError(
                    f"{path}:{n}: {key} {ident!r} is already on line {first[ident]} with another text; "
                    f"{what} need unique ids: rename or remove one of them"
                )
            repeated += 1
            continue
        out[ident], first[ident] = text, n
    if repeated:
        log.warning("%s: %d repeated line(s) of identical %s dropped", path, repeated, what)
    return out


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
    text = "\n".join(line for _, line in _lines(path))
    topics, untitled = [], []
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
        if not fields.get("title"):
            untitled.append(fields["num"].strip())
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
    if untitled:  # the title is the query of BM25 and the re-rankers: such a topic would score 0 everywhere
        raise DataFormatError(
            f"{path}: topic {untitled[0]} has no <title> ({len(untitled)} of {len(topics)} topics lack one: "
            f"{', '.join(untitled[:5])}{' ...' if len(untitled) > 5 else ''}); add the titles or remove these topics"
        )
    return topics


def read_topic_ids(path: str | Path) -> list[str]:
    """Topic ids from a TREC topic file, or from a plain text file with one id per line."""
    path = Path(path)
    lines = [line for _, line in _lines(path)]
    if any("<top>" in line.lower() for line in lines[:200]):
        return [t.qid for t in read_trec_topics(path)]
    return [line.split()[0] for line in lines if line.strip()]


def read_qrels(path: str | Path) -> pd.DataFrame:
    """TREC qrels ``qid iter docno label`` -> frame (qid, docno, label)."""
    import pandas as pd

    path = Path(path)
    rows = []
    for n, line in _lines(path):
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


def _tsv_rows(path: str | Path, what: str) -> Iterator[tuple[int, str, str]]:
    """(line, id, text) of a two-column TSV ``id<TAB>text`` (a header line ``qid``/``docno`` is skipped)."""
    path = Path(path)
    for n, line in _lines(path):
        if not line.strip():
            continue
        parts = line.split("\t", 1)
        if len(parts) != 2:
            raise DataFormatError(f"{path}:{n}: expected '<id><TAB><text>' for {what}, got {line!r}")
        if n == 1 and parts[0].lower() in ("qid", "docno", "id", "query_id", "doc_id"):
            continue
        yield n, parts[0].strip(), parts[1].strip()


def read_tsv_pairs(path: str | Path, what: str = "rows") -> list[tuple[str, str]]:
    """Two-column TSV ``id<TAB>text`` (a header line ``qid``/``docno`` is skipped)."""
    return [(ident, text) for _, ident, text in _tsv_rows(path, what)]


def read_variants(path: str | Path) -> dict[str, list[str]]:
    """Query variants TSV ``qid<TAB>variant`` -> qid -> variants, in file order."""
    out: dict[str, list[str]] = {}
    for qid, text in read_tsv_pairs(path, "query variants"):
        out.setdefault(qid, []).append(text)
    return out


def read_queries(path: str | Path) -> pd.DataFrame:
    """Training queries TSV ``qid<TAB>text`` -> frame (qid, text), one row per id.

    An id on two lines with different texts is an error (which query would its judgments belong to?); a
    repeated identical line is dropped with a warning that counts them.
    """
    import pandas as pd

    path = Path(path)
    queries = _dedup(_tsv_rows(path, "queries"), path, "queries", "query id")
    return pd.DataFrame(list(queries.items()), columns=["qid", "text"])


def _doc_rows(path: Path) -> Iterator[tuple[int, str, str]]:
    name = path.name.removesuffix(".gz")
    if name.endswith(".jsonl") or name.endswith(".json"):
        for n, line in _lines(path):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                docno, text = str(d["docno"]), d["text"]
            except (ValueError, KeyError, TypeError) as exc:
                raise DataFormatError(f"{path}:{n}: expected a JSON object with docno and text ({exc})") from None
            if not isinstance(text, str):
                raise DataFormatError(f"{path}:{n}: the text of docno {docno!r} is {type(text).__name__}, not a string")
            yield n, docno, text
    else:
        yield from _tsv_rows(path, "documents")


def iter_docs(path: str | Path) -> Iterator[tuple[str, str]]:
    """Documents from JSONL (``{"docno", "text"}``) or TSV (``docno<TAB>text``), as they are in the file."""
    for _, docno, text in _doc_rows(Path(path)):
        yield docno, text


def read_docs(path: str | Path) -> dict[str, str]:
    """docno -> text of a documents file; duplicate docnos and an empty file are errors (see :func:`_dedup`)."""
    path = Path(path)
    docs = _dedup(_doc_rows(path), path, "documents", "docno")
    if not docs:
        raise DataFormatError(f"{path}: no documents; give a JSONL file of {{\"docno\", \"text\"}} objects or a "
                              "TSV file of docno<TAB>text lines")
    return docs


def write_docs_jsonl(path: str | Path, docs: Iterable[tuple[str, str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for docno, text in docs:
            f.write(json.dumps({"docno": docno, "text": text}, ensure_ascii=False) + "\n")


def write_trec_topics(path: str | Path, topics: Iterable[Topic]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for t in topics:
            f.write(
                f"<top>\n\n<num> Number: {t.qid}\n<title> {t.title}\n\n<desc> Description:\n{t.description}\n\n"
                f"<narr> Narrative:\n{t.narrative}\n\n</top>\n\n"
            )


# -- the identity of a file outside the store ---------------------------------------------------------------
SMALL = 32 << 20  # files up to this size (topics, qrels, runs, annotations) are identified by their content
_DIGESTS: dict[tuple, str] = {}


def _digest(path: Path, st: os.stat_result) -> str:
    memo = (str(path), st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = file_digest(path)
    return _DIGESTS[memo]


def _ends(path: Path, size: int, span: int = 1 << 20) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        h.update(f.read(span))
        if size > 2 * span:
            f.seek(size - span)
        h.update(f.read())
    return h.hexdigest()


def file_identity(path: str | Path) -> dict | None:
    """What the key of an artifact records of a file it reads from outside the store (one identity for every such
    file: ir_datasets' archives, local data, annotations, runs, word vectors). A file up to :data:`SMALL` bytes is
    its size and content hash (a copy keeps its keys); a larger one its size, modification time and a hash of its
    first and last MiB (1 GB of GloVe is not read whole); a folder the count, total size and a hash of every file's
    relative path, size and mtime below it (symlinks followed). None if absent."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return None
    if path.is_dir():
        h, count, size = hashlib.sha256(), 0, 0
        for root, dirs, files in os.walk(path, followlinks=True):
            dirs.sort()
            for name in sorted(files):
                f = Path(root) / name
                try:
                    fs = f.stat()
                except OSError:
                    continue
                count, size = count + 1, size + fs.st_size
                h.update(f"{f.relative_to(path).as_posix()}\t{fs.st_size}\t{fs.st_mtime_ns}\n".encode())
        return {"folder": True, "files": count, "size": size, "listing": h.hexdigest()[:16]}
    if st.st_size <= SMALL:
        return {"size": st.st_size, "blake2b": _digest(path, st)}
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ends": _ends(path, st.st_size)}


def files_identity(*paths: str | Path) -> dict:
    """:func:`file_identity` of several files, by name (the keys name no machine's folders)."""
    return {Path(p).name: file_identity(p) for p in paths}
