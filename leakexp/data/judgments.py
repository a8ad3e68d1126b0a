"""The TREC Common Core 2017 and 2018 topics and relevance judgments, shipped with leakexp (public NIST files), and
where the shipped files are: ``bundled:<file>`` names a run of ``leakexp/data/runs/`` (the authors' BM25 runs) or, for
qrels, a file of ``leakexp/data/trec/``.

They are the files of castorini/anserini-tools (``topics/`` and ``qrels/``; see ``leakexp/data/trec/README.md``),
byte-identical to what ir_datasets downloads for ``nyt/trec-core-2017`` and ``wapo/v2/trec-core-2018`` (its
``etc/downloads.json`` md5s), so the authors' Core runs (``leakexp/data/runs``) can be evaluated without the
licensed documents. ``experiment=paper`` still reads a corpus's topics and qrels through ir_datasets with its
documents; these files serve the checks that need no documents.
"""

from __future__ import annotations

from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.data.files import read_qrels, read_trec_topics
from leakexp.data.types import Topic

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


FOLDER = Path(__file__).parent / "trec"
BUNDLED_RUNS = Path(__file__).parent / "runs"  # runs shipped with leakexp (see its README.md)
BUNDLED = "bundled:"
CORPORA = ("core17", "core18")


def run_path(value: str) -> Path:
    """A run's path: ``bundled:<file>`` is a file of ``leakexp/data/runs/``, anything else a path."""
    value = str(value)
    return BUNDLED_RUNS / value.removeprefix(BUNDLED) if value.startswith(BUNDLED) else Path(value)


def qrels_path(value: str) -> Path:
    """A qrels file's path: ``bundled:<file>`` is a file of ``leakexp/data/trec/`` (NIST's Common Core judgments)."""
    value = str(value)
    return FOLDER / value.removeprefix(BUNDLED) if value.startswith(BUNDLED) else Path(value)


def _path(kind: str, corpus: str) -> Path:
    if corpus not in CORPORA:
        raise ValueError(f"no shipped {kind} for corpus {corpus!r}; leakexp ships them for {', '.join(CORPORA)}")
    return FOLDER / f"{kind}.{corpus}.txt.gz"


def shipped_topics(corpus: str) -> list[Topic]:
    """The TREC topics of ``core17`` (50, NYT) or ``core18`` (50, WaPo v2)."""
    return read_trec_topics(_path("topics", corpus))


def shipped_qrels(corpus: str) -> pd.DataFrame:
    """The NIST relevance judgments (qid, docno, label) of ``core17`` or ``core18``."""
    return read_qrels(_path("qrels", corpus))
