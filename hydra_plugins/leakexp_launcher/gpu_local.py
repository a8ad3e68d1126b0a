"""A Hydra launcher that keeps every GPU of one workstation busy: one grid cell per GPU at a time.

submitit's local executor (submitit/local/local.py, ``LocalExecutor._submit_command``) gives every job the same
``CUDA_VISIBLE_DEVICES`` (``range(gpus_per_node)`` or ``visible_gpus[:gpus_per_node]``) and hydra-submitit-launcher
starts all jobs of a sweep at once, so N cells would share GPU 0. This launcher runs one submitit LocalExecutor per
GPU (``visible_gpus=[g]``): a job sees only its GPU, and the next cell starts on whichever GPU frees first.
Selected by ``hydra/launcher=gpu_local`` (conf/hydra/launcher/gpu_local.yaml); Hydra instantiates launchers only
from the ``hydra_plugins`` namespace package, hence this module's place.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher
from omegaconf import OmegaConf

from hydra_plugins.leakexp_launcher.cells import CellGroup, group_jobs, job_returns, summarize

log = logging.getLogger(__name__)

# executor parameters of hydra-submitit-launcher's BaseQueueConf that the local executor understands
_EXECUTOR_KEYS = ("timeout_min", "tasks_per_node", "nodes", "stderr_to_stdout")


def resolve_gpus(gpus: int | Sequence[int] | None) -> list[int]:
    """GPU ids to use: a list as given, N -> 0..N-1, None -> those CUDA_VISIBLE_DEVICES lists, else all GPUs."""
    if gpus is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            try:
                return [int(g) for g in visible.split(",") if g.strip()]
            except ValueError:
                raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} names devices by UUID; give integer ids with "
                                 "hydra.launcher.gpus=[0,1,...]") from None
        import torch

        gpus = torch.cuda.device_count()
    if isinstance(gpus, int):
        gpus = list(range(gpus))
    gpus = [int(g) for g in gpus]
    if not gpus:
        raise ValueError("hydra/launcher=gpu_local found no GPU; set hydra.launcher.gpus=[0,1,...] or use the basic "
                         "launcher")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"hydra.launcher.gpus={gpus} lists a GPU twice")
    return gpus


def schedule(jobs: Sequence[Any], gpus: Sequence[int], submit: Callable[[Any, int], Any],
             done: Callable[[Any], bool], result: Callable[[Any], Any], poll_s: float = 1.0) -> list:
    """Run ``jobs`` with at most one per GPU at a time; ``submit(job, gpu)`` starts one and returns a handle.

    Results come back in the order of ``jobs``."""
    pending = deque(enumerate(jobs))
    free = deque(gpus)
    running: dict[int, tuple[int, Any]] = {}
    results: list = [None] * len(jobs)
    while pending or running:
        while pending and free:
            i, job = pending.popleft()
            gpu = free.popleft()
            running[gpu] = (i, submit(job, gpu))
        finished = [g for g, (_, h) in running.items() if done(h)]
        for gpu in finished:
            i, handle = running.pop(gpu)
            results[i] = result(handle)
            free.append(gpu)
        if not finished:
            time.sleep(poll_s)
    return results


class GpuLocalLauncher(LocalLauncher):
    """hydra-submitit-launcher's local launcher, one job per GPU at a time (see the module docstring)."""

    def __init__(self, gpus: int | Sequence[int] | None = None, poll_s: float = 2.0, cells_per_job: int = 1,
                 **params: Any) -> None:
        super().__init__(**params)
        if OmegaConf.is_config(gpus):
            gpus = OmegaConf.to_container(gpus, resolve=True)
        if int(cells_per_job) < 1:
            raise ValueError(f"hydra.launcher.cells_per_job={cells_per_job}; give 1 or more")
        self.gpus = gpus
        self.poll_s = float(poll_s)
        self.cells_per_job = int(cells_per_job)

    def executor(self, gpu: int):
        """A submitit LocalExecutor whose jobs see only ``gpu`` (CUDA_VISIBLE_DEVICES=<gpu>)."""
        import submitit

        ex = submitit.LocalExecutor(folder=self.params["submitit_folder"])
        ex.update_parameters(gpus_per_node=1, visible_gpus=[int(gpu)],
                             **{k: self.params[k] for k in _EXECUTOR_KEYS if self.params.get(k) is not None})
        return ex

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None
        gpus = resolve_gpus(self.gpus)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info(f"gpu_local: {len(job_overrides)} jobs on GPUs {gpus}, one at a time per GPU; output {sweep_dir}")
        executors = {g: self.executor(g) for g in gpus}
        jobs = []
        for idx, overrides in enumerate(job_overrides, initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            jobs.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))

        # several cells one after another in one process (imports, word vectors and CUDA start-up paid once);
        # a process whose cell failed exits non-zero, and the others go on
        groups = group_jobs(jobs, self.cells_per_job)

        def submit(group, gpu):
            log.info(f"gpu_local: job{'s' if len(group) > 1 else ''} #{', #'.join(str(a[2]) for a in group)} "
                     f"on GPU {gpu}")
            return group, executors[gpu].submit(CellGroup(self), group)

        results = schedule(groups, gpus, submit, done=lambda h: h[1].done(),
                           result=lambda h: [(h[1].job_id, r) for r in job_returns(h[1], h[0])], poll_s=self.poll_s)
        returns = [r for group in results for _, r in group]
        summarize(returns, [j for group in results for j, _ in group], launcher="gpu_local")
        return returns
