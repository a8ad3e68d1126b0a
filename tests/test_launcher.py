"""hydra/launcher=gpu_local: one grid cell per GPU at a time, each job seeing only its GPU. No GPU needed:
CUDA_VISIBLE_DEVICES is only an environment variable until CUDA starts."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import submitit
from submitit.local import local as submitit_local

from hydra_plugins.leakexp_launcher.gpu_local import resolve_gpus, schedule
from leakexp.runner.config import conf_dir


class FakeProcess:
    pid = 4242

    def poll(self):
        return 0


@pytest.fixture
def controllers(monkeypatch):
    """The environment submitit would give each job's process, captured instead of starting one."""
    seen = []

    def start_controller(folder, command, cuda_devices="", **kw):
        seen.append(cuda_devices)
        return FakeProcess()

    monkeypatch.setattr(submitit_local, "start_controller", start_controller)
    return seen


def test_submitit_local_alone_gives_every_job_the_same_gpus(tmp_path, controllers):
    """Why gpu_local exists: submitit's LocalExecutor (LocalExecutor._submit_command) sets CUDA_VISIBLE_DEVICES to
    range(gpus_per_node) for every job, so hydra/launcher=submitit_local with gpus_per_node=1 puts all on GPU 0."""
    ex = submitit.LocalExecutor(folder=tmp_path)
    ex.update_parameters(gpus_per_node=1, timeout_min=1)
    for _ in range(3):
        ex.submit(print, "cell")
    assert controllers == ["0", "0", "0"]


def _gpu_local_launcher(tmp_path, overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[f"store={tmp_path}", "hydra/launcher=gpu_local", *overrides],
                      return_hydra_config=True)
    return cfg.hydra.launcher, instantiate(cfg.hydra.launcher)


def test_the_config_gives_each_gpu_its_own_executor(tmp_path, controllers):
    conf, launcher = _gpu_local_launcher(tmp_path, ["hydra.launcher.gpus=[2,5,7]"])
    assert conf._target_ == "hydra_plugins.leakexp_launcher.gpu_local.GpuLocalLauncher"
    assert launcher.gpus == [2, 5, 7] and conf.gpus_per_node == 1
    for gpu in resolve_gpus(launcher.gpus):
        launcher.executor(gpu).submit(print, "cell")
    assert controllers == ["2", "5", "7"]  # the per-job CUDA_VISIBLE_DEVICES


def test_gpu_ids_come_from_the_config_or_the_environment(monkeypatch):
    assert resolve_gpus(3) == [0, 1, 2] and resolve_gpus([4, 1]) == [4, 1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert resolve_gpus(None) == [1, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5e1d8b2a")
    with pytest.raises(ValueError, match="by UUID.*hydra.launcher.gpus"):
        resolve_gpus(None)
    with pytest.raises(ValueError, match="no GPU"):
        resolve_gpus(0)
    with pytest.raises(ValueError, match="twice"):
        resolve_gpus([1, 1])


def test_schedule_keeps_one_job_per_gpu_and_starts_the_next_on_the_first_free_gpu():
    clock = {"t": 0}
    durations = [5, 1, 1, 1, 1, 3]
    log = []  # (job, gpu, start, end)

    def submit(job, gpu):
        log.append([job, gpu, clock["t"], clock["t"] + durations[job]])
        return len(log) - 1

    def done(handle):
        return clock["t"] >= log[handle][3]

    def poll(_):
        clock["t"] += 1

    import time as _time

    real_sleep = _time.sleep
    _time.sleep = poll
    try:
        results = schedule(list(range(6)), [0, 1], submit, done, result=lambda h: f"job{log[h][0]}", poll_s=1)
    finally:
        _time.sleep = real_sleep
    assert results == [f"job{i}" for i in range(6)]
    for gpu in (0, 1):  # never two jobs at once on one GPU
        spans = sorted((s, e) for _, g, s, e in log if g == gpu)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert [(job, gpu, start) for job, gpu, start, _ in log] == [(0, 0, 0), (1, 1, 0), (2, 1, 1), (3, 1, 2),
                                                                 (4, 1, 3), (5, 1, 4)]  # no GPU waits idle


@pytest.mark.slow
def _multirun(tmp_path, *overrides):
    """A 4-cell multirun through the gpu_local launcher with real submitit processes; each cell records the GPU it
    sees, its process and when it ran."""
    conf = tmp_path / "conf"
    (conf / "hydra" / "launcher").mkdir(parents=True)
    (conf / "hydra" / "launcher" / "gpu_local.yaml").write_text(
        (conf_dir() / "hydra" / "launcher" / "gpu_local.yaml").read_text())
    (conf / "config.yaml").write_text("cell: 0\nout: ???\nhydra:\n  sweep:\n    dir: ${out}/sweep\n")
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(f"""
        import json, os, time
        import hydra

        @hydra.main(config_path={str(conf)!r}, config_name="config", version_base="1.3")
        def main(cfg):
            start = time.time()
            time.sleep(1.0)
            with open(f"{{cfg.out}}/cell-{{cfg.cell}}.json", "w") as f:
                json.dump({{"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(), "start": start,
                           "end": time.time()}}, f)

        main()
    """))
    root = Path(__file__).resolve().parent.parent
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, str(app), "-m", "hydra/launcher=gpu_local", "hydra.launcher.gpus=[3,5]",
                           "hydra.launcher.poll_s=0.2", f"out={tmp_path}", "cell=1,2,3,4", *overrides],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads((tmp_path / f"cell-{i}.json").read_text()) for i in (1, 2, 3, 4)]


def test_a_multirun_runs_each_cell_on_its_own_gpu(tmp_path):
    cells = _multirun(tmp_path, "hydra.launcher.cells_per_job=1")
    assert len({c["pid"] for c in cells}) == 4
    assert {c["gpu"] for c in cells} == {"3", "5"}
    for a in cells:
        for b in cells:
            if a is not b and a["start"] < b["end"] and b["start"] < a["end"]:  # ran at the same time
                assert a["gpu"] != b["gpu"]


def test_one_process_runs_several_cells_in_turn(tmp_path):
    """cells_per_job=2: cells 1-2 and 3-4 each run in one process (start-up paid once), the two on different GPUs
    at the same time, and every cell still runs."""
    cells = _multirun(tmp_path, "hydra.launcher.cells_per_job=2")
    assert cells[0]["pid"] == cells[1]["pid"] != cells[2]["pid"] == cells[3]["pid"]
    assert cells[0]["gpu"] == cells[1]["gpu"] and cells[2]["gpu"] == cells[3]["gpu"]
    assert {cells[0]["gpu"], cells[2]["gpu"]} == {"3", "5"}
    assert cells[0]["end"] <= cells[1]["start"]  # in turn


def test_jobs_are_grouped_in_sweep_order():
    from hydra_plugins.leakexp_launcher.gpu_local import group_jobs

    assert group_jobs(list("abcdefg"), 3) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    assert group_jobs(list("ab"), 5) == [["a", "b"]]


# -- failures reach the launcher and the scheduler ---------------------------------------------------------------
# size=40 and 46 on toy_core17 are impossible (its 24 fixed leaked queries give 48 instances): each of these cells
# fails in its own job, quickly, as a real cell with a bad input does
FAILING = ["data.queries_per_source=600", "corpus=toy_core17", "leakage=msm", "model=knrm", "seed=1"]
APP = [sys.executable, "-m", "leakexp.cli.app", "-m"]


def _env():
    import os

    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


@pytest.mark.slow  # two Hydra jobs and a status in subprocesses (15-60 s on a busy machine)
def test_a_failed_cell_fails_the_multirun_after_the_others_ran(tmp_path):
    """The basic launcher: each failed cell is logged as it fails, the next cell still runs, the run exits
    non-zero, and the summary at the end names every failed cell with its one-line reason."""
    proc = subprocess.run(APP + [f"store={tmp_path}", *FAILING, "size=40,46"], capture_output=True, text=True,
                          timeout=300, env=_env())
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = proc.stderr[proc.stderr.index("leakexp-run: 2 cell(s) failed:"):]
    for size in (40, 46):
        assert f"FAILED toy_core17/msm/{size}/knrm/seed-1: ConfigError: size={size} is smaller than the 48" in summary
    status = subprocess.run([sys.executable, "-m", "leakexp.cli.main", "status", f"store={tmp_path}", *FAILING[:2],
                             "grid.corpora=[toy_core17]", "grid.leakages=[msm]", "grid.sizes=[40,46]",
                             "grid.models=[knrm]", "grid.seeds=[1]"], capture_output=True, text=True, env=_env())
    assert status.returncode == 1
    for size in (40, 46):  # the reason, though the cell failed before making any artifact
        assert f"FAILED toy_core17/msm/{size}/knrm/seed-1: ConfigError: size={size} is smaller" in status.stdout


def test_status_shows_cells_under_slurm_with_their_job_ids(tmp_path, monkeypatch):
    """squeue and sacct stand-ins: a queued (requeued) cell, a running one, one whose job the scheduler ended, one
    that failed with its reason; a finished job's cell is not listed (the store has it or status says so)."""
    from leakexp.runner.jobs import record_failure, record_submission, scheduled

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\nprintf '11|PENDING|BeginTime|\\n12|RUNNING|None|node3\\n'\n")
    (bin_dir / "sacct").write_text("#!/bin/sh\nprintf '13|TIMEOUT|0:0|node3\\n14|FAILED|1:0|node2\\n"
                                   "15|COMPLETED|0:0|node1\\n'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    for i, cell in enumerate("abcde", 11):
        record_submission(tmp_path, f"c/{cell}", str(i), log=f"/logs/{i}.out")
    monkeypatch.setenv("SLURM_JOB_ID", "14")
    record_failure(tmp_path, "c/d", "BuildError: the filler pool is exhausted\nmore")
    assert scheduled(tmp_path, ["c/a", "c/b", "c/c", "c/d", "c/e", "c/never"]) == [
        ("queued", "c/a", "SLURM job 11 PENDING (BeginTime)"),
        ("running", "c/b", "SLURM job 12 RUNNING on node3"),
        ("failed", "c/c", "SLURM job 13 ended TIMEOUT (exit code 0:0); log: /logs/13.out"),
        ("failed", "c/d", "SLURM job 14: BuildError: the filler pool is exhausted")]


def test_threads_and_workers_follow_the_job_allocation(monkeypatch):
    import os

    from leakexp.runner.jobs import allocated_cpus
    from leakexp.lib.trainer import loader_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert allocated_cpus() == 3 and loader_workers("auto", "cuda") == 2 and loader_workers("auto", "cpu") == 0
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})  # taskset / a cgroup cpuset, not cpu_count()
    assert allocated_cpus() == 2 and loader_workers("auto", "cuda") == 1


def test_a_job_with_a_failed_cell_fails_and_its_cells_are_read_back(tmp_path, monkeypatch):
    """A submitit job of two cells, one failing: the job process fails (sacct: FAILED), and the launcher still reads
    which cell failed and which finished."""
    from hydra.core.utils import JobStatus

    from hydra_plugins.leakexp_launcher.cells import CellGroup, job_returns

    here = Path(__file__).resolve().parent
    monkeypatch.setenv("PYTHONPATH", f"{here.parent}:{here}")  # the job process unpickles this module's fake
    ex = submitit.LocalExecutor(folder=tmp_path)
    ex.update_parameters(timeout_min=2)
    group = [(["size=64"],), (["size=40"],)]
    job = ex.submit(CellGroup(_FakeCells()), group)
    returns = job_returns(job, group)
    assert job.exception() is not None  # the job raised: under SLURM its process exits 1 (sacct: FAILED)
    assert [r.status for r in returns] == [JobStatus.COMPLETED, JobStatus.FAILED]
    assert returns[0].return_value == {"size": "64"}
    assert "CellsFailed: 1 of 2 cell(s) failed: size=40: ValueError: size 40 is impossible" in job.stderr()
    dead = ex.submit(_die)  # a job that died without a word: every cell of it counts as failed, with the job's error
    dead._results_timeout_s = 0  # no slow shared file system to wait for
    returns = job_returns(dead, group)
    assert [r.status for r in returns] == [JobStatus.FAILED] * 2 and isinstance(returns[0]._return_value, RuntimeError)


class _FakeCells:
    """Stands in for a launcher: runs a 'cell' per overrides list, failing for size=40."""

    def __call__(self, overrides):
        from hydra.core.utils import JobReturn, JobStatus

        size = overrides[0].split("=")[1]
        if size == "40":
            return JobReturn(overrides=overrides, status=JobStatus.FAILED,
                             _return_value=ValueError("size 40 is impossible"))
        return JobReturn(overrides=overrides, status=JobStatus.COMPLETED, _return_value={"size": size})


def _die():
    import os

    os._exit(3)


@pytest.mark.slow  # gpu_local's jobs are processes that each import leakexp (about 30 s)
def test_gpu_local_names_the_failed_cells_and_exits_non_zero(tmp_path):
    proc = subprocess.run(APP + [f"store={tmp_path}", *FAILING, "size=40,46", "hydra/launcher=gpu_local",
                                 "hydra.launcher.gpus=[0,1]", "hydra.launcher.cells_per_job=1",
                                 "hydra.launcher.poll_s=0.2", "hydra.launcher.timeout_min=5"],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "gpu_local: 2 of 2 cell(s) failed:" in out
    for size in (40, 46):
        assert re.search(rf"FAILED toy_core17/msm/{size}/knrm/seed-1 \(job \d+\): ConfigError: size={size} is smaller",
                         out), out[-3000:]


@pytest.mark.slow  # a real cell beside a failing one (about 70 s)
def test_the_other_cells_of_a_failing_multirun_finish(tmp_path):
    from leakexp.runner.registry import compose
    from leakexp.grid.work import grid_status

    proc = subprocess.run(APP + [f"store={tmp_path}", *FAILING, "size=40,64"], capture_output=True, text=True,
                          timeout=600, env=_env())
    assert proc.returncode == 1 and "leakexp-run: 1 cell(s) failed:" in proc.stderr, proc.stderr[-3000:]
    status = grid_status(compose([f"store={tmp_path}", "data.queries_per_source=600", "corpus=toy_core17",
                                  "grid.corpora=[toy_core17]", "grid.leakages=[msm]", "grid.sizes=[64]",
                                  "grid.seeds=[1]", "grid.models=[knrm]"]))
    assert status["evaluate"].done == 1


def _slurm_launcher(tmp_path, name, *overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[f"store={tmp_path}", f"hydra/launcher={name}", *overrides],
                      return_hydra_config=True)
    GlobalHydra.instance().clear()
    return cfg, instantiate(cfg.hydra.launcher)


@pytest.mark.parametrize("name", ["gpu_slurm", "cpu_slurm"])
def test_the_slurm_configs_write_the_sbatch_options_they_promise(tmp_path, name, monkeypatch):
    """gpu_slurm asks for a GPU on its partition; cpu_slurm for neither GPU nor gres (a CPU partition rejects them)
    and for little; each job is named after its cell; the plan counts as many cells per job as the launcher runs."""
    from leakexp.runner.registry import compose

    import submitit.slurm.slurm

    # submitit refuses to make an executor where srun is missing (SlurmExecutor.affinity): the script is built here
    # as on a cluster, on any machine
    monkeypatch.setattr(submitit.slurm.slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    cfg, launcher = _slurm_launcher(tmp_path, name)
    assert type(launcher).__name__ == "CellSlurmLauncher"
    assert launcher.cells_per_job == compose([]).plan.cells_per_job == 5
    script = launcher.executor("toy_core17.msm.64.knrm.s1+4")._executor._make_submission_file_text("cmd", "uid")
    flags = {line.split()[1] for line in script.splitlines() if line.startswith("#SBATCH")}
    assert "--job-name=toy_core17.msm.64.knrm.s1+4" in flags
    assert not any(f.startswith("--array") for f in flags)  # one sbatch per job
    if name == "gpu_slurm":
        assert {"--gpus-per-node=1", "--partition=gpu", "--cpus-per-task=8", "--signal=USR2@120"} <= flags
    else:
        assert not any("gpu" in f or "gres" in f or "partition" in f for f in flags), flags
        assert {"--cpus-per-task=2", "--mem=4GB", "--signal=USR2@60", "--time=120"} <= flags


def test_jobs_are_named_after_their_first_cell():
    from hydra_plugins.leakexp_launcher.slurm import job_name

    assert job_name(["robust04/msm/16000/monot5/seed-1"]) == "robust04.msm.16000.monot5.s1"
    assert job_name([f"core17/none/64/knrm/seed-{s}" for s in (1, 2, 3)]) == "core17.none.64.knrm.s1+2"


def test_a_preempted_jobs_exit_is_no_failure_of_the_artifact(tmp_path):
    """submitit's handler requeues a preempted (or timed-out) job, then sys.exit(-1)s inside whatever computes: the
    store must not record that as the artifact's failure (status would show the requeued cell as FAILED)."""
    from leakexp.runner.store import Store

    store = Store(tmp_path)
    path = store.path("train", "cell", "k")

    def preempted(tmp):
        raise SystemExit(-1)

    def broken(tmp):
        raise ValueError("bad input")

    with pytest.raises(SystemExit):
        store.ensure(path, {"a": 1}, preempted)
    assert not store.failure_path(path).exists() and not store.is_locked(path)
    with pytest.raises(ValueError):
        store.ensure(path, {"a": 1}, broken)
    assert "ValueError: bad input" in store.failure_path(path).read_text()
