"""The TREC Common Core 2017 and 2018 topics and relevance judgments, shipped with leakexp (public NIST files).

They are the files of castorini/anserini-tools (``topics/`` and ``qrels/``; see ``leakexp/data/trec/README.md``),
byte-identical to what ir_datasets downloads for ``nyt/trec-core-2017`` and ``wapo/v2/trec-core-2018`` (its
``etc/downloads.json`` md5s), so the authors' Core runs (``leakexp/data/runs``) can be evaluated without the
licensed documents. ``experiment=paper`` still reads a corpus's topics and qrels through ir_datasets with its
documents; these files serve the checks that need no documents.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from leakexp.data.files import read_qrels, read_trec_topics
from leakexp.data.types import Topic

FOLDER = Path(__file__).parent / "trec"
CORPORA = ("core17", "core18")


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
