"""The robustness parts of the grid's cells (``leakexp.stages.robustness``): which cells get them, each cell's
requests, and computing or inspecting them through a runner."""

from __future__ import annotations

from pathlib import Path

from leakexp.runner.loop import each
from leakexp.runner.schema import Settings
from leakexp.runner.stage import Ask
from leakexp.stages.cell import Cell, grid_cells
from leakexp.stages.perturbations import DOCS, QUERIES
from leakexp.stages.robustness import DOC, OOD, OWN, QUERY, RobustnessSettings, robustness_settings


def robustness_cells(s: Settings) -> list[Cell]:
    """The grid cells that get robustness artifacts (``robustness.corpora`` / ``robustness.sizes``)."""
    r = robustness_settings(s)
    return [c for c in grid_cells(s) if (r.corpora is None or c.corpus in r.corpora)
            and (r.sizes is None or c.size in r.sizes)]


def ood_targets(r: RobustnessSettings, s: Settings, cell: Cell) -> list[str]:
    targets = r.ood if r.ood is not None else tuple(s.grid.corpora)
    return [c for c in dict.fromkeys(targets) if c != cell.corpus]


def asks(s: Settings, cell: Cell) -> dict[str, Ask]:
    """Every part of ``cell``'s robustness: part name (own, ood-<corpus>, <attack>, doc-<kind>) -> request."""
    r = robustness_settings(s)
    out = {"own": cell.ask(OWN)}
    out.update({f"ood-{t}": cell.ask(OOD, target=t) for t in ood_targets(r, s, cell)})
    out.update({a: cell.ask(QUERY, attack=a) for a in r.query_attacks})
    out.update({f"doc-{k}": cell.ask(DOC, kind=k) for k in r.doc_manipulations})
    return out


def queries_ask(s: Settings, corpus: str, attack: str) -> Ask:
    """The shared attacked queries of ``corpus`` under ``attack`` (with this config's first stage)."""
    return Ask.of(QUERIES, corpus=corpus, attack=attack, first_stage=s.robustness.first_stage)


def docs_ask(corpus: str, kind: str) -> Ask:
    """The shared manipulated documents of ``corpus`` (``kind``: stuff or noise)."""
    return Ask.of(DOCS, corpus=corpus, kind=kind)


def robust(s: Settings, runner, cell: Cell) -> dict[str, Path]:
    """Compute (once) every robustness part of ``cell`` and everything it lacks upstream; part -> artifact."""
    return {name: runner.ensure(ask) for name, ask in asks(s, cell).items()}


def robust_all(s: Settings, runner, cells: list[Cell]) -> list[tuple[Cell, Exception]]:
    """``robust`` for every cell with a progress bar; a failing cell is logged and skipped. Returns failures."""
    return each(cells, lambda cell: robust(s, runner, cell), desc="robustness")


def cell_state(s: Settings, runner, cell: Cell) -> str:
    """done if every robustness part of the cell is done, else the first of failed, damaged, stale, running,
    missing among its parts. Computes nothing."""
    states = [runner.state(ask)[0] for ask in asks(s, cell).values()]
    for state in ("failed", "damaged", "stale", "running", "missing", "data missing"):
        if state in states:
            return state
    return "done"
