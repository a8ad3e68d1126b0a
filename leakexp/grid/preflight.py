"""``leakexp check``: every input from outside leakexp and the store that the configured grid — or the cells the
command line names — still lacks, all at once, each with where it comes from (the ``leakexp fetch`` kind, its URL, or
what to place by hand) and where it goes. ``grid`` and ``cell`` refuse with this one report before any work;
``status`` and ``plan`` print it and go on; a multirun checks its whole sweep with it before it launches a job.

What a cell asks for follows from what its stages and its model declare: the SBERT model detection reads, the
annotation files verification reads, the query variants and collections of the data, and the files and weights of
the cell's own model (a monoT5 cell needs no GloVe; KNRM, PACRR and Duet read it through ``embeddings``). The store
is not touched: nothing is keyed, read or written there.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable

from leakexp.grid.fetch import Need, needs
from leakexp.runner.registry import unreadable_files
from leakexp.runner.schema import Settings
from leakexp.runner.stage import ConfigError
from leakexp.stages.build import check_size
from leakexp.stages.cell import Cell, grid_cells

CELL_OVERRIDES = ("corpus", "leakage", "size", "model", "seed")
# the files that `leakexp fetch` checks the bundled runs against: no stage reads them
NOT_READ = ("runs",)


def cell_filter(overrides: Iterable[str]) -> dict[str, set[str]]:
    """The cell keys the command line gives (``seed=2``, ``model=knrm,duet``), each with its values."""
    out: dict[str, set[str]] = {}
    for o in overrides:
        key, eq, value = o.partition("=")
        if eq and key in CELL_OVERRIDES:
            out[key] = {v.strip() for v in value.split(",")}
    return out


def composable(overrides: Iterable[str]) -> list[str]:
    """The overrides with each cell key's comma list cut to its first value (one configuration to compose; the
    others are cells of it, :func:`chosen_cells`)."""
    return [o if o.partition("=")[0] not in CELL_OVERRIDES else o.split(",")[0] for o in overrides]


def chosen_cells(s: Settings, overrides: Iterable[str]) -> list[Cell] | None:
    """The cells the command line's cell keys choose among the grid's (None: no cell key given, the whole grid);
    values the grid does not hold (``seed=2`` of a one-seed grid) give the grid's cells with those values."""
    wanted = cell_filter(overrides)
    if not wanted:
        return None
    grid = grid_cells(s)
    cells = [c for c in grid if all(str(getattr(c, k)) in v for k, v in wanted.items())]
    if cells:
        return cells
    # values outside the grid (seed=2 of a one-seed grid): the grid's cells with those values
    out = [dataclasses.replace(c, **{k: type(getattr(c, k))(v) for k, v in zip(wanted, combo)})
           for c in grid for combo in itertools.product(*(sorted(v) for v in wanted.values()))]
    return list(dict.fromkeys(out))


def missing(s: Settings, cells: list[Cell] | None = None) -> list[Need]:
    """What the grid (or ``cells``) still lacks from outside, each once: the fetchable inputs and those to place by
    hand, then the files other settings name that do not exist."""
    models = None if cells is None else list(dict.fromkeys(c.model for c in cells))
    if models is None:
        models = list(dict.fromkeys(s.grid.models))
    found, _ = needs(s, models)
    out = [n for n in found if not n.here and n.kind not in NOT_READ]
    named = {n.where for n in out}
    for setting, path, message in unreadable_files(s, models):
        if str(path) not in named:
            out.append(Need("setting", setting, str(path), False, None, message))
    return out


def bad_sizes(s: Settings, cells: list[Cell]) -> list[str]:
    """Each training set of ``cells`` the pool cannot fill, one line each (known before any work)."""
    lines = []
    for corpus, leakage, size in dict.fromkeys((c.corpus, c.leakage, c.size) for c in cells):
        try:
            check_size(s, corpus, leakage, size, f"size={size}")
        except ConfigError as exc:  # names the size and the largest the pool fills
            lines.append(str(exc))
    return list(dict.fromkeys(lines))


def source(n: Need, overrides: Iterable[str] = ()) -> str:
    """Where a missing input comes from: the fetch command (and its URL), or what to do by hand."""
    if n.get is not None:
        shown = " ".join(o for o in overrides if o.partition("=")[0] not in (*CELL_OVERRIDES, "store"))
        return f"leakexp fetch --only {n.kind} {shown}".rstrip() + (f" (from {n.url})" if n.url else "")
    return " ".join((n.how or "place it there by hand").split())


def report_text(found: list[Need], overrides: Iterable[str] = (), what: str = "the configured grid",
           heading: str | None = None) -> str:
    """The one report: every missing input with where it comes from and where it goes; or the all-present line.
    ``heading``: its first words in place of "N input(s) missing" (status and plan: what a run will still need)."""
    if not found:
        return f"all inputs present for {what}"
    lines = [f"{heading} ({len(found)} input(s)) for {what}:" if heading else
             f"{len(found)} input(s) missing for {what}:"]
    for n in found:
        lines += [f"  - {n.what}", f"      from: {source(n, overrides)}", f"      to:   {n.where}"]
    return "\n".join(lines)


def described(cells: list[Cell] | None) -> str:
    if cells is None:
        return "the configured grid"
    return f"cell {cells[0]}" if len(cells) == 1 else f"{len(cells)} cells"


def check(s: Settings, overrides: Iterable[str] = (), cells: list[Cell] | None = None) -> tuple[list[Need], str]:
    """What :func:`missing` finds for the cells the overrides name (or ``cells``; else the grid), and its report."""
    cells = chosen_cells(s, overrides) if cells is None else cells
    found = missing(s, cells)
    return found, report_text(found, overrides, described(cells))


def sweep_jobs(params: dict, arguments: list[str]) -> list[list[str]]:
    """Every job's overrides of a multirun, as Hydra's basic sweeper makes them: the sweeper's ``params`` (an
    experiment's grid), then the command line's, every combination of their comma lists."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([*(f"{k}={v}" for k, v in params.items()), *arguments])
    return BasicSweeper.split_arguments(parsed, None)[0]


def check_sweep(jobs: list[list[str]], compose) -> str | None:
    """What stops a whole sweep before it launches a job, as one message (None: it may start): each distinct
    configuration of its jobs composed and checked once (jobs that differ only in size and seed share one; those are
    plain numbers the schema checks alike), every training set the pool cannot fill, every input its cells lack."""
    configs: dict[tuple, list[str]] = {}
    for job in jobs:
        configs.setdefault(tuple(o for o in job if o.partition("=")[0] not in ("size", "seed")), job)
    errors: list[str] = []
    first = None
    chosen: list[Cell] = []
    for shape, job in configs.items():
        try:
            s = compose(job)
        except Exception as exc:  # a bad setting: the same for every job of this shape
            errors.append(f"{' '.join(job)}: {' '.join(str(exc).split())}")
            continue
        first = first or s
        for other in jobs:
            if tuple(o for o in other if o.partition("=")[0] not in ("size", "seed")) == shape:
                given = dict(o.partition("=")[::2] for o in other)
                chosen.append(Cell(s.corpus.name, s.leakage.name, int(given.get("size", s.run.size)), s.model.name,
                                   int(given.get("seed", s.run.seed))))
        errors += bad_sizes(s, [c for c in chosen if (c.corpus, c.leakage) == (s.corpus.name, s.leakage.name)])
    errors = list(dict.fromkeys(errors))
    found = missing(first, list(dict.fromkeys(chosen))) if first is not None else []
    if not errors and not found:
        return None
    lines = [f"the sweep of {len(jobs)} job(s) was not started: it would fail the same way in every job"]
    lines += [f"  - {e}" for e in errors]
    if found:
        lines.append(report_text(found, [o for o in jobs[0] if o.partition("=")[0] not in CELL_OVERRIDES],
                            f"{len(jobs)} job(s)"))
    return "\n".join(lines)


class MissingInputs(RuntimeError):
    """Inputs a run reads are not on this machine; the message is the one report of all of them."""
