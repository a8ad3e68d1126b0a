"""Runs: the one reader of run files (TREC's six columns or MS MARCO's three, plain or gzipped) into (qid, docno,
score, rank 0-based), the one writer of TREC runs, refusing duplicate (topic, document) rows, comparing two runs."""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.data.files import DataFormatError

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


def _duplicate_rows(lines: list[str]) -> int:
    """Rows of a run whose (topic, document) occurred on an earlier line (for the error's count)."""
    seen, dups = set(), 0
    for line in lines:
        r = line.split()
        if len(r) >= 3:
            pair = (r[0], r[1] if len(r) == 3 else r[2])
            dups += pair in seen
            seen.add(pair)
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
def _run_lines(path: Path, empty_ok: bool = False) -> list[str]:
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
    if not empty_ok and not any(line.strip() for line in lines):
        raise DataFormatError(f"{path}: the run is empty; pass a TREC run file (qid Q0 docno rank score tag)")
    return lines


def read_run(path: Path, topics: pd.DataFrame | list[str] | None = None, *, depth: int | None = None,
             ranks: str = "score", duplicate_hint: str = "", empty_ok: bool = False) -> pd.DataFrame:
    """A run file as (qid, [query,] docno, score, rank 0-based): TREC's ``qid Q0 docno rank score tag`` or MS MARCO's
    ``qid<TAB>docid<TAB>rank`` (told apart by the first line; score = -rank), plain or gzipped.

    ``ranks="score"``: each topic's documents ranked by score, ties by ascending docno (a TREC file's own rank
    column is not used; MS MARCO's is its only order); ``ranks="file"``: the file's order and rank column, as
    Anserini's SearchCollection wrote them. Cut to ``depth``. A topic id that is not one of ``topics`` is an error
    (the run of another corpus?); topics the run lacks are logged and get no documents. A document twice for one
    topic is an error naming the file and line (``duplicate_hint``: what to do about it); so is an empty file, unless
    ``empty_ok`` (a search whose queries matched nothing).
    """
    import pandas as pd

    path = Path(path)
    lines = _run_lines(path, empty_ok)
    first_fields = next((line.split() for line in lines if line.strip()), [])
    msmarco = len(first_fields) == 3
    rows, first_line = [], {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.split()
        if msmarco:
            if len(fields) != 3 or not fields[2].lstrip("-").isdigit():
                raise DataFormatError(f"{path}:{n}: expected MS MARCO's 3 fields 'qid docid rank' (as line 1) or "
                                      f"TREC's 6 'qid Q0 docno rank score tag', got {line.strip()[:80]!r}")
            qid, docno, rank = fields
            value, file_rank = -float(rank), int(rank)
        else:
            if len(fields) != 6:
                raise DataFormatError(f"{path}:{n}: expected 6 fields 'qid Q0 docno rank score tag', got {len(fields)}")
            qid, _, docno, rank, score, _ = fields
            try:
                value = float(score)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                raise DataFormatError(f"{path}:{n}: score {score!r} is not a finite number")
            file_rank = int(rank) if rank.lstrip("-").isdigit() else n
        if (qid, docno) in first_line:
            unit = "query" if msmarco else "topic"
            raise DataFormatError(f"{path}:{n}: document {docno} appears twice for {unit} {qid} (first at line "
                                  f"{first_line[(qid, docno)]}; {_duplicate_rows(lines):,} duplicate (topic, document) "
                                  f"rows in the file)" + (f": {duplicate_hint}" if duplicate_hint else ""))
        first_line[(qid, docno)] = n
        rows.append((qid, docno, value, file_rank))
    run = pd.DataFrame(rows, columns=["qid", "docno", "score", "file_rank"])
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
    if ranks == "file":
        run["rank"] = (run["file_rank"] - 1).astype("int64")
    else:
        run = run.assign(_pos=run.qid.map({q: i for i, q in enumerate(order)}))
        run = run.sort_values(["_pos", "score", "docno"], ascending=[True, False, True], kind="mergesort")
        run["rank"] = run.groupby("qid", sort=False).cumcount().astype("int64")
        run = run.drop(columns="_pos")
    if depth is not None:
        run = run[run["rank"] < int(depth)]
    run = run.drop(columns="file_rank").reset_index(drop=True)
    if frame is not None and "query" in frame.columns:
        run = run.merge(frame[["qid", "query"]].drop_duplicates("qid"), on="qid", how="left")
        return run[["qid", "query", "docno", "score", "rank"]]
    return run[["qid", "docno", "score", "rank"]]


def write_run(run: pd.DataFrame, path: Path, tag: str) -> Path:
    """A gzipped TREC run file (1-based ranks) in the run's order; no time stamp or file name in its gzip header,
    so equal runs are equal bytes."""
    lines = "".join(f"{r.qid} Q0 {r.docno} {int(r.rank) + 1} {float(r.score):.8g} {tag}\n"
                    for r in run.itertuples(index=False))
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(lines.encode("utf-8"))
    return path


def run_overlap(a: pd.DataFrame, b: pd.DataFrame, depth: int = 100) -> pd.DataFrame:
    """Per topic of either run, how far two first-stage runs (qid, docno, rank 0-based) agree in their top
    ``depth``: the share of shared documents (|A ∩ B| / depth-or-fewer), the top-10 overlap, and the share of
    ranks holding the same document. What a re-ranker sees differs exactly where these fall below 1."""
    import pandas as pd

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
