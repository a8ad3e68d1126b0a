"""The demo grid through leakexp's SLURM launcher (hydra/launcher=cpu_slurm) on a real one-node SLURM 22.05 with
accounting (tests/slurm_cluster.py): cells done in the store and in status, a failing cell FAILED in sacct with the
launcher exiting non-zero, a cancelled cell resumed without recomputing anything finished, a preempted cell
requeued (queued in status, never failed) that finishes, and an upstream artifact two cells share computed once.

Marked ``slurm``: `make test-slurm` runs them (it installs the Debian packages where missing; CI does so); they are
skipped unless ``-m slurm`` selects them, and skipped with the reason where SLURM cannot be installed or started.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_cluster import Unavailable, install, start_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
CELLS = ["data.queries_per_source=600", "corpus=toy_core17", "memorization.enabled=false", "robustness.enabled=false",
         "leakage=msm", "model=knrm"]
LAUNCHER = ["hydra/launcher=cpu_slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
            "hydra.launcher.cells_per_job=1", "hydra.launcher.timeout_min=20"]
TIMES: dict[str, float] = {}  # what the report prints: install, start-up, each test


@pytest.fixture(scope="module")
def cluster():
    t = time.time()
    try:
        TIMES["install_s"] = install()
        c = start_cluster()
    except Unavailable as exc:
        pytest.skip(f"no SLURM here: {exc}")
    TIMES["start_s"] = c.start_seconds
    TIMES["install_and_start_s"] = time.time() - t
    yield c
    c.stop()
    print("\nslurm timings: " + ", ".join(f"{k} {v:.1f}" for k, v in TIMES.items()))
    shutil.rmtree(c.root, ignore_errors=True)


@pytest.fixture(scope="module")
def store(cluster):
    return cluster.root / "store"


@pytest.fixture(autouse=True)
def _timed(request):
    t = time.time()
    yield
    TIMES[request.node.name] = time.time() - t


def _env(cluster) -> dict:
    return {**cluster.env, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _run_args(store, *overrides) -> list[str]:
    return [sys.executable, "-m", "leakexp.cli.app", "-m", f"store={store}", *CELLS, *LAUNCHER, *overrides]


def _launch(cluster, store, *overrides, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(_run_args(store, *overrides), capture_output=True, text=True, env=_env(cluster),
                          cwd=cluster.root, timeout=timeout)


def _jobs(output: str) -> dict[str, str]:
    """job name -> job id, from the launcher's log ('job 12 (toy_core17.msm.64.knrm.s1): …')."""
    return {name: job for job, name in re.findall(r"job (\d+) \(([^)]+)\):", output)}


def _status(cluster, store, sizes, seeds) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leakexp.cli.main", "status", f"store={store}", *CELLS[:4],
                           "grid.corpora=[toy_core17]", "grid.leakages=[msm]", f"grid.sizes=[{sizes}]",
                           "grid.models=[knrm]", f"grid.seeds=[{seeds}]"],
                          capture_output=True, text=True, env=_env(cluster), timeout=300)


def _computed(store) -> list[str]:
    log = Path(store) / "logs" / "computed.tsv"
    return [line.split("\t")[2] for line in log.read_text().splitlines()] if log.exists() else []


def _wait_for(what, check, timeout, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the launcher ended ({proc.returncode}) before {what}: {err[-3000:]}")
        time.sleep(0.5)
    pytest.fail(f"no {what} within {timeout}s")


def test_cells_finish_a_failing_cell_fails_and_shared_artifacts_are_computed_once(cluster, store):
    """Four cells, one job each: msm/46 is impossible (24 fixed leaked queries = 48 instances), msm/64 seeds 1 and 2
    run at the same time and share every artifact upstream of training."""
    proc = _launch(cluster, store, "size=46,64", "seed=1,2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    jobs = _jobs(out)
    assert set(jobs) == {f"toy_core17.msm.{size}.knrm.s{seed}" for size in (46, 64) for seed in (1, 2)}
    assert "slurm: 2 of 4 cell(s) failed:" in out
    for seed in (1, 2):
        assert (f"FAILED toy_core17/msm/46/knrm/seed-{seed} (job {jobs[f'toy_core17.msm.46.knrm.s{seed}']}): "
                "ConfigError: size=46 is smaller than the 48") in out, out[-4000:]
    states = cluster.settled(list(jobs.values()))
    print(f"\nsacct: {states}")
    assert {name: states[job] for name, job in jobs.items()} == {
        "toy_core17.msm.46.knrm.s1": "FAILED", "toy_core17.msm.46.knrm.s2": "FAILED",
        "toy_core17.msm.64.knrm.s1": "COMPLETED", "toy_core17.msm.64.knrm.s2": "COMPLETED"}
    names = cluster.run("sacct", "-n", "-P", "-X", "-j", ",".join(jobs.values()), "-o", "JobName").stdout.split()
    assert sorted(names) == sorted(jobs)  # jobs named after their cell, not 'app'

    computed = _computed(store)
    for shared in ("toy/", "detect/", "verify/", "build/toy_core17/msm/64/"):
        assert sum(c.startswith(shared) for c in computed) == 1, (shared, computed)
    for seed in (1, 2):
        assert sum(c.startswith(f"evaluate/toy_core17/msm/64/knrm/seed-{seed}/") for c in computed) == 1

    done = _status(cluster, store, "64", "1,2")
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"^evaluate\s+2\s+0\s+0", done.stdout, re.M), done.stdout
    failed = _status(cluster, store, "46", "1,2")
    for seed in (1, 2):
        assert (f"FAILED toy_core17/msm/46/knrm/seed-{seed}: SLURM job {jobs[f'toy_core17.msm.46.knrm.s{seed}']}: "
                "ConfigError: size=46 is smaller than the 48") in failed.stdout, failed.stdout


def _eval_done(store, size, seed) -> bool:
    return any(c.startswith(f"evaluate/toy_core17/msm/{size}/knrm/seed-{seed}/") for c in _computed(store))


def _held_lock(store, *overrides):
    """The store's lock on one cell's trained model, held by this process: the job computing that cell waits on
    it (as it would for another worker training it), so the cell is still running when the test acts."""
    from filelock import FileLock

    from leakexp.runner.registry import runner
    from leakexp.runner.registry import compose
    from leakexp.runner.store import Store
    from leakexp.stages.cell import cell_from_config

    r = runner(compose([f"store={store}", *CELLS, *overrides]), readonly=True, files=False)
    lock = Store.lock_path(r.path(cell_from_config(r.settings).ask("train")))
    lock.parent.mkdir(parents=True, exist_ok=True)
    held = FileLock(str(lock))
    held.acquire(timeout=0)
    return held


def _logged(store, cell: str, text: str) -> bool:
    """Whether the job log of the cell (its submission record names it: stdout, stderr beside it) holds ``text``."""
    records = list(Path(store, "logs", "jobs").glob(f"*{cell}*"))
    if not records:
        return False
    out = Path(json.loads(records[0].read_text())["log"])
    return any(text in f.read_text(errors="replace") for f in (out, out.with_suffix(".err")) if f.exists())


def test_a_cancelled_cell_resumes_and_nothing_finished_is_recomputed(cluster, store):
    """Two cells per job (seeds 1-2, then 3): once seed 1 is done its job is cancelled while it runs seed 2 (the
    user's scancel: SIGTERM, SIGKILL KillWait later); the same command again computes only what is missing.
    Seed 2's training waits on a lock the test holds until the cancel has landed, so it lands mid-cell."""
    args = ("size=96", "seed=1,2,3", "hydra.launcher.cells_per_job=2")
    gate = _held_lock(store, "size=96", "seed=2")
    proc = subprocess.Popen(_run_args(store, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(cluster), cwd=cluster.root)
    _wait_for("seed 1's evaluation", lambda: _eval_done(store, 96, 1), 300, proc)
    job = next(j for j, name in cluster.names().items() if name == "toy_core17.msm.96.knrm.s1+1")
    _wait_for("seed 2's training waiting on the held lock", lambda: _logged(store, "96__knrm__seed-2",
              "waiting for train/toy_core17/msm/96/knrm/seed-2/"), 120, proc)
    cluster.run("scancel", job)
    out, err = proc.communicate(timeout=600)
    gate.release()
    assert cluster.settled([job])[job] == "CANCELLED"
    assert not _eval_done(store, 96, 2)
    assert proc.returncode == 1, err[-3000:]
    assert re.search(rf"FAILED toy_core17/msm/96/knrm/seed-2 \(job {job}\): RuntimeError: job {job} "
                     r"ended without a result: it ended CANCELLED", out + err), (out + err)[-3000:]
    before = _computed(store)
    again = _launch(cluster, store, *args)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    redone = _computed(store)[len(before):]
    assert not set(redone) & set(before), redone  # nothing finished is computed again
    assert _status(cluster, store, "96", "1,2,3").returncode == 0


def test_a_preempted_cell_is_requeued_shows_as_queued_and_finishes(cluster, store):
    """USR2 (what SLURM sends before preempting a job or before its time limit) while the job runs its second cell:
    submitit requeues the job, status shows the cell queued (never failed), and the requeued job finishes it.
    The second cell's training waits on a lock the test holds until the requeue is seen: on a fast machine the
    cell would otherwise finish before the signal lands."""
    gate = _held_lock(store, "size=128", "seed=2")
    proc = subprocess.Popen(_run_args(store, "size=128", "seed=1,2", "hydra.launcher.cells_per_job=2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cluster),
                            cwd=cluster.root)
    _wait_for("seed 1's evaluation", lambda: _eval_done(store, 128, 1), 300, proc)
    job = next(j for j, name in cluster.names().items() if name == "toy_core17.msm.128.knrm.s1+1")
    _wait_for("seed 2's training waiting on the held lock", lambda: _logged(store, "128__knrm__seed-2",
              "waiting for train/toy_core17/msm/128/knrm/seed-2/"), 120, proc)
    # as submitit's own SlurmJob._interrupt (submitit/slurm/slurm.py) does: USR2 to the job's steps
    cluster.run("scancel", "--signal=USR2", job)
    # requeued: back in the queue; held there while status looks (a requeued job may start again within seconds)
    _wait_for("the requeue", lambda: cluster.squeue().get(job) in ("PENDING", "REQUEUED", "REQUEUE_HOLD"), 60, proc)
    cluster.run("scontrol", "hold", job)
    seen = []

    def queued():
        st = _status(cluster, store, "128", "2")
        line = [x for x in st.stdout.splitlines() if "toy_core17/msm/128/knrm/seed-2" in x]
        seen.extend(line)
        return any(x.startswith(f"QUEUED toy_core17/msm/128/knrm/seed-2: SLURM job {job} ") for x in line)

    _wait_for("the requeued cell in status", queued, 120, proc)
    gate.release()
    cluster.run("scontrol", "release", job)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert not [x for x in seen if x.startswith("FAILED")], seen  # never shown as failed
    print(f"\nstatus while requeued: {seen}")

    def history():  # accounting lags the job's end by a moment
        h = cluster.run("sacct", "-n", "-P", "-X", "-D", "-j", job, "-o", "JobID,State").stdout.split()
        return h if h and h[-1].endswith("|COMPLETED") else None

    history = _wait_for("the job's completion in sacct", history, 30)
    print(f"sacct of the preempted job: {history}")
    assert history[0].endswith("|REQUEUED"), history
    assert not list(Path(store).rglob(".*failed.json"))  # the store recorded no failure
    assert _status(cluster, store, "128", "1,2").returncode == 0
    assert json.loads(next(Path(store, "logs", "jobs").glob("toy_core17__msm__128__knrm__seed-2*")).read_text())[
        "job_id"] == job
