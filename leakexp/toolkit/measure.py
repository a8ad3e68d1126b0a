"""Score any run as the paper's tables do: ``leakexp measure RUN... --qrels QRELS``.

Each run is cut to its top ``rerank.depth`` (the paper re-ranks BM25's top-100, so MFR's "no relevant document"
means none in the top-100), ranked by score with ties broken by ascending docno, and scored by the grid's own
evaluation (:func:`leakexp.lib.measures.per_query`) under the configured ``evaluate`` settings: which measures, how
MFR's first ranks are averaged (``evaluate.mfr``) and counted when missing (``evaluate.mfr_missing``), and whether
topics without a relevant judgment are left out (``evaluate.no_relevant``). So the authors' BM25 runs give the
paper's MFR range: ``leakexp measure bundled:core17.bm25-anserini.top100.run.gz --qrels bundled:qrels.core17.txt.gz``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from leakexp.data.files import DataFormatError, read_qrels
from leakexp.data.judgments import qrels_path, run_path
from leakexp.lib.measures import average, check_mfr, mfr_caption, no_relevant_note, per_query, without_relevant
from leakexp.lib.trec import read_run
from leakexp.runner.stage import ConfigError
from leakexp.toolkit.queries import source_name

@dataclass(frozen=True)
class MeasureSettings:
    """The evaluation settings a run is scored under (``evaluate.*`` and ``rerank.depth`` of the configuration)."""

    measures: tuple[str, ...]
    mfr: str
    mfr_missing: str
    no_relevant: str
    depth: int

    @classmethod
    def of(cls, settings) -> "MeasureSettings":
        """From a configuration's typed settings (``leakexp.runner.schema.Settings``)."""
        e = settings.evaluate
        s = cls(tuple(e.measures), e.mfr, e.mfr_missing, e.no_relevant, settings.rerank.depth)
        try:
            check_mfr(s.mfr, s.mfr_missing)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return s

    def line(self) -> str:
        return (f"evaluate.mfr={self.mfr} evaluate.mfr_missing={self.mfr_missing} "
                f"evaluate.no_relevant={self.no_relevant} rerank.depth={self.depth}")


def _existing(path: Path, option: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{option} {path}: no such file" + (" (a folder?)" if path.exists() else ""))
    return path


def measure_runs(runs: Sequence[str], qrels: str, settings: MeasureSettings) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(means: run, measure, value, topics), (per topic: run, qid, measure, value), topics without a relevant
    judgment. A run is ``PATH``, ``NAME=PATH`` or ``bundled:<file>``; every file is read (and refused with its name
    and line) before any is scored."""
    judgments = read_qrels(_existing(qrels_path(qrels), "--qrels"))
    if judgments.empty:
        raise DataFormatError(f"--qrels {qrels}: no qrels lines (an empty file?); give TREC qrels 'qid 0 docno label'")
    named = []
    for spec in runs:
        name, target = source_name(spec)
        path = _existing(run_path(target), "run")
        if name == target:  # unnamed: the file's name
            name = source_name(str(path))[0]
        if name in [n for n, _ in named]:
            raise ConfigError(f"two runs are named {name!r}; name them NAME=PATH")
        named.append((name, read_run(path, depth=settings.depth)))
    per_topic, means = [], []
    for name, run in named:
        pq = per_query(run, judgments, list(settings.measures), mfr_missing=settings.mfr_missing, depth=settings.depth,
                       no_relevant=settings.no_relevant)
        per_topic.append(pq.assign(run=name)[["run", "qid", "measure", "value"]])
        for m in settings.measures:
            values = pq.loc[pq.measure == m, "value"]
            means.append({"run": name, "measure": m, "value": average(values, m, settings.mfr),
                          "topics": int(values.notna().sum())})
    return pd.DataFrame(means), pd.concat(per_topic, ignore_index=True), without_relevant(judgments)


def report(means: pd.DataFrame, settings: MeasureSettings, empty: list[str]) -> list[str]:
    """The lines ``leakexp measure`` prints: the settings, then per run one ``measure: value`` line each."""
    lines = [f"settings: {settings.line()}"]
    for name, g in means.groupby("run", sort=False):
        lines.append(f"run: {name} ({g.topics.max()} topics)")
        lines += [f"{r.measure}: {r.value:.4f}" for r in g.itertuples()]
    notes = [mfr_caption(settings.mfr_missing, settings.depth, settings.mfr)] if "MFR" in settings.measures else []
    if empty:
        notes.append(no_relevant_note(empty, settings.no_relevant))
    lines += [f"note: {n}" for n in notes]
    return lines
