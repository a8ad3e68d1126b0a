"""What leakexp's launchers (gpu_local, gpu_slurm / cpu_slurm) share: several grid cells per job, a job that
fails when one of its cells fails, and a summary that names the failed cells.

A job runs a group of Hydra jobs (cells) one after another in one process (:class:`CellGroup`). Hydra's ``run_job``
turns a cell's exception into a FAILED ``JobReturn``, so a process that only returned them would end with exit
code 0 (``sacct``: COMPLETED 0:0). A group with a failed cell therefore saves its per-cell returns beside submitit's
result file and raises :class:`CellsFailed`: the job exits non-zero (``sacct``: FAILED), and :func:`collect` still
reads back which cells of it failed and which finished. A group whose process died without a word (killed,
out of memory, out of time) counts each of its cells as failed with the job's error.

A preempted (or timed-out) SLURM job is requeued by submitit (``checkpoint``: the group is submitted again as it
was); finished cells are found in the store and skipped.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus, filter_overrides

log = logging.getLogger(__name__)


class CellsFailed(RuntimeError):
    """Some cells of a job failed; the message names them (one line each)."""


def _cells_pickle(result_pickle: Path, job_id: str) -> Path:
    return Path(result_pickle).with_name(f"{job_id}_cells.pkl")


def reason(ret: JobReturn) -> str:
    exc = ret._return_value
    text = f"{type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


class CellGroup:
    """The callable a submitit job runs: ``launcher(*args)`` for each Hydra job of ``group``, in turn."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher

    def __call__(self, group: Sequence[tuple]) -> list[JobReturn]:
        import cloudpickle
        import submitit

        returns = [self.launcher(*args) for args in group]
        failed = [r for r in returns if r.status == JobStatus.FAILED]
        if failed:
            env = submitit.JobEnvironment()
            path = _cells_pickle(env.paths.result_pickle, env.job_id)
            path.write_bytes(cloudpickle.dumps(returns))
            raise CellsFailed(f"{len(failed)} of {len(returns)} cell(s) failed: "
                              + "; ".join(f"{' '.join(filter_overrides(r.overrides or []))}: {reason(r)}"
                                          for r in failed))
        return returns

    def checkpoint(self, group: Sequence[tuple]) -> Any:
        """submitit calls this on SLURM's warning signal (preemption, time limit): resubmit the group as it was."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, group)


def job_returns(job: Any, group: Sequence[tuple]) -> list[JobReturn]:
    """The per-cell returns of a finished job of :class:`CellGroup`, also when it failed."""
    import cloudpickle

    try:
        return list(job.results()[0])
    except Exception as exc:  # the job failed: its cells' own returns if it saved them, else the job's error
        path = _cells_pickle(job.paths.result_pickle, job.job_id)
        if path.exists():
            try:
                return list(cloudpickle.loads(path.read_bytes()))
            except Exception:  # unreadable: fall through to the job's error
                pass
        error = RuntimeError(f"job {job.job_id} ended without a result: {_last_line(exc)} (log: {job.paths.stderr})")
        return [JobReturn(overrides=list(args[0]), status=JobStatus.FAILED, _return_value=error) for args in group]


def _last_line(exc: BaseException) -> str:
    """submitit's word on a job without a result, short: 'ended CANCELLED by 0', else its first line."""
    text = str(exc)
    state = re.search(r"\(state: ([^)]*)\)", text)
    if state:
        return f"it ended {state.group(1)}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines or [type(exc).__name__])[0][:300]


def summarize(returns: Sequence[JobReturn], job_ids: Sequence[str] | None = None, launcher: str = "",
              names: Sequence[str] | None = None) -> None:
    """Log how many cells finished, and every failed cell with its job and the one-line reason."""
    failed = [(i, r) for i, r in enumerate(returns) if r.status != JobStatus.COMPLETED]
    prefix = f"{launcher}: " if launcher else ""
    if not failed:
        log.info(f"{prefix}{len(returns)} cell(s) done")
        return
    lines = [f"{prefix}{len(failed)} of {len(returns)} cell(s) failed:"]
    for i, r in failed:
        why = reason(r)
        named = re.match(r"^CellFailed: cell (\S+) failed: (.*)$", why)  # leakexp-run names the cell itself
        if named:
            name, why = named.groups()
        else:
            name = names[i] if names else " ".join(filter_overrides(r.overrides or []))
        job = f" (job {job_ids[i]})" if job_ids else ""
        lines.append(f"  FAILED {name}{job}: {why}")
    log.error("\n".join(lines))


def group_jobs(jobs: Sequence[Any], per_group: int) -> list[list[Any]]:
    """Consecutive jobs in groups of ``per_group`` (the sweep's last override varies fastest: the seeds of one
    training set and model come together)."""
    return [list(jobs[s : s + per_group]) for s in range(0, len(jobs), per_group)]
