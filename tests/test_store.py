import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakexp.runner.store import DONE, Store, atomic_write_text, config_hash


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
from leakexp.runner.store import Store
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


# -- nothing lost, nothing mixed ---------------------------------------------------------------------
def test_a_failing_recompute_keeps_the_finished_artifact(tmp_path):
    store = Store(tmp_path)
    path = store.path("stage", "a")
    store.ensure(path, {"k": 1}, lambda tmp: _write(tmp, "finished"))

    def boom(tmp):
        raise ZeroDivisionError("batch_size=0")

    with pytest.raises(ZeroDivisionError):
        store.ensure(path, {"k": 2}, boom)
    assert store.is_done(path, {"k": 1}) and (path / "a.txt").read_text() == "finished"


def test_keyed_paths_keep_two_configurations_apart(tmp_path):
    store = Store(tmp_path)
    a, b = store.keyed("train", "c", config={"lr": 1}), store.keyed("train", "c", config={"lr": 2})
    assert a.parent == b.parent == store.path("train", "c") and a != b
    store.ensure(a, {"lr": 1}, lambda tmp: _write(tmp, "one"))
    store.ensure(b, {"lr": 2}, lambda tmp: _write(tmp, "two"))
    assert (a / "a.txt").read_text() == "one" and (b / "a.txt").read_text() == "two"
    assert store.others(a) == [b]


def test_a_truncated_file_counts_as_missing_and_is_recomputed(tmp_path):
    store, calls = Store(tmp_path), []
    path = store.path("stage", "t")
    compute = lambda tmp: (calls.append(1), _write(tmp, "complete content"))[1]
    store.ensure(path, {"k": 1}, compute)
    (path / "a.txt").write_text("compl")  # truncated behind the marker's back
    assert not store.is_done(path, {"k": 1})
    store.ensure(path, {"k": 1}, compute)
    assert len(calls) == 2 and (path / "a.txt").read_text() == "complete content"


def test_verify_finds_a_changed_byte_that_keeps_the_size(tmp_path):
    store = Store(tmp_path)
    path = store.ensure(store.path("stage", "v"), {"k": 1}, lambda tmp: _write(tmp, "abc"))
    assert store.verify(path) == []
    (path / "a.txt").write_text("abd")
    assert store.is_done(path, {"k": 1})  # sizes match: reading stays cheap
    assert store.verify(path) == ["a.txt (checksum differs)"]


@pytest.mark.parametrize("content", ["[]", "null", '"done"', "{", '{"config_hash": 3}'])
def test_a_done_marker_that_is_not_a_marker_counts_as_missing(tmp_path, content):
    store = Store(tmp_path)
    path = store.path("stage", "m")
    path.mkdir(parents=True)
    (path / DONE).write_text(content)
    assert store.marker(path) is None and not store.is_done(path, {"k": 1})
    store.ensure(path, {"k": 1}, _write)
    assert store.is_done(path, {"k": 1})


def test_looking_at_locks_creates_no_lock_file(tmp_path):
    store = Store(tmp_path)
    path = store.path("stage", "never")
    assert not store.is_locked(path)
    assert not tmp_path.joinpath("stage").exists()


def test_a_store_root_that_is_a_file_is_a_clear_error(tmp_path):
    from leakexp.runner.store import StoreError

    f = tmp_path / "store"
    f.write_text("")
    with pytest.raises(StoreError, match="is a file, not a directory; point LEAKEXP_STORE"):
        Store(f)


HOLD_SCRIPT = """
import sys, time
from leakexp.runner.store import Store
store = Store(sys.argv[1])
def compute(tmp):
    print("computing", flush=True)
    time.sleep(4)
    (tmp / "a.txt").write_text("x")
store.ensure(store.path("stage", "w"), {"k": 1}, compute)
"""


def test_a_waiting_worker_says_whom_it_waits_for(tmp_path, caplog, monkeypatch):
    import logging

    import leakexp.runner.store as store_module

    monkeypatch.setattr(store_module, "WAIT_NOTICE_S", 0.5)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "computing"
    store, calls = Store(tmp_path), []
    with caplog.at_level(logging.INFO, logger="leakexp.runner.store"):
        store.ensure(store.path("stage", "w"), {"k": 1}, lambda tmp: (calls.append(1), _write(tmp))[1])
    holder.wait(30)
    assert calls == []  # the other worker computed it
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for stage/w")]
    assert waits and f"pid {holder.pid} on " in waits[0]
