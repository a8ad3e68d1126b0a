"""The configured grid: its cells, the artifacts each needs, and their state in the store.

A cell is (corpus, leakage, size, model, seed). Status asks the runner for the key of each artifact of *this*
configuration, computing and writing nothing, so it also works on a read-only store and never mistakes
another configuration's result for this one's. Artifacts that several cells share (the No-Leakage sets and
models, the first-stage runs, the indexes) are counted once.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from leakexp.lib.measures import average, count_misses
from leakexp.lib.memorization import LEAKED
from leakexp.runner.jobs import allocated_cpus, scheduled
from leakexp.runner.lineage import why
from leakexp.runner.loop import each
from leakexp.runner.pipeline import Runner
from leakexp.runner.schema import Settings
from leakexp.runner.stage import Ask, ConfigError, stages
from leakexp.stages import memorization
from leakexp.stages.cell import Cell, cell_from_config, grid_cells
from leakexp.stages.memorization import without_cell
from leakexp.stages.robustness import family as robustness
from leakexp.runner.registry import runner as make_runner

STATES = ("done", "running", "failed", "damaged", "stale", "missing", "data missing")


def _attr(state: str) -> str:
    return state.replace(" ", "_")


@dataclass
class StageStatus:
    done: int = 0
    running: int = 0
    failed: int = 0
    damaged: int = 0
    stale: int = 0
    missing: int = 0
    data_missing: int = 0  # outside files it reads (ir_datasets' archives, topics, qrels) are not on this machine
    notes: list[tuple[str, str, str]] = field(default_factory=list)  # (state, artifact, detail)
    unkeyed: dict[str, int] = field(default_factory=dict)  # why -> missing artifacts whose key cannot be made
    absent: dict[str, list[str]] = field(default_factory=dict)  # what data is missing -> the artifacts that need it

    @property
    def total(self) -> int:
        return sum(getattr(self, _attr(s)) for s in STATES)

    @property
    def failures(self) -> list[tuple[str, str]]:
        return [(a, d) for s, a, d in self.notes if s == "failed"]

    def add(self, state: str, artifact: str, detail: str = "") -> None:
        setattr(self, _attr(state), getattr(self, _attr(state)) + 1)
        if state in ("failed", "damaged", "running") or (state == "missing" and detail and artifact):
            self.notes.append((state, artifact, detail))


def grid_asks(s: Settings, runner: Runner | None = None, cells: list[Cell] | None = None) -> dict[str, list[Ask]]:
    """Per stage, in the registry's order, the artifacts the configured grid (or ``cells``) asks of it by name
    (``Stage.asks``): its status row, and what its command computes. A stage that asks for none (computed when
    another reads it) has no row, nor do the demo's extras (:func:`demo_asks`)."""
    r = runner or make_runner(s, readonly=True)
    cells = grid_cells(s) if cells is None else cells
    rows = {st.name: st.asks(r, cells) for st in stages() if not st.demo}
    return {k: v for k, v in rows.items() if v}


def demo_asks(s: Settings, runner: Runner | None = None) -> list[Ask]:
    """What ``leakexp demo`` computes beside the grid (``Stage.demo``: the toy world's pair and graph audits)."""
    r = runner or make_runner(s, readonly=True)
    return [a for st in stages() if st.demo for a in st.asks(r, [])]


def grid_status(s: Settings, *, verify: bool = False, runner: Runner | None = None,
                cells: list[Cell] | None = None) -> dict[str, StageStatus]:
    """Per stage, how many distinct artifacts of the configured grid (or of ``cells``) are in each state
    (``verify``: re-read every finished artifact's files against their checksums). An artifact several cells share
    counts once."""
    r = runner or make_runner(s, readonly=True)
    out: dict[str, StageStatus] = {}
    rows = grid_asks(s, r, cells)
    for row, asks in rows.items():
        st = out.setdefault(row, StageStatus())
        seen = set()
        for ask in asks:
            try:
                path = r.path(ask)
            except Exception as exc:  # e.g. annotation files not given yet: nothing of it can exist
                normal = r.normal(ask)  # shared artifacts count once, as they do when keyed
                if normal in seen:
                    continue
                seen.add(normal)
                reason = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
                reason = reason.splitlines()[0]
                st.add("missing", str(normal))
                st.unkeyed[reason] = st.unkeyed.get(reason, 0) + 1
                continue
            if path in seen:
                continue
            seen.add(path)
            state, path, detail = r.state(ask, checksums=verify)
            name = str(path.relative_to(r.store.root)) if path is not None else str(ask)
            st.add(state, name, detail)
            for message in (r.unavailable(ask) if state == "data missing" else []):
                st.absent.setdefault(message, []).append(name)
    return out


def scheduler_notes(s: Settings, runner: Runner | None = None) -> list[str]:
    """``status``'s lines for the grid's unfinished cells that a launcher submitted or that failed: QUEUED (also
    requeued after a preemption) and RUNNING with their SLURM job ids (``squeue``, then ``sacct``), FAILED with the
    one-line reason (leakexp-run records it, also where no artifact was made: a bad setting) or how the
    scheduler ended the job."""
    r = runner or make_runner(s, readonly=True)
    pending = []
    for cell in grid_cells(s):
        try:
            state = r.state(cell.ask("evaluate"))[0]
        except Exception:  # status reports why it cannot be keyed
            state = "missing"
        if state != "done":
            pending.append(str(cell))
    return [f"{word.upper()} {cell}: {detail}" for word, cell, detail in scheduled(r.store.root, pending)]


def robust(runner: Runner, cell: Cell) -> dict[str, Path]:
    """Compute (once) every robustness part of ``cell`` and everything it lacks upstream; part -> artifact."""
    return {name: runner.ensure(ask) for name, ask in robustness.parts(runner.settings, cell).items()}


def robust_all(runner: Runner, cells: list[Cell]) -> list[tuple[Cell, Exception]]:
    """``robust`` for every cell with a progress bar; a failing cell is logged and skipped. Returns failures."""
    return each(cells, lambda cell: robust(runner, cell), desc="robustness")


def robustness_state(runner: Runner, cell: Cell) -> str:
    """done if every robustness part of the cell is done, else the first of failed, damaged, stale, running,
    missing among its parts. Computes nothing."""
    states = [runner.state(ask)[0] for ask in robustness.parts(runner.settings, cell).values()]
    for state in ("failed", "damaged", "stale", "running", "missing", "data missing"):
        if state in states:
            return state
    return "done"


def run_cell(runner: Runner, cell: Cell) -> dict:
    """Everything one cell needs, computing only what the store lacks; returns its mean measures. A leaked
    cell's memorization is computed once it and its No-Leakage cell are both re-ranked."""
    pq = counted(runner.settings, runner.get(cell.ask("evaluate")))
    for leaked in ready_cells(runner.settings, runner, cell):
        runner.ensure(leaked.ask("memorization"))
    return {m: average(v, m, runner.settings.evaluate.mfr) for m, v in pq.groupby("measure").value}


def counted(s: Settings, perquery):
    """A stored evaluation's per-query values with MFR's misses counted as ``evaluate.mfr_missing`` says (the stored
    values serve every MFR variant: a miss is an infinite rank)."""
    return count_misses(perquery, s.evaluate.mfr_missing, s.rerank.depth)


def ready_cells(s: Settings, runner, cell: Cell) -> list[Cell]:
    """The leaked cells whose memorization can be computed now that ``cell`` is finished: the cell itself
    (leaked) or its MSM and test siblings (no leakage), where both re-rankings are in the store. Cheap.

    Whichever of a leaked cell and its no-leakage cell finishes last computes it, so grid workers never
    wait for, or train, a model of another cell (``memorization_all`` does, for grids without ``none``)."""
    family = [cell] if cell.leakage in LEAKED else [dataclasses.replace(cell, leakage=l) for l in LEAKED]
    return [c for c in family if memorization.wanted(s, c)
            and all(runner.state(x.ask("rerank"))[0] == "done" for x in (c, without_cell(c)))]


def memorization_all(s: Settings, runner, cells: list[Cell]) -> tuple[list[Path], list[tuple[Cell, Exception]]]:
    """The memorization artifacts of every wanted cell among ``cells`` (and what they lack upstream); a
    failing cell is reported and does not stop the others."""
    done = []
    failed = each([c for c in cells if memorization.wanted(s, c)], lambda cell: runner.ensure(cell.ask("memorization")),
                  desc="memorization", done=lambda cell, path: done.append(path))
    return done, failed



def cell_workers(s: Settings, cells: int) -> int:
    """``workers``: processes running cells at once. ``auto``: one per core (at most 4) when cells run on the CPU,
    one when they run on a GPU (``hydra/launcher=gpu_local`` gives each GPU its own cell)."""
    setting = s.run.workers
    if setting != "auto":
        return max(1, min(setting, cells))
    device = s.run.device
    if device.startswith("cuda") or (device == "auto" and _cuda()):
        return 1
    return max(1, min(allocated_cpus(), 4, cells))


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass(frozen=True)
class Job:
    """One item of a grid's work: a cell (``run_cell``), a robustness cell (``robust``), or one shared
    artifact (``ask``: the embeddings, indexes and first-stage runs every cell builds on, the demo's audits)."""

    kind: str  # cell, robustness, ask
    what: Cell | Ask

    def __str__(self) -> str:
        return f"robustness {self.what}" if self.kind == "robustness" else str(self.what)


def grid_jobs(s: Settings, runner: Runner | None, cells: list[Cell], extra: list[Ask] = ()) -> list[Job]:
    """The grid's work in the order workers take it: first the shared artifacts that do not need one another
    (each source's embeddings, the indexes, the first-stage runs), so that workers compute them side by side
    instead of waiting on the first cell; then ``extra`` (the demo's audits: long jobs that need no cell, so
    they run beside the cells rather than last and alone); then the cells; then the robustness cells
    (``robustness.enabled``), whose models the cells trained."""
    rows = grid_asks(s, runner, cells)
    shared = [Job("ask", a) for row in ("embed", "index", "firststage") for a in rows.get(row, [])]
    robust = robustness.robustness_cells(s) if s.robustness.enabled else []
    return [*shared, *(Job("ask", a) for a in extra), *(Job("cell", c) for c in cells),
            *(Job("robustness", c) for c in robust)]


def run_job(runner: Runner, job: Job):
    if job.kind == "cell":
        return run_cell(runner, job.what)
    if job.kind == "robustness":
        return robust(runner, job.what)
    return runner.ensure(job.what)


def run_job_in_worker(s: Settings, job: Job):
    """``run_job`` in a worker process: one runner per process and configuration."""
    key = json.dumps(s.values, sort_keys=True, default=str)
    if key not in _WORKER_RUNNERS:
        _WORKER_RUNNERS.clear()
        _WORKER_RUNNERS[key] = make_runner(s)
    return run_job(_WORKER_RUNNERS[key], job)


_WORKER_RUNNERS: dict = {}


def stored_results(runner: Runner, cells: list[Cell]):
    """Per-query values of the finished cells among ``cells`` (from the store alone), and the state of every
    cell that has none (missing, failed, stale, running)."""
    import pandas as pd

    frames, states = [], {}
    for cell in cells:
        state, path, _ = runner.state(cell.ask("evaluate"))
        if state != "done":
            states[cell] = state
            continue
        pq = counted(runner.settings, pd.read_parquet(path / "perquery.parquet"))
        frames.append(pq.assign(corpus=cell.corpus, leakage=cell.leakage, size=cell.size, model=cell.model,
                                seed=cell.seed))
    if not frames:
        return pd.DataFrame(columns=["qid", "measure", "value", "corpus", "leakage", "size", "model", "seed"]), states
    return pd.concat(frames, ignore_index=True), states


def lineage(s: Settings, stages: list[str]) -> list[str]:
    """``status --why``: for the configured cell's artifact of each named stage, what made its key and, where
    only other configurations' artifacts are stored, which values and inputs differ."""
    r = make_runner(s, readonly=True)
    cell = cell_from_config(s)
    renamed = {st.keyed_as: st.name for st in r.stages.values() if st.keyed_as}  # an old name still answers (eval)
    lines = [f"note: stage {old} is called {renamed[old]} now (its keys keep the old name)"
             for old in dict.fromkeys(stages) if old in renamed and old not in r.stages]
    stages = [renamed.get(x, x) if x not in r.stages else x for x in stages]
    unknown = [x for x in stages if x not in r.stages]
    if unknown:
        raise ConfigError(f"status --why: no stage named {', '.join(unknown)}; stages: {', '.join(r.stages)}")
    needed = r.upstream(cell.ask("evaluate"))  # the cell's artifacts and everything they read
    for stage in stages:
        asks = [a for a in needed if a.stage == stage] or [cell.ask(stage)]  # e.g. memorization: below evaluate
        for ask in asks:
            lines += [*why(r, ask), ""]
    return lines


def render_status(status: dict[str, StageStatus]) -> str:
    width = {s: max(9, len(s) + 2) for s in STATES}
    name = max([8, *(len(stage) + 1 for stage in status)])  # the stage column fits its longest row (firststage)
    lines = [f"{'stage':<{name}}" + "".join(f"{s:>{width[s]}}" for s in STATES) + f"{'total':>8}"]
    for stage, st in status.items():
        lines.append(f"{stage:<{name}}" + "".join(f"{getattr(st, _attr(s)):>{width[s]}}" for s in STATES)
                     + f"{st.total:>8}")
    absent: dict[str, list[str]] = {}  # one line per missing data, not per artifact that needs it
    for stage, st in status.items():
        for state, path, detail in st.notes:
            lines.append(f"{state.upper()} {path}: {detail}" if detail else f"{state.upper()} {path}")
        for message, paths in st.absent.items():
            absent.setdefault(message, []).extend(paths)
    for message, paths in absent.items():
        lines.append(f"DATA MISSING for {len(paths)} artifact(s) (e.g. {paths[0]}): {message}")
    unkeyed: dict[str, list[str]] = {}  # one line per reason (e.g. no annotation files), not one per artifact
    for stage, st in status.items():
        for reason, n in st.unkeyed.items():
            unkeyed.setdefault(reason, []).append(f"{n} {stage}")
    for reason, counts in unkeyed.items():
        lines.append(f"MISSING {', '.join(counts)}: {reason}")
    stale = sum(st.stale for st in status.values())
    if stale:
        lines.append(f"{stale} artifact(s) exist only for other configurations (stale for this one): they are "
                     "kept, and neither status nor tables use them")
    return "\n".join(lines)


def complete(status: dict[str, StageStatus]) -> bool:
    return all(st.done == st.total for st in status.values())
