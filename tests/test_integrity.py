"""Nothing lost, nothing mixed: what a hostile but fair user does to a store, and what they see."""

import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from leakexp.cli.main import main
from leakexp.runner.registry import compose
from leakexp.stages.cell import Cell, grid_cells
from leakexp.grid.work import grid_status
from leakexp.runner.stage import Ask
from leakexp.runner.registry import runner
from leakexp.runner.store import Store

GRID = ["data.queries_per_source=600", "corpus=toy_core17", "grid.corpora=[toy_core17]", "grid.leakages=[none,msm]",
        "grid.sizes=[64]", "grid.seeds=[1]", "grid.models=[knrm]", "leakage=msm", "size=64", "seed=1",
        "robustness.enabled=false"]  # the demo's robustness cells: not what these tests are about
CELL = Cell("toy_core17", "msm", 64, "knrm", 1)
LEAKEXP = [sys.executable, "-m", "leakexp.cli.main"]


@pytest.fixture(scope="module")
def grid_store(tmp_path_factory, toy_prepared):
    """A finished two-cell grid (KNRM on toy_core17, no / MSM leakage) and its tables."""
    import toy_upstream

    root = toy_upstream.seed(tmp_path_factory.mktemp("integrity"), toy_prepared)
    assert main(["grid", f"store={root}", *GRID]) == 0
    return root


def _snapshot(root):
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _tables(root):
    out = root / "tables" / "toy"
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".csv", ".md", ".tex")}


def test_a_bad_override_fails_before_any_work_and_deletes_nothing(grid_store, capsys):
    before = _snapshot(grid_store)
    assert main(["cell", f"store={grid_store}", *GRID, "model.train.batch_size=0"]) == 2
    assert "model.train.batch_size: input should be greater than 0 (got 0)" in capsys.readouterr().err
    assert main(["cell", f"store={grid_store}", *GRID, "evaluate.measures=[nDGC@10,P@1]"]) == 2
    assert "cannot parse 'nDGC@10'" in capsys.readouterr().err
    assert _snapshot(grid_store) == before


def test_another_configuration_never_mixes_into_the_tables(grid_store, capsys):
    cfg = compose([f"store={grid_store}", *GRID])
    tables = _tables(grid_store)
    assert main(["cell", f"store={grid_store}", *GRID, "rerank.depth=10"]) == 0
    capsys.readouterr()
    # the depth-100 results are still there, found by status and tables of the first configuration
    assert all(st.done == st.total for st in grid_status(cfg).values())
    assert main(["tables", f"store={grid_store}", *GRID]) == 0
    assert _tables(grid_store) == tables
    # and the depth-10 configuration sees only its own cell; the rest are stale or missing
    other_cfg = compose([f"store={grid_store}", *GRID, "rerank.depth=10"])
    other = grid_status(other_cfg)
    assert (other["evaluate"].done, other["evaluate"].stale) == (1, 1)
    # every trained model of the grid (one per distinct training artifact: No-Leakage models are shared
    # across corpora) is reused, since re-ranking depth does not touch training
    r = runner(other_cfg, readonly=True)
    trained = {r.path(c.ask("train")) for c in grid_cells(other_cfg)}
    assert len(trained) == 2  # this grid: toy_core17 x {none, msm} x 64 x knrm x seed 1
    assert other["train"].done == len(trained)


def test_a_failed_cell_is_named_in_every_caption_instead_of_silently_dropping_out(grid_store, tmp_path):
    cfg = compose([f"store={grid_store}", *GRID])
    p = runner(cfg)
    none_cell = Cell("toy_core17", "none", 64, "knrm", 1)
    failed = p.path(none_cell.ask("evaluate"))
    saved = tmp_path / "saved"
    failed.rename(saved)  # the cell's evaluation is gone and its last attempt failed
    p.store.failure_path(failed).write_text('{"error": "RuntimeError: out of memory"}')
    try:
        assert main(["tables", f"store={grid_store}", *GRID]) == 0
        table = (grid_store / "tables" / "toy" / "table4.md").read_text()
        assert "INCOMPLETE: 1 grid cell(s) have no result" in table and "1 failed (toy_core17/none/64/knrm/seed-1)" in table
        assert "1 failed" in (grid_store / "tables" / "toy" / "summary.md").read_text()
        incomplete = pd.read_csv(grid_store / "tables" / "toy" / "incomplete.csv")
        assert incomplete.to_dict("records") == [{"corpus": "toy_core17", "leakage": "none", "size": 64,
                                                  "model": "knrm", "seed": 1, "state": "failed"}]
    finally:
        p.store.failure_path(failed).unlink()
        saved.rename(failed)
    assert main(["tables", f"store={grid_store}", *GRID]) == 0
    assert "INCOMPLETE" not in (grid_store / "tables" / "toy" / "table4.md").read_text()


def test_a_truncated_run_is_recomputed_not_failed_forever(grid_store):
    cfg = compose([f"store={grid_store}", *GRID])
    p = runner(cfg)
    run = p.path(CELL.ask("rerank")) / "run.parquet"
    good, original = pd.read_parquet(run), run.read_bytes()
    run.write_bytes(original[:100])
    try:
        status = grid_status(cfg)
        assert status["rerank"].damaged == 1 and "run.parquet (size 100" in status["rerank"].notes[0][2]
        n = len(p.store.computed())
        assert main(["cell", f"store={grid_store}", *GRID]) == 0
        assert [c.split("/")[0] for c in p.store.computed()[n:]] == ["rerank"]
        pd.testing.assert_frame_equal(pd.read_parquet(run), good)
    finally:  # a failure here must not leave the module's shared store damaged for the tests after it
        if p.state(CELL.ask("rerank"))[0] == "damaged":
            run.write_bytes(original)


def test_status_verify_finds_corruption_that_keeps_the_size(grid_store, capsys):
    p = runner(compose([f"store={grid_store}", *GRID]))
    f = p.path(CELL.ask("evaluate")) / "perquery.parquet"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    original = f.read_bytes()
    f.write_bytes(bytes(data))
    try:
        assert main(["status", f"store={grid_store}", *GRID]) == 0  # sizes match: the cheap check passes
        capsys.readouterr()
        assert main(["status", "--verify", f"store={grid_store}", *GRID]) == 1
        out = capsys.readouterr().out
        assert "DAMAGED evaluate/toy_core17/msm/64/knrm/seed-1/" in out and "perquery.parquet (checksum differs)" in out
    finally:
        f.write_bytes(original)


def test_status_of_an_empty_store_writes_nothing_and_has_upstream_rows(tmp_path, capsys):
    root = tmp_path / "empty"
    root.mkdir()
    assert main(["status", f"store={root}", *GRID]) == 1
    out = capsys.readouterr().out
    assert list(root.iterdir()) == []  # no lock files, no folders
    status = grid_status(compose([f"store={root}", *GRID]))
    assert {"toy", "index", "embed", "detect", "verify", "build", "train", "rerank", "evaluate"} <= set(status)
    assert sum(st.running for st in status.values()) == 0
    assert status["evaluate"].missing == 2 and "running" in out.splitlines()[0]


def test_tables_on_an_empty_store_is_an_error_that_says_what_to_run(tmp_path, capsys):
    assert main(["tables", f"store={tmp_path}", *GRID]) == 1
    err = capsys.readouterr().err
    assert "holds no finished cell" in err and "make demo" in err


def test_a_read_only_store_is_a_one_line_error(grid_store, monkeypatch, capsys):
    monkeypatch.setattr(Store, "writable", lambda self: False)
    assert main(["tables", f"store={grid_store}", *GRID]) == 2
    assert main(["demo", f"store={grid_store}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("is read-only; use a writable copy" in line for line in err)


@pytest.mark.parametrize("override, message", [
    ("seed=x", "seed='x' must be an integer"),
    ("modle=knrm", "did you mean model=...?"),
    ("device=gpu", "device=gpu is unknown; use auto, cpu, cuda or cuda:N"),
    ("grid.seeds=[1,b]", "grid.seeds.1: input should be a valid integer (got 'b')"),
])
def test_bad_overrides_are_one_line_errors_before_any_work(tmp_path, capsys, override, message):
    assert main(["cell", f"store={tmp_path}", *GRID, override]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_store_pointing_at_a_file_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    f = tmp_path / "not-a-dir"
    f.write_text("")
    monkeypatch.setenv("LEAKEXP_STORE", str(f))  # the store's default comes from the environment
    assert main(["status", *GRID]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a directory" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a grid in a subprocess until it embeds (about 25 s); make test-slow and CI run it
def test_ctrl_c_is_a_one_line_message_not_a_traceback(tmp_path):
    cfg = compose([f"store={tmp_path}", *GRID])
    # the embeddings' resumable chunks: written once SBERT is loaded and embedding runs, well inside the run (an
    # interrupt that lands in a finaliser while modules load, e.g. sentence-transformers' on a busy machine, is
    # swallowed by Python itself)
    embed = runner(cfg, readonly=True).path(Ask.of("embed", source="msmarco"))
    chunks = embed.parent / f"{embed.name}.partial"
    # as a terminal's Ctrl-C reaches it: SIGINT handled even where the suite itself runs with SIGINT ignored (a job
    # started in the background by a non-interactive shell, nohup), which a child would otherwise inherit
    proc = subprocess.Popen(LEAKEXP + ["grid", f"store={tmp_path}", *GRID], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not chunks.exists() and not embed.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert chunks.exists() or embed.exists(), "the run never started embedding"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted; re-run the same command to resume" in err and "Traceback" not in err
