"""leakexp's SLURM launcher (``hydra/launcher=gpu_slurm`` or ``cpu_slurm``): hydra-submitit-launcher's, with

- several cells per job (``cells_per_job``, as gpu_local's: start-up paid once per job, as ``leakexp plan`` counts);
- one ``sbatch`` per job, named after its cell (``toy_robust.msm.64.knrm.s1``; ``+4`` when it runs 4 more), so
  ``squeue`` and ``sacct`` say what runs where (an array would give every task one name);
- a job that fails when one of its cells fails (``sacct``: FAILED), the other jobs going on, and a launcher that
  waits for all, names the failed cells and their jobs, and exits non-zero;
- each cell's job id recorded in the store (``<store>/logs/jobs/``), which ``leakexp status`` shows while the cell
  is queued, running or requeued after a preemption.

submitit's SLURM executor (submitit/slurm/slurm.py, ``_make_sbatch_string``) writes ``#SBATCH --signal=USR2@<delay>``
and ``--requeue``; on USR2 its handler (submitit/core/job_environment.py, ``checkpoint_and_try_requeue``) calls the
job's ``checkpoint`` (:class:`~hydra_plugins.leakexp_launcher.cells.CellGroup` resubmits its group), runs
``scontrol requeue`` and exits; the requeued job finds the finished cells in the store. A preempted job is requeued
whatever ``max_num_timeout`` says; that counts how often a job that ran out of time is requeued.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

from hydra_plugins.leakexp_launcher.cells import CellGroup, group_jobs, job_returns, summarize

log = logging.getLogger(__name__)


def job_name(cells: Sequence[str]) -> str:
    """A job's name from its cells: the first cell, ``corpus.leakage.size.model.s<seed>``, and ``+N`` more."""
    first = re.sub(r"/seed-(\d+)$", r"/s\1", cells[0]).replace("/", ".")
    return first + (f"+{len(cells) - 1}" if len(cells) > 1 else "")


class CellSlurmLauncher(SlurmLauncher):
    """hydra-submitit-launcher's SlurmLauncher, a job per ``cells_per_job`` cells (see the module docstring)."""

    def __init__(self, cells_per_job: int = 1, **params: Any) -> None:
        super().__init__(**params)
        if int(cells_per_job) < 1:
            raise ValueError(f"hydra.launcher.cells_per_job={cells_per_job}; give 1 or more")
        self.cells_per_job = int(cells_per_job)

    def cell(self, overrides: Sequence[str]) -> tuple[str, Path | None]:
        """The cell a Hydra job runs, and its store (None where its config cannot be composed: the job fails and
        says why)."""
        from leakexp.cli.app import job_cell

        assert self.hydra_context is not None and self.config is not None
        try:
            cell, store = job_cell(self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides)))
            return str(cell), store
        except Exception:
            return "_".join(o.split("=")[-1] for o in filter_overrides(overrides)) or "cell", None

    def executor(self, name: str):
        import submitit

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        ex = submitit.AutoExecutor(cluster="slurm", folder=folder,
                                   slurm_max_num_timeout=int(params.pop("max_num_timeout", 0) or 0))
        params.pop("array_parallelism", None)  # one sbatch per job, no array
        params["name"] = name
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
        return ex

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from leakexp.runner.jobs import record_submission

        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        jobs = []
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            jobs.append(((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()),
                         self.cell(overrides)))
        groups = group_jobs(jobs, self.cells_per_job)
        log.info(f"slurm: {len(jobs)} cell(s) in {len(groups)} job(s) of up to {self.cells_per_job}; "
                 f"output {sweep_dir}")
        submitted = []
        for group in groups:
            args = [a for a, _ in group]
            name = job_name([c for _, (c, _) in group])
            job = self.executor(name).submit(CellGroup(self), args)
            log.info(f"\tjob {job.job_id} ({name}): {'; '.join(' '.join(filter_overrides(a[0])) for a in args)}")
            for _, (cell, store) in group:
                if store is not None:
                    record_submission(store, cell, job.job_id, log=str(job.paths.stdout))
            submitted.append((job, args))
        returns, ids = [], []
        for job, args in submitted:  # every job is waited for, failed or not
            for r in job_returns(job, args):
                returns.append(r)
                ids.append(job.job_id)
        summarize(returns, ids, launcher="slurm", names=[cell for _, (cell, _) in jobs])
        return returns
