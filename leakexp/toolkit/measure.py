"""Score any run as trec_eval and ir_measures do, and as the paper's tables do: ``leakexp measure RUN... --qrels Q``.

Measures are named as ir_measures names them (``nDCG@10``, ``P@1``, ``RR``, ``P(rel=2)@1``) plus leakexp's MFR
(:mod:`leakexp.lib.measures`). Each run is scored whole unless a depth cuts it, ranked by score with ties broken by
ascending docno (the paper and the re-ranking stage; trec_eval would break them by descending docno), under the
configuration's ``evaluate`` settings: how MFR's first ranks are averaged (``evaluate.mfr``) and counted when
missing (``evaluate.mfr_missing``), and whether topics without a relevant judgment are left out
(``evaluate.no_relevant``). A judged topic without a run line counts as 0 (MFR: a miss), as trec_eval's ``-c`` and
the tables count it, or is left out, as trec_eval does without ``-c``. Two or more runs are each compared with a
baseline by paired t-tests, Bonferroni-corrected over the compared runs per measure, as the tables do. So the
authors' BM25 runs give the paper's MFR range:
``leakexp measure bundled:core17.bm25-anserini.top100.run.gz --qrels bundled:qrels.core17.txt.gz``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence, TYPE_CHECKING

from leakexp.data.files import DataFormatError, read_qrels
from leakexp.data.judgments import qrels_path, run_path
from leakexp.lib.measures import (average, check_mfr, mfr_caption, no_relevant_note, parse_measures, per_query,
                                  without_relevant)
from leakexp.lib.report import markdown_table
from leakexp.lib.trec import read_run
from leakexp.runner.stage import ConfigError
from leakexp.toolkit.queries import source_name

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


@dataclass(frozen=True)
class MeasureSettings:
    """How runs are scored: the measures, the ``evaluate.*`` settings of the configuration, the depth each run is cut
    to (None: the whole run) and whether every judged topic is averaged (``complete``, trec_eval's ``-c``)."""

    measures: tuple[str, ...]
    mfr: str
    mfr_missing: str
    no_relevant: str
    depth: int | None = None
    complete: bool = True

    @classmethod
    def of(cls, evaluate, *, measures: Sequence[str] | None = None, depth: int | None = None,
           complete: bool = True) -> "MeasureSettings":
        """From a configuration's ``evaluate`` section (``leakexp.stages.evaluate.Evaluate.Settings``); ``measures``
        (the command line's ``-m``) replace ``evaluate.measures``."""
        s = cls(tuple(measures or evaluate.measures), evaluate.mfr, evaluate.mfr_missing, evaluate.no_relevant,
                depth, complete)
        try:
            check_mfr(s.mfr, s.mfr_missing)
            parse_measures(list(s.measures), mfr_missing=s.mfr_missing, option="-m" if measures else "evaluate.measures")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if depth is not None and depth < 1:
            raise ConfigError(f"--depth {depth}: give the number of documents per topic to score, >= 1 (or no --depth "
                              "for the whole run)")
        return s

    def line(self) -> str:
        depth = "the whole run" if self.depth is None else f"{self.depth} (--depth)"
        topics = ("every judged topic (-c: without a run line it counts as 0, MFR as a miss)" if self.complete else
                  "the judged topics each run has (--run-topics)")
        return (f"evaluate.mfr={self.mfr} evaluate.mfr_missing={self.mfr_missing} "
                f"evaluate.no_relevant={self.no_relevant}; depth: {depth}; topics: {topics}")


@dataclass
class Scored:
    """One run scored: its per-topic values (qid, measure, value), its means (measure -> value) and which topics
    they average: ``topics`` averaged, ``absent`` judged topics without a run line (counted as 0 or left out),
    ``unjudged`` run topics the qrels do not judge (ignored); ``depth``: the ranks scored (``--depth``, else the
    run's longest ranking), where MFR's misses lie."""

    name: str
    per_topic: pd.DataFrame
    means: dict[str, float]
    topics: list[str]
    depth: int
    absent: list[str] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)


def _existing(path: Path, option: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{option} {path}: no such file" + (" (a folder?)" if path.exists() else ""))
    return path


def topic_order(qid: str) -> tuple:
    """Topic ids in numeric order where they are numbers (301 before 1001), else in text order."""
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


def _shown(qids: list[str], n: int = 10) -> str:
    return ", ".join(qids[:n]) + (f" and {len(qids) - n} more" if len(qids) > n else "")


def read_runs(runs: Sequence[str], depth: int | None) -> list[tuple[str, Path, pd.DataFrame]]:
    """(name, path, run) of each ``PATH``, ``NAME=PATH`` or ``bundled:<file>``, every file read (and refused with its
    name and line) before any is scored."""
    named = []
    for spec in runs:
        name, target = source_name(spec)
        path = _existing(run_path(target), "run")
        if name == target:  # unnamed: the file's name
            name = source_name(str(path))[0]
        if name in [n for n, _, _ in named]:
            raise ConfigError(f"two runs are named {name!r}; name them NAME=PATH")
        named.append((name, path, read_run(path, depth=depth)))
    return named


def score_run(name: str, path: Path, run: pd.DataFrame, qrels: pd.DataFrame, qrels_file: Path,
              settings: MeasureSettings) -> Scored:
    """One run against the qrels: a run that shares no judged topic with them is an error naming both files."""
    run_topics, judged = set(run.qid.astype(str)), set(qrels.qid.astype(str))
    if not run_topics & judged:
        raise DataFormatError(f"{path} and --qrels {qrels_file} have no topic in common (run topics: "
                              f"{_shown(sorted(run_topics, key=topic_order), 5)}; judged topics: "
                              f"{_shown(sorted(judged, key=topic_order), 5)}); are they of one collection?")
    empty = set(without_relevant(qrels)) if settings.no_relevant == "skip" else set()
    averaged = judged - empty if settings.complete else (judged & run_topics) - empty
    if not averaged:
        which = "no judged topic" if settings.complete else "none of the judged topics the run has"
        raise DataFormatError(f"{path} and --qrels {qrels_file}: {which} has a relevant judgment (label >= 1), so no "
                              "topic is averaged; give evaluate.no_relevant=zero to count them as 0")
    depth = settings.depth or (int(run.groupby("qid").size().max()) if len(run) else 1)
    pq = per_query(run, qrels[qrels.qid.astype(str).isin(averaged | empty)], list(settings.measures),
                   mfr_missing=settings.mfr_missing, depth=depth, no_relevant=settings.no_relevant)
    means = {m: average(pq.loc[pq.measure == m, "value"], m, settings.mfr) for m in settings.measures}
    return Scored(name, pq, means, sorted(averaged, key=topic_order), depth,
                  absent=sorted((judged - empty) - run_topics, key=topic_order),
                  unjudged=sorted(run_topics - judged, key=topic_order))


def measure_runs(runs: Sequence[str], qrels: str, settings: MeasureSettings) -> tuple[list[Scored], list[str]]:
    """Every run scored against ``qrels`` (a path or ``bundled:<file>``), and the judged topics without a relevant
    judgment (left out or counted as ``evaluate.no_relevant`` says)."""
    qrels_file = _existing(qrels_path(qrels), "--qrels")
    judgments = read_qrels(qrels_file)
    if judgments.empty:
        raise DataFormatError(f"--qrels {qrels}: no qrels lines (an empty file?); give TREC qrels 'qid 0 docno label'")
    named = read_runs(runs, settings.depth)
    return [score_run(n, p, r, judgments, qrels_file, settings) for n, p, r in named], without_relevant(judgments)


def per_topic_frame(scored: list[Scored]) -> pd.DataFrame:
    """Every run's per-topic values: run, qid, measure, value (``--out``)."""
    import pandas as pd

    return pd.concat([s.per_topic.assign(run=s.name)[["run", "qid", "measure", "value"]] for s in scored],
                     ignore_index=True)


def baseline_of(names: Sequence[str], baseline: str | None) -> tuple[str, str]:
    """The run the others are tested against, and why: ``--baseline NAME``, else the first run given."""
    if baseline is None:
        return names[0], "the first run given"
    if baseline not in names:
        raise ConfigError(f"--baseline {baseline}: no run of that name; the runs are {', '.join(names)}")
    return baseline, "--baseline"


def _values(s: Scored, measure: str) -> pd.Series:
    return s.per_topic[s.per_topic.measure == measure].set_index("qid").value


def compare(scored: list[Scored], baseline: str, settings: MeasureSettings, alpha: float = 0.05) -> pd.DataFrame:
    """Each run against ``baseline`` per measure: the topics both average, their means, the difference, the paired
    t-test's p (none with fewer than two topics) and its Bonferroni correction over the compared runs, as the tables
    correct over the leakage types."""
    import pandas as pd

    from leakexp.lib.stats import bonferroni, paired_t  # scipy and statsmodels: only when runs are compared

    base = next(s for s in scored if s.name == baseline)
    rows = []
    for m in settings.measures:
        b = _values(base, m).dropna()
        tests = []
        for s in scored:
            if s is not base:
                v = _values(s, m).dropna()
                shared = v.index.intersection(b.index)
                p, n = paired_t(v[shared], b[shared], m, settings.mfr)
                tests.append((s, v[shared], b[shared], p if n >= 2 else math.nan))
        corrected = iter(bonferroni([p for *_, p in tests if not math.isnan(p)]))
        for s, v, w, p in tests:
            p_bonferroni = math.nan if math.isnan(p) else next(corrected)
            mean, base_mean = average(v, m, settings.mfr), average(w, m, settings.mfr)
            rows.append({"run": s.name, "measure": m, "topics": len(v), "mean": mean, "baseline": base_mean,
                         "delta": mean - base_mean, "p": p, "p_bonferroni": p_bonferroni,
                         "significant": "yes" if p_bonferroni < alpha else "no"})
    columns = ["run", "measure", "topics", "mean", "baseline", "delta", "p", "p_bonferroni", "significant"]
    return pd.DataFrame(rows, columns=columns)


def run_line(s: Scored, complete: bool) -> str:
    """``run: NAME (N topics; …)``: how many topics the means average, and which judged or run topics they do not."""
    parts = [f"{len(s.topics)} topics"]
    if s.absent:
        n = len(s.absent)
        how = "counted as 0, MFR a miss" if complete else "left out"
        parts.append(f"{n} judged topic{'s' if n > 1 else ''} without a run line {how}: {_shown(s.absent)}")
    if s.unjudged:
        n = len(s.unjudged)
        parts.append(f"{n} run topic{'s' if n > 1 else ''} without judgments ignored: {_shown(s.unjudged)}")
    return f"run: {s.name} ({'; '.join(parts)})"


def topic_lines(s: Scored) -> list[str]:
    """trec_eval ``-q``'s lines ``measure<TAB>qid<TAB>value``, topic by topic, then the means as ``all`` rows (a
    topic a measure leaves out, e.g. an MFR miss under ``mfr_missing=skip``, has no line)."""
    values = s.per_topic.set_index(["qid", "measure"]).value
    lines = [f"{m}\t{q}\t{values[(q, m)]:.4f}" for q in s.topics for m in s.means if values[(q, m)] == values[(q, m)]]
    return lines + [f"{m}\tall\t{v:.4f}" for m, v in s.means.items()]


def report(scored: list[Scored], settings: MeasureSettings, empty: list[str], *, per_topic: bool = False,
           baseline: str | None = None) -> list[str]:
    """The lines ``leakexp measure`` prints: the settings; per run which topics it averages and one ``measure:
    value`` line each (``per_topic``: trec_eval's ``-q`` lines); with two or more runs, the paired t-tests against
    the baseline; notes on MFR and on topics without a relevant judgment."""
    lines = [f"settings: {settings.line()}"]
    for s in scored:
        lines.append(run_line(s, settings.complete))
        lines += topic_lines(s) if per_topic else [f"{m}: {v:.4f}" for m, v in s.means.items()]
    if len(scored) > 1:
        name, why = baseline_of([s.name for s in scored], baseline)
        lines.append(f"baseline: {name} ({why})")
        lines.append(markdown_table(compare(scored, name, settings), floatfmt="{:.4f}").rstrip("\n"))
        lines.append(f"note: paired Student's t-test per measure on the topics both runs average, Bonferroni-corrected "
                     f"over the {len(scored) - 1} compared run{'s' if len(scored) > 2 else ''}; significant: corrected "
                     "p < 0.05")
    if "MFR" in settings.measures:
        lines.append(f"note: {mfr_caption(settings.mfr_missing, max(s.depth for s in scored), settings.mfr)}")
    if empty:
        lines.append(f"note: {no_relevant_note(empty, settings.no_relevant)}")
    return lines
