"""hydra/launcher=gpu_local: one grid cell per GPU at a time, each job seeing only its GPU. No GPU needed:
CUDA_VISIBLE_DEVICES is only an environment variable until CUDA starts."""

import json
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
