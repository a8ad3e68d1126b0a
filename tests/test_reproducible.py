"""Equal work gives equal bytes, and a checkpoint is checked when it is loaded."""

from __future__ import annotations

import os
import shutil

import pytest

from leakexp.stages.cell import Cell
from leakexp.runner.registry import compose
from leakexp.grid.work import grid_status
from leakexp.runner.registry import runner
from leakexp.runner.store import DONE

SETTINGS = ["data.queries_per_source=600", "grid.sizes=[64]", "grid.models=[knrm,monot5]",
            "grid.corpora=[toy_core17]"]
CELLS = [Cell("toy_core17", "msm", 64, m, 1) for m in ("knrm", "monot5")]


def _files(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != DONE}


@pytest.fixture(scope="module")
def store(tmp_path_factory, toy_prepared):
    import toy_upstream

    root = toy_upstream.seed(tmp_path_factory.mktemp("repro"), toy_prepared)
    cfg = compose([f"store={root}", *SETTINGS])
    r = runner(cfg)
    for cell in CELLS:
        r.ensure(cell.ask("evaluate"))
    return root, cfg


def test_recomputing_training_reranking_and_evaluation_gives_the_same_bytes(store):
    root, cfg = store
    r = runner(cfg)
    for cell in CELLS:
        paths = [r.path(cell.ask(s)) for s in ("train", "rerank", "evaluate")]
        before = [_files(p) for p in paths]
        assert all(before)
        for p in paths:
            shutil.rmtree(p)
        runner(cfg).ensure(cell.ask("evaluate"))
        after = [_files(p) for p in paths]
        for p, b, a in zip(paths, before, after):
            assert a.keys() == b.keys(), p
            differ = [f for f in b if a[f] != b[f]]
            assert differ == [], f"{p.relative_to(root)}: {differ}"
            text = b"".join(v for k, v in b.items() if k.endswith((".json", ".csv", ".txt")))
            assert str(root).encode() not in text and b".tmp-" not in text  # no absolute or temporary path


def test_a_checkpoint_damaged_in_place_is_found_when_loaded_and_recomputed(store, caplog):
    root, cfg = store
    cell = CELLS[0]
    model = runner(cfg).path(cell.ask("train"))
    weights = model / "model.pt"
    good = weights.read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0xFF  # same size: only a checksum can tell
    weights.write_bytes(bytes(damaged))
    assert grid_status(cfg)["train"].done == 2  # status without --verify compares sizes only
    runner(cfg).ensure(cell.ask("evaluate"))  # nothing loads the checkpoint: finished work is not re-read
    assert weights.read_bytes() == bytes(damaged)
    shutil.rmtree(runner(cfg).path(cell.ask("rerank")))  # the re-ranking must load the model again
    with caplog.at_level("WARNING"):
        runner(cfg).ensure(cell.ask("rerank"))
    assert weights.read_bytes() == good  # recomputed: the same bytes as before the damage
    assert any("recomputing" in m and "checksum differs" in m for m in caplog.messages)


def test_an_unreadable_marker_counts_as_damaged(store):
    root, cfg = store
    path = runner(cfg).path(CELLS[0].ask("evaluate"))
    marker = path / DONE
    text = marker.read_text()
    marker.write_text(text[: len(text) // 2])  # not valid JSON
    try:
        status = grid_status(cfg)
        assert status["evaluate"].damaged == 1 and status["evaluate"].stale == 0
    finally:
        marker.write_text(text)


@pytest.mark.slow
def test_a_cell_computed_with_more_cpu_threads_has_the_same_bytes(tmp_path_factory, toy_prepared):
    """A process with two PyTorch threads (``leakexp cell`` on two cores) stores the bytes a one-thread grid worker
    stores: computes run in ``cpu_threads`` (1) threads. With two, the sums come out in another order and monoBERT's
    history and scores differ in their last bits, which the second half shows."""
    import torch
    import toy_upstream

    cell = Cell("toy_core17", "msm", 64, "monobert", 1)
    before = torch.get_num_threads()
    stored = {}
    try:
        for name, threads, overrides in (("one", 1, []), ("two", 2, []), ("two-unpinned", 2, ["cpu_threads=2"])):
            root = toy_upstream.seed(tmp_path_factory.mktemp(f"threads-{name}"), toy_prepared)
            cfg = compose([f"store={root}", *SETTINGS, "grid.models=[monobert]", *overrides])
            torch.set_num_threads(threads)
            r = runner(cfg)
            r.ensure(cell.ask("evaluate"))
            assert torch.get_num_threads() == threads  # the process's own setting is back after each compute
            stored[name] = {s: _files(r.path(cell.ask(s))) for s in ("train", "rerank")}
    finally:
        torch.set_num_threads(before)
    assert stored["two"] == stored["one"]
    if len(os.sched_getaffinity(0)) >= 2:  # with two threads at hand, unpinned they sum in another order
        assert stored["two-unpinned"]["rerank"] != stored["one"]["rerank"]
