"""``leakexp-run``: one grid cell per Hydra job, for multiruns and cluster launchers.

    leakexp-run -m experiment=paper                                # the paper's grid (make grid)
    leakexp-run -m experiment=paper model=knrm,duet seed=1,2       # a partial grid
    leakexp-run -m experiment=paper hydra/launcher=gpu_slurm       # on a SLURM cluster's GPU partition
    leakexp-run -m experiment=demo corpus=toy_core17 leakage=none,msm size=64,128 hydra/launcher=cpu_slurm  # CPUs

A failed cell is recorded beside its artifact (``leakexp status`` shows it) and raised, so Hydra, the launcher and
the scheduler see it: the job exits non-zero (``sacct``: FAILED), the multirun goes on with the other cells and
ends non-zero, and the cells that failed are named at the end.
"""

from __future__ import annotations

import atexit
import logging
import sys
from pathlib import Path

from leakexp.runner.kernels import pin_environment

pin_environment(sys.argv[1:])  # the CPU kernels pinned before a math library loads (leakexp.runner.kernels)

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from leakexp.runner.config import conf_dir, validate_config
from leakexp.runner.jobs import record_failure, size_torch_threads
from leakexp.runner.loop import each
from leakexp.stages.cell import Cell
from leakexp.grid.work import robust, run_cell
from leakexp.stages.robustness.family import robustness_cells
from leakexp.runner.registry import check_requirements, compose, runner, typed

log = logging.getLogger("leakexp")
FAILED: list[str] = []  # "cell: reason" of every cell this process ran that failed


class CellFailed(RuntimeError):
    """A grid cell failed; the message names it and the one-line reason."""


def _summary() -> None:
    if FAILED:
        print(f"leakexp-run: {len(FAILED)} cell(s) failed:\n" + "\n".join(f"  FAILED {f}" for f in FAILED),
              file=sys.stderr, flush=True)


def job_cell(cfg: DictConfig) -> tuple[Cell, Path]:
    """The cell a job runs and its store, read off the composed values before any check (the one reading of raw
    values outside the runner's configuration and the registry): a job whose settings are refused is still named
    (the launchers' job names) and recorded against its cell."""
    cell = Cell(str(cfg.corpus.name), str(cfg.leakage.name), int(cfg.size), str(cfg.model.name), int(cfg.seed))
    return cell, Path(str(cfg.store)).expanduser().resolve()


class CheckSweep(Callback):
    """Before a multirun launches its first job (any launcher): every job's configuration composed and checked, and
    every input its cells read looked for (leakexp.grid.preflight); what would fail every job alike is said once and
    nothing is launched (exit 2)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from hydra.core.global_hydra import GlobalHydra

        from leakexp.grid.preflight import check_sweep, sweep_jobs

        params = OmegaConf.to_container(config.hydra.sweeper.get("params") or {}, resolve=False)
        jobs = sweep_jobs({k: str(v) for k, v in params.items()}, list(config.hydra.overrides.task))
        jobs = [[o for o in job if not o.lstrip("+~").startswith("hydra")] for job in jobs]
        held = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
        try:  # composing here re-initialises Hydra's global state: the multirun's is put back after
            message = check_sweep(jobs, compose)
        finally:
            GlobalHydra.instance().clear()
            if held is not None:
                GlobalHydra.instance().initialize(held)
        if message:
            print(f"leakexp-run: {message}", file=sys.stderr, flush=True)
            raise SystemExit(2)


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def run(cfg: DictConfig) -> dict:
    size_torch_threads()  # the job's CPUs, not every core of the node
    cell, store = job_cell(cfg)

    def work(cell: Cell) -> dict:
        validate_config(cfg)
        s = typed(cfg)
        check_requirements(s, models=[cell.model])  # the cell's model's files and weights, not the whole grid's
        r = runner(s, files=False)
        means = run_cell(r, cell)
        if r.settings.robustness.enabled and cell in robustness_cells(r.settings):
            robust(r, cell)
        return means

    # one cell per job: a failure in a stage is recorded next to its artifact; it is raised all the same (the
    # launcher goes on with the other jobs, and names this one)
    results = []
    failures = each([cell], work, desc="cell", progress=False, failed=lambda cell, exc: None,
                    done=lambda cell, means: (results.append(means), log.info("cell %s: %s", cell, means)))
    for cell, exc in failures:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.error("FAILED %s: %s", cell, reason)
        if not FAILED:
            atexit.register(_summary)
        FAILED.append(f"{cell}: {reason}")
        record_failure(store, str(cell), reason)  # status names it, with the job
        raise CellFailed(f"cell {cell} failed: {reason}") from exc
    return results[0]


if __name__ == "__main__":
    run()
