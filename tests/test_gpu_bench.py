"""The GPU benchmark's monoT5 / monoBERT rows (`python benchmarks/run.py gpu`, `make bench-gpu`) run on a CPU with
small models, so the one command a GPU machine runs cannot rot while no GPU is at hand: a baseline and a fast row
for scoring and training, each with its rate, compile seconds and, scoring, its distance to fp32 scores; the file
they write is what `leakexp plan experiment=paper` reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench(tmp_path: Path, models: str, eager: bool) -> tuple[dict[str, str], dict]:
    """The gpu section on this CPU with tiny models and one update: its `name: value` lines and its file."""
    out = tmp_path / "store" / "bench" / "gpu.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LEAKEXP_BENCH_DEVICE": "cpu", "LEAKEXP_BENCH_SHAPES": "tiny",
           "LEAKEXP_BENCH_MODELS": models, "LEAKEXP_BENCH_UPDATES": "1", "LEAKEXP_BENCH_FILE": str(out),
           "LEAKEXP_BENCH_EAGER": "1" if eager else "0", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "gpu"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    return lines, json.loads(out.read_text())


def check_rows(name: str, lines: dict, data: dict, extra: str) -> None:
    for row in ("baseline", "fast", extra):
        assert float(lines[f"gpu_rerank_{name}_{row}_docs_per_s"]) > 0
        assert float(lines[f"gpu_rerank_{name}_{row}_compile_s"]) >= 0
        assert 0 <= float(lines[f"gpu_rerank_{name}_{row}_max_diff_vs_fp32"]) < 0.1
    for row in ("baseline", "fast"):
        assert float(lines[f"gpu_train_{name}_{row}_instances_per_s"]) > 0
    fig = data["models"][name]
    assert fig["rerank_docs_per_s"] == fig["rows"]["rerank_fast"]["docs_per_s"]  # what plan reads: the fast row
    assert fig["train_instances_per_s"] == fig["rows"]["train_fast"]["instances_per_s"]
    assert fig["rows"]["rerank_baseline"]["compute"]["legacy"] and fig["rows"]["rerank_fast"]["score_batch_size"] == 128


def test_the_gpu_bench_prints_baseline_and_fast_rows_on_a_cpu(tmp_path):
    """monoBERT's rows without compiling (seconds); the compiled run of both models is the slow test below."""
    from leakexp.cli.plan import load_measured

    lines, data = bench(tmp_path, "monobert", eager=True)
    check_rows("monobert", lines, data, "fast_bf16_weights")
    assert data["device"] == "cpu" and data["shapes"] == "tiny"
    assert not data["models"]["monobert"]["rows"]["rerank_fast"]["compute"]["compile"]
    measured = load_measured(tmp_path / "store" / "bench" / "gpu.json")
    assert measured["rerank_docs_per_s"]["monobert"] == data["models"]["monobert"]["rerank_docs_per_s"]


@pytest.mark.slow
def test_the_gpu_bench_compiles_both_models_and_plan_reads_its_file(tmp_path):
    lines, data = bench(tmp_path, "monot5,monobert", eager=False)
    check_rows("monot5", lines, data, "fast_beyond")
    check_rows("monobert", lines, data, "fast_bf16_weights")
    t5 = data["models"]["monot5"]["rows"]
    assert t5["rerank_fast"]["compute"] == {"bf16_weights": True, "compile": True, "bias_once": False,
                                            "single_query": False, "legacy": False}
    assert t5["rerank_fast"]["compile_s"] > 0 and t5["train_fast"]["compile_s"] > 0
    bert = data["models"]["monobert"]["rows"]  # experiment=paper scores monoBERT eagerly; its compiled row beside
    assert not bert["rerank_fast"]["compute"]["compile"] and bert["rerank_fast_compiled"]["compute"]["compile"]
    assert bert["train_fast"]["compute"]["compile"]
    assert "rerank_fast_compiled" not in t5
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LEAKEXP_STORE": str(tmp_path / "store")}
    plan = subprocess.run([sys.executable, "-m", "leakexp.cli.main", "plan", "experiment=paper"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert str(tmp_path / "store" / "bench" / "gpu.json") in plan.stdout
    rows = {line.split()[0]: line for line in plan.stdout.splitlines() if line.startswith("  mono")}
    assert "measured (cpu)" in rows["monot5"] and "measured (cpu)" in rows["monobert"]
    assert "assumed" in next(line for line in plan.stdout.splitlines() if line.startswith("  knrm"))
