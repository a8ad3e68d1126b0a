import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakexp.store import DONE, Store, atomic_write_text, config_hash


def _write(tmp: Path, text="x") -> dict:
    (tmp / "a.txt").write_text(text)
    return {"n": 1}


def test_config_hash_ignores_key_order_and_changes_with_values():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_atomic_write_leaves_only_the_final_file(tmp_path):
    atomic_write_text(tmp_path / "t.md", "hello")
    assert (tmp_path / "t.md").read_text() == "hello"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.md"]


def test_ensure_computes_once_and_records_figures(tmp_path):
    store, calls = Store(tmp_path), []
    compute = lambda tmp: (calls.append(1), _write(tmp))[1]
    p = store.ensure(store.path("stage", "a"), {"k": 1}, compute)
    store.ensure(store.path("stage", "a"), {"k": 1}, compute)
    assert len(calls) == 1
    marker = json.loads((p / DONE).read_text())
    assert marker["figures"] == {"n": 1} and marker["config_hash"] == config_hash({"k": 1})
    assert (p / "a.txt").read_text() == "x"


def test_changed_config_redoes_the_artifact(tmp_path):
    store, calls = Store(tmp_path), []
    path = store.path("stage", "a")
    store.ensure(path, {"k": 1}, lambda tmp: (calls.append(1), _write(tmp, "one"))[1])
    store.ensure(path, {"k": 2}, lambda tmp: (calls.append(2), _write(tmp, "two"))[1])
    assert calls == [1, 2]
    assert (path / "a.txt").read_text() == "two"
    assert store.is_done(path, {"k": 2}) and not store.is_done(path, {"k": 1})


def test_failed_compute_leaves_no_artifact_and_records_the_error(tmp_path):
    store = Store(tmp_path)
    path = store.path("stage", "bad")

    def boom(tmp):
        (tmp / "half.txt").write_text("half")
        raise ValueError("broken input x.tsv")

    with pytest.raises(ValueError):
        store.ensure(path, {"k": 1}, boom)
    assert not path.exists()
    assert [p.name for p in path.parent.iterdir() if "tmp" in p.name] == []
    assert "broken input x.tsv" in json.loads(store.failure_path(path).read_text())["error"]
    store.ensure(path, {"k": 1}, _write)  # a retry succeeds and clears the failure
    assert not store.failure_path(path).exists()


def test_partial_directory_without_marker_is_redone(tmp_path):
    store = Store(tmp_path)
    path = store.path("stage", "p")
    path.mkdir(parents=True)
    (path / "stale.txt").write_text("from a killed run")
    store.ensure(path, {"k": 1}, _write)
    assert sorted(p.name for p in path.iterdir()) == [DONE, "a.txt"]


KILL_SCRIPT = """
import os, sys
from pathlib import Path
from leakexp.store import Store
store = Store(sys.argv[1])
def compute(tmp):
    (tmp / "a.txt").write_text("partial")
    os._exit(9)   # killed in the middle of the work
store.ensure(store.path("stage", "k"), {"k": 1}, compute)
"""


def test_killed_worker_leaves_no_done_marker_and_next_run_completes(tmp_path):
    r = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(tmp_path)])
    assert r.returncode == 9
    store = Store(tmp_path)
    path = store.path("stage", "k")
    assert not (path / DONE).exists()
    store.ensure(path, {"k": 1}, _write)
    assert (path / "a.txt").read_text() == "x"
    assert [p.name for p in path.parent.iterdir() if ".tmp-" in p.name] == []


def _worker(root: str, log: str) -> None:
    store = Store(root)

    def compute(tmp):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        return _write(tmp)

    store.ensure(store.path("stage", "shared"), {"k": 1}, compute)


def test_two_processes_on_one_artifact_compute_it_once(tmp_path):
    log = tmp_path / "calls.log"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "s"), str(log))) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(log.read_text().split()) == 1
    assert Store(tmp_path / "s").is_done(tmp_path / "s" / "stage" / "shared", {"k": 1})
