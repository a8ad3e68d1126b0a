"""The grid as researchers run it: kill and resume, concurrent workers, failures, config changes, launchers."""

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from leakexp.cli.main import main
from leakexp.runner.registry import compose
from leakexp.stages.cell import Cell, grid_cells
from leakexp.grid.work import complete, grid_status
from leakexp.runner.registry import runner
from leakexp.runner.store import Store

GRID = ["data.queries_per_source=600", "corpus=toy_core17", "grid.corpora=[toy_core17]",
        "grid.leakages=[none,msm]", "grid.sizes=[64,128]", "grid.seeds=[1,2]", "grid.models=[knrm]"]
LEAKEXP = [sys.executable, "-m", "leakexp.cli.main"]


def _eval_markers(store: Store) -> dict[str, float]:
    return {str(p.parent.relative_to(store.root)): p.stat().st_mtime for p in store.path("evaluate").rglob("DONE.json")}


@pytest.mark.slow  # a grid killed and resumed in subprocesses (about 85 s); make test-all runs it
def test_kill_9_mid_grid_then_resume_equals_an_uninterrupted_run(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = subprocess.Popen(LEAKEXP + ["grid", f"store={killed}", *GRID], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = Store(killed)
    deadline = time.time() + 240
    while len(_eval_markers(store)) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = _eval_markers(store)
    assert 3 <= len(finished) < 8, "the kill must land mid-grid"
    computed_before = store.computed()
    assert subprocess.run(LEAKEXP + ["grid", f"store={killed}", *GRID], capture_output=True).returncode == 0
    after = _eval_markers(store)
    assert len(after) == 8
    assert all(after[k] == v for k, v in finished.items())  # no finished cell was recomputed
    redone = store.computed()[len(computed_before):]
    assert not set(finished) & set(redone)
    cfg = compose([f"store={killed}", *GRID])
    r = runner(cfg, readonly=True)
    done_cells = [c for c in grid_cells(cfg) if str(r.path(c.ask("evaluate")).relative_to(store.root)) in finished]
    assert len(done_cells) == len(finished)
    assert not {str(r.path(c.ask("train")).relative_to(store.root)) for c in done_cells} & set(redone)
    assert subprocess.run(LEAKEXP + ["grid", f"store={clean}", *GRID], capture_output=True).returncode == 0
    a = pd.read_csv(killed / "tables" / "toy" / "summary.csv")
    b = pd.read_csv(clean / "tables" / "toy" / "summary.csv")
    pd.testing.assert_frame_equal(a, b)
    assert complete(grid_status(compose([f"store={killed}", *GRID])))


@pytest.mark.slow  # about 30 s; the grid's own workers (below) and the SLURM tests also share work across processes
def test_two_processes_on_one_cell_compute_it_once(tmp_path):
    cell = [f"store={tmp_path}", *GRID, "leakage=msm", "size=64", "seed=1"]
    subprocess.run(LEAKEXP + ["toy", *cell], check=True, capture_output=True)  # shared upstream, once
    procs = [subprocess.Popen(LEAKEXP + ["cell", *cell], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    assert [p.wait(300) for p in procs] == [0, 0]
    computed = Store(tmp_path).computed()
    for stage in ("build/toy_core17/msm/64/", "train/toy_core17/msm/64/knrm/seed-1/",
                  "rerank/toy_core17/msm/64/knrm/seed-1/", "evaluate/toy_core17/msm/64/knrm/seed-1/"):
        assert sum(c.startswith(stage) for c in computed) == 1, stage
    assert sum(c.startswith("detect/") for c in computed) == 1


def test_a_failing_cell_does_not_stop_the_grid_and_shows_in_status(tmp_path, capsys, seeded_store):
    args = [f"store={seeded_store(tmp_path)}", *GRID[:4], "grid.sizes=[40,64]", "grid.seeds=[1]", "grid.models=[knrm]",
            "robustness.enabled=false"]
    assert main(["grid", *args]) == 1  # core17 fixes 24 leaked queries = 48 instances > 40
    assert "FAILED toy_core17/msm/40/knrm/seed-1: BuildError" in capsys.readouterr().err
    status = grid_status(compose(args))
    assert (status["evaluate"].done, status["evaluate"].missing) == (3, 1)
    assert status["build"].failed == 1 and "smaller than the 48 fixed leaked instances" in status["build"].failures[0][1]
    assert main(["status", *args]) == 1
    assert re.search(r"FAILED build/toy_core17/msm/40/[0-9a-f]{12}: BuildError", capsys.readouterr().out)


def test_a_model_change_redoes_training_and_below_only(tmp_path, seeded_store):
    base = [f"store={seeded_store(tmp_path)}", *GRID, "leakage=msm", "size=64", "seed=1"]
    assert main(["cell", *base]) == 0
    store = Store(tmp_path)
    n = len(store.computed())
    assert main(["cell", *base, "model.train.lr=0.02"]) == 0
    redone = store.computed()[n:]
    assert sorted(r.split("/")[0] for r in redone) == ["evaluate", "rerank", "train"]


@pytest.mark.slow  # two launchers over a grid in subprocesses (about 60 s); make test-all runs it
@pytest.mark.timeout(300)
def test_submitit_local_launcher_equals_the_basic_launcher(tmp_path):
    sweep = ["data.queries_per_source=600", "corpus=toy_core17", "leakage=none,msm", "size=64", "seed=1"]
    run = [sys.executable, "-m", "leakexp.cli.app", "-m"]
    basic = subprocess.run(run + [f"store={tmp_path / 'basic'}", *sweep], capture_output=True, text=True)
    local = subprocess.run(run + [f"store={tmp_path / 'local'}", "hydra/launcher=submitit_local",
                                  "hydra.launcher.timeout_min=5", *sweep], capture_output=True, text=True)
    assert basic.returncode == 0 and local.returncode == 0, local.stderr[-2000:]
    assert "Submitit 'local' sweep" in local.stdout + local.stderr
    for leakage in ("none", "msm"):
        cell = Cell("toy_core17", leakage, 64, "knrm", 1)
        a, b = (runner(compose([f"store={tmp_path / run}", "data.queries_per_source=600", "corpus=toy_core17"]),
                       readonly=True) for run in ("basic", "local"))
        assert a.path(cell.ask("evaluate")).name == b.path(cell.ask("evaluate")).name  # same config, same key
        pd.testing.assert_frame_equal(pd.read_parquet(a.path(cell.ask("evaluate")) / "perquery.parquet"),
                                      pd.read_parquet(b.path(cell.ask("evaluate")) / "perquery.parquet"))


def _stored_bytes(store: Path, stages=("build", "train", "rerank", "evaluate", "memorization")) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for stage in stages for p in sorted((store / stage).rglob("*")) if p.is_file() and p.name != "DONE.json"}


@pytest.mark.slow  # two grids, one in two worker processes (about 25 s); make test-slow and CI run it
def test_cells_in_two_processes_compute_shared_work_once_and_equal_one_process(tmp_path, capsys, seeded_store):
    """workers=2 runs the grid's jobs in two processes at once (each with one core's threads): every artifact is
    computed once, whichever process asks first, the robustness cells in the workers too, and the stored results
    are the bytes of a one-process run."""
    grid = [*GRID[:4], "grid.sizes=[64]", "grid.seeds=[1]", "grid.models=[knrm]", "robustness.enabled=true",
            "robustness.query_attacks=[char-any-1]", "robustness.doc_manipulations=[]", "robustness.ood=[]"]
    one, two = seeded_store(tmp_path / "one"), seeded_store(tmp_path / "two")
    assert main(["grid", f"store={two}", *grid, "workers=2"]) == 0
    assert "2/2 cells done" in capsys.readouterr().out
    computed = Store(two).computed()
    assert len(computed) == len(set(computed))  # nothing computed twice
    assert sum(c.startswith("memorization/") for c in computed) == 1  # the leaked cell's, once both are ranked
    rows = [line.split("\t") for line in (two / "logs" / "computed.tsv").read_text().splitlines()]
    robust = [int(pid) for _, pid, artifact, _ in rows if artifact.startswith("robustness/")]
    assert robust and os.getpid() not in robust  # the robustness cells ran in the pool, not after it in this process
    assert main(["grid", f"store={one}", *grid, "workers=1"]) == 0
    assert sorted(Store(one).computed()) == sorted(computed)
    stages = ("build", "train", "rerank", "evaluate", "memorization", "robustness")
    assert _stored_bytes(two, stages) == _stored_bytes(one, stages) != {}
    assert complete(grid_status(compose([f"store={two}", *grid])))


def test_the_grids_jobs_start_with_the_shared_work_and_end_with_the_robustness_cells(tmp_path):
    """Workers take the jobs in order: the embeddings, indexes and first-stage runs first (side by side instead of
    one worker computing them for the first cell while the others wait), the demo's audits next (long jobs beside
    the cells, not last and alone), the cells in grid order, the robustness cells, whose models the cells train."""
    from leakexp.runner.stage import Ask
    from leakexp.stages.robustness import family as robustness
    from leakexp.grid.work import demo_asks, grid_asks, grid_jobs

    cfg = compose(["experiment=demo", f"store={tmp_path}", "grid.sizes=[128]"])
    cells = grid_cells(cfg)
    jobs = grid_jobs(cfg, runner(cfg, readonly=True), cells, demo_asks(cfg))
    kinds = [j.kind for j in jobs]
    assert kinds == sorted(kinds, key=["ask", "cell", "robustness"].index)
    asks = [j.what for j in jobs if j.kind == "ask"]
    assert [a.stage for a in asks[:2]] == ["embed", "embed"] and asks[-2:] == [Ask.of("pair-audit"), Ask.of("graph-audit")]
    assert {a.stage for a in asks[2:-2]} == {"index", "firststage"}
    assert [a for a in asks if a.stage == "firststage"] == [Ask.of("firststage", corpus=c) for c in cfg.grid.corpora]
    assert [j.what for j in jobs if j.kind == "cell"] == cells
    assert [j.what for j in jobs if j.kind == "robustness"] == robustness.robustness_cells(cfg) != []
    assert str(jobs[-1]) == f"robustness {jobs[-1].what}"
    plain = compose([f"store={tmp_path}", "robustness.enabled=false"])  # no extras: the shared work, the cells
    rows = grid_asks(plain, None, cells[:1])
    shared = [a for row in ("embed", "index", "firststage") for a in rows[row]]
    assert [j.what for j in grid_jobs(plain, None, cells[:1])] == [*shared, cells[0]]


def test_workers_auto_is_one_per_core_on_a_cpu_and_one_on_a_gpu(monkeypatch, tmp_path, capsys):
    from leakexp.grid import work as grid

    monkeypatch.delenv("LEAKEXP_WORKERS", raising=False)  # the suite's own default (tests/conftest.py)
    monkeypatch.setattr(grid, "allocated_cpus", lambda: 2)
    cfg = compose(["device=cpu"])
    assert grid.cell_workers(cfg, 90) == 2 and grid.cell_workers(cfg, 1) == 1
    monkeypatch.setattr(grid, "allocated_cpus", lambda: 64)
    assert grid.cell_workers(cfg, 90) == 4  # at most 4: each worker holds its models and data
    monkeypatch.setattr(grid, "_cuda", lambda: True)
    assert grid.cell_workers(compose([]), 90) == 1  # device=auto with a GPU: one cell per GPU (gpu_local launcher)
    assert grid.cell_workers(compose(["device=cpu", "workers=3"]), 90) == 3
    assert main(["status", f"store={tmp_path}", "workers=0"]) == 2
    assert "config error: workers:" in capsys.readouterr().err
    # the default comes from LEAKEXP_WORKERS where set (the test suite runs one cell at a time per pytest worker)
    monkeypatch.setenv("LEAKEXP_WORKERS", "3")
    assert grid.cell_workers(compose(["device=cpu"]), 90) == 3
    assert grid.cell_workers(compose(["device=cpu", "workers=auto"]), 90) == 4
    monkeypatch.setenv("LEAKEXP_WORKERS", "none")
    assert main(["status", f"store={tmp_path}"]) == 2
    assert "the value comes from the environment variable LEAKEXP_WORKERS" in capsys.readouterr().err
