"""Cells under a scheduler: the CPUs a job was given, and which SLURM job holds which cell.

A SLURM launcher records, at submission, one small JSON file per cell under ``<store>/logs/jobs/`` (the cell, the
job id, when); ``leakexp status`` reads them back and asks ``squeue`` (then ``sacct``, for jobs that left the queue)
what each job is doing, so a cell waiting in the queue, running, requeued after a preemption, or killed by the
scheduler (time limit, memory) shows with its job id even though the store has no artifact of it yet.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

JOBS_DIR = ("logs", "jobs")
# squeue's and sacct's states, as status words (https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES)
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SUSPENDED",
          "PREEMPTED", "RESIZING", "SPECIAL_EXIT", "STOPPED"}
RUNNING = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
ENDED_BADLY = {"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "CANCELLED", "BOOT_FAIL", "DEADLINE"}


def allocated_cpus() -> int:
    """CPUs this process may use: SLURM's ``SLURM_CPUS_PER_TASK`` where set (without task affinity, e.g.
    TaskPlugin=task/none, the process sees the whole node), else the CPUs its affinity mask allows
    (``os.sched_getaffinity``: taskset, cgroups' cpusets, containers), not the machine's ``os.cpu_count()``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        cpus = min(cpus, int(slurm))
    return max(1, cpus)


def size_torch_threads() -> int:
    """Give PyTorch's intra-op pool the job's CPUs (:func:`allocated_cpus`) instead of every core of the node."""
    import torch

    n = allocated_cpus()
    if torch.get_num_threads() > n:
        torch.set_num_threads(n)
    return n


def no_gpu_driver() -> bool:
    """True where CUDA cannot be available (Linux without an NVIDIA driver loaded: no ``/dev/nvidiactl``, no
    ``/proc/driver/nvidia``, no WSL GPU ``/dev/dxg``; or macOS), known without importing torch, so the commands
    that compute nothing start fast on a CPU machine; False where torch must be asked."""
    if "torch" in sys.modules:
        return False
    if sys.platform == "darwin":
        return True
    return sys.platform.startswith("linux") and not any(
        os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg"))


def resolve_device(device: str = "auto") -> str:
    """The device a job computes on: ``auto`` is CUDA where a GPU is visible, else the CPU."""
    if device in ("auto", "cpu") and no_gpu_driver():
        return "cpu"
    if device == "cpu":
        return device
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={device} but no CUDA device is available; use device=cpu or device=auto")
    return device


def configure_precision(matmul: str = "highest", device: str = "cuda") -> None:
    """Set float32 matmul precision once per process, from config ``precision.matmul`` (call at start-up).

    ``highest`` (default): no TF32, fp32 matmuls and convolutions are exact IEEE fp32; ``high`` / ``medium``
    allow TF32 (faster fp32 matmuls on Ampere+). Training and re-ranking on CUDA run the heavy work under bf16
    autocast anyway (``precision.train_bf16``, ``precision.rerank_bf16``), so this only touches what stays fp32.
    Nothing else in leakexp changes these switches, so a re-rank right after training in the same process
    computes exactly what a re-rank of the stored model computes. On a CPU ``highest`` is torch's default, set
    without importing torch (``device``: where the runner computes).
    """
    if matmul not in ("highest", "high", "medium"):
        raise ValueError(f"precision.matmul={matmul!r}; use highest, high or medium")
    if matmul == "highest" and device == "cpu" and "torch" not in sys.modules:
        return  # torch starts so, and TF32 is a GPU's: nothing to set, torch need not be imported for it
    import torch

    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = matmul != "highest"


@contextmanager
def cpu_threads(n: int):
    """PyTorch's intra-op pool at ``n`` threads for the block (at most the job's CPUs), as it was after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(int(n), allocated_cpus())))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def compute_threads(cuda: bool, runtime):
    """Where an artifact is computed: on the CPU in ``runtime.cpu_threads`` PyTorch threads (default 1), as floats
    summed by more threads come out in another order and its bytes would depend on the machine and the workers, and
    with oneDNN off under ``cpu_kernels=portable`` (leakexp.runner.kernels)."""
    if cuda:
        return nullcontext()
    from leakexp.runner.kernels import use_onednn

    use_onednn(runtime.cpu_kernels)
    return cpu_threads(int(runtime.cpu_threads))


def _record_path(store_root: Path, cell: str) -> Path:
    return Path(store_root).joinpath(*JOBS_DIR, cell.replace("/", "__") + ".json")


def record_submission(store_root: Path, cell: str, job_id: str, cluster: str = "slurm", log: str = "") -> Path:
    """Note that ``cell`` was submitted as ``job_id`` (the latest submission of a cell wins)."""
    path = _record_path(store_root, cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"cell": cell, "job_id": str(job_id), "cluster": cluster, "submitted": time.time(),
                               "log": log}) + "\n")
    os.replace(tmp, path)
    return path


def record_failure(store_root: Path, cell: str, reason: str) -> Path | None:
    """Note beside the cell's latest submission (or alone, without a scheduler) that it failed and why: status
    names the reason also where the failure came before any artifact (a bad setting). ``SLURM_JOB_ID``: the job."""
    path = _record_path(store_root, cell)
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        rec = {"cell": cell, "job_id": "", "cluster": "", "submitted": None, "log": ""}
    job = os.environ.get("SLURM_JOB_ID", "")
    if job and not rec.get("job_id"):
        rec["job_id"] = job
    rec.update(error=reason.splitlines()[0][:500] if reason else "failed", failed_at=time.time())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(rec) + "\n")
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def submissions(store_root: Path) -> dict[str, dict]:
    """cell -> its latest submission record."""
    out = {}
    folder = Path(store_root).joinpath(*JOBS_DIR)
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = json.loads(p.read_text())
            out[str(rec["cell"])] = rec
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # SLURM's word: PENDING, RUNNING, REQUEUED, COMPLETED, FAILED, TIMEOUT, ...
    reason: str = ""  # squeue's reason (Priority, Resources, BeginTime, ...) or sacct's exit code
    node: str = ""


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def slurm_states(job_ids: list[str]) -> dict[str, JobState]:
    """What SLURM says of ``job_ids``: ``squeue`` for jobs in the queue, ``sacct`` (accounting) for those that left
    it. Jobs neither knows (no SLURM here, accounting off, purged) are absent."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    out: dict[str, JobState] = {}
    text = _run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i|%T|%r|%N"])
    for line in (text or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0] in ids:
            out[parts[0]] = JobState(parts[0], parts[1], parts[2] if parts[2] != "None" else "", parts[3])
    rest = [i for i in ids if i not in out]
    if rest:
        text = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(rest), "-o", "JobID,State,ExitCode,NodeList"])
        for line in (text or "").splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[0] in rest:
                state = parts[1].split()[0]  # "CANCELLED by 0" -> CANCELLED
                out[parts[0]] = JobState(parts[0], state, f"exit code {parts[2]}", parts[3])
    return out


def scheduled(store_root: Path, cells: list[str]) -> list[tuple[str, str, str]]:
    """(word, cell, detail) of every cell of ``cells`` (those not done) that its latest record shows under a
    scheduler or failed: ``queued`` (waiting, also requeued after a preemption), ``running``, or ``failed`` (the
    cell's one-line reason, or how the scheduler ended its job: time limit, memory, node failure, cancelled)."""
    records = submissions(store_root)
    wanted = {c: records[c] for c in cells if c in records}
    states = slurm_states([r["job_id"] for r in wanted.values() if r.get("job_id")])
    out = []
    for cell, rec in wanted.items():
        job = rec.get("job_id") or ""
        st = states.get(job)
        if st is not None and st.state in QUEUED:
            out.append(("queued", cell, f"SLURM job {job} {st.state}" + (f" ({st.reason})" if st.reason else "")))
        elif st is not None and st.state in RUNNING:
            out.append(("running", cell, f"SLURM job {job} {st.state}" + (f" on {st.node}" if st.node else "")))
        elif rec.get("error"):
            out.append(("failed", cell, (f"SLURM job {job}: " if job else "") + rec["error"]))
        elif st is not None and st.state in ENDED_BADLY:
            out.append(("failed", cell, f"SLURM job {job} ended {st.state} ({st.reason})"
                        + (f"; log: {rec['log']}" if rec.get("log") else "")))
    return out
