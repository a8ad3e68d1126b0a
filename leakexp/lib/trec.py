"""TREC runs: reading a run file (plain or gzipped) into (qid, docno, score, rank 0-based), refusing duplicate
(topic, document) rows, and comparing two runs."""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

import pandas as pd

from leakexp.data.files import DataFormatError

log = logging.getLogger(__name__)

log = logging.getLogger(__name__)


def read_anserini_run(path: Path) -> pd.DataFrame:
    """A run as SearchCollection writes it (``qid Q0 docno rank score tag``), in its order, rank 0-based. A document
    twice for one topic is an error naming the file and line (its index holds the document twice)."""
    rows, first_line = [], {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        r = line.split()
        if not r:
            continue
        if (r[0], r[2]) in first_line:
            dups = _duplicate_rows(path)
            raise DataFormatError(f"{path}:{n}: document {r[2]} appears twice for topic {r[0]} (first at line "
                                  f"{first_line[(r[0], r[2])]}; {dups:,} duplicate (topic, document) rows in the "
                                  f"file): the index holds that document twice; rebuild it from a collection whose "
                                  f"document ids are unique")
        first_line[(r[0], r[2])] = n
        rows.append((r[0], r[2], float(r[4]), int(r[3]) - 1))
    run = pd.DataFrame(rows, columns=["qid", "docno", "score", "rank"])
    return run.astype({"rank": "int64"})


def _duplicate_rows(path: Path) -> int:
    """Rows of a TREC run whose (topic, document) occurred on an earlier line (for the error's count)."""
    seen, dups = set(), 0
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        r = line.split()
        if len(r) >= 3:
            dups += (r[0], r[2]) in seen
            seen.add((r[0], r[2]))
    return dups


def refuse_duplicates(run: pd.DataFrame, source: str) -> pd.DataFrame:
    """``run`` unchanged if it holds each (topic, document) once; else an error naming ``source`` (where the run
    came from) and the first duplicate."""
    dup = run.duplicated(["qid", "docno"])
    if dup.any():
        first = run[dup].iloc[0]
        raise DataFormatError(f"{source}: document {first.docno} appears twice for topic {first.qid} "
                              f"({int(dup.sum()):,} duplicate (topic, document) rows of {len(run):,}): the index holds "
                              f"that document twice; rebuild it from a collection whose document ids are unique")
    return run


# -- stages ----------------------------------------------------------------------------------------------
def _run_lines(path: Path) -> list[str]:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run file")
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); a TREC "
                              f"run has lines 'qid Q0 docno rank score tag'") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise DataFormatError(f"{path}: the run is empty; pass a TREC run file (qid Q0 docno rank score tag)")
    return lines


def read_trec_run(path: Path, topics: pd.DataFrame | list[str] | None = None, *,
                  depth: int | None = None) -> pd.DataFrame:
    """A first-stage run in TREC format (``qid Q0 docno rank score tag``, plain or gzipped) as the frame
    :func:`bm25_run` returns: qid, query (when ``topics`` is a (qid, query) frame), docno, score, rank (0-based).

    Each topic's documents are ranked by score, ties by ascending docno (the file's own rank column is
    not used), and cut to ``depth``. A topic id that is not one of ``topics`` is an error (the run of
    another corpus?); topics the run lacks are logged and get no documents.
    """
    path = Path(path)
    rows, first_line = [], {}
    for n, line in enumerate(_run_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6:
            raise DataFormatError(f"{path}:{n}: expected 6 fields 'qid Q0 docno rank score tag', got {len(fields)}")
        qid, _, docno, _, score, _ = fields
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise DataFormatError(f"{path}:{n}: score {score!r} is not a finite number")
        if (qid, docno) in first_line:
            raise DataFormatError(f"{path}:{n}: document {docno} appears twice for topic {qid} "
                                  f"(first at line {first_line[(qid, docno)]})")
        first_line[(qid, docno)] = n
        rows.append((qid, docno, value))
    run = pd.DataFrame(rows, columns=["qid", "docno", "score"])
    order = list(dict.fromkeys(run.qid))
    frame = None
    if topics is not None:
        frame = topics if isinstance(topics, pd.DataFrame) else pd.DataFrame({"qid": list(topics)})
        frame = frame.assign(qid=frame.qid.astype(str))
        known = list(dict.fromkeys(frame.qid))
        unknown = [q for q in order if q not in set(known)]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise DataFormatError(f"{path}: {len(unknown)} topic id(s) of the run are not topics of this corpus "
                                  f"({shown}); is it the run of another corpus?")
        missing = [q for q in known if q not in set(order)]
        if missing:
            log.warning("%s: no documents for %d topic(s) (%s)", path, len(missing), ", ".join(missing[:10]))
        order = known
    run = run.assign(_pos=run.qid.map({q: i for i, q in enumerate(order)}))
    run = run.sort_values(["_pos", "score", "docno"], ascending=[True, False, True], kind="mergesort")
    run["rank"] = run.groupby("qid", sort=False).cumcount().astype("int64")
    if depth is not None:
        run = run[run["rank"] < int(depth)]
    run = run.drop(columns="_pos").reset_index(drop=True)
    if frame is not None and "query" in frame.columns:
        run = run.merge(frame[["qid", "query"]].drop_duplicates("qid"), on="qid", how="left")
        return run[["qid", "query", "docno", "score", "rank"]]
    return run[["qid", "docno", "score", "rank"]]



def run_overlap(a: pd.DataFrame, b: pd.DataFrame, depth: int = 100) -> pd.DataFrame:
    """Per topic of either run, how far two first-stage runs (qid, docno, rank 0-based) agree in their top
    ``depth``: the share of shared documents (|A ∩ B| / depth-or-fewer), the top-10 overlap, and the share of
    ranks holding the same document. What a re-ranker sees differs exactly where these fall below 1."""
    rows = []
    for qid in sorted(set(a.qid.astype(str)) | set(b.qid.astype(str))):
        x = a[a.qid.astype(str) == qid].sort_values("rank").docno.astype(str).tolist()[:depth]
        y = b[b.qid.astype(str) == qid].sort_values("rank").docno.astype(str).tolist()[:depth]
        n = max(len(x), len(y), 1)
        top = max(min(10, n), 1)
        rows.append({"qid": qid, "a": len(x), "b": len(y), "shared": len(set(x) & set(y)) / n,
                     "top10_shared": len(set(x[:10]) & set(y[:10])) / top,
                     "same_rank": sum(1 for i, d in enumerate(x) if i < len(y) and y[i] == d) / n})
    return pd.DataFrame(rows, columns=["qid", "a", "b", "shared", "top10_shared", "same_rank"])
