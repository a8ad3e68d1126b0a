"""`leakexp plan`: job counts and hours from assumed or measured throughput, under the training budget."""

import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest

from leakexp.runner.registry import compose
from leakexp.cli.plan import load_measured, plan, render_plan
from leakexp.runner.config import ConfigError
from leakexp.runner.registry import runner


def fake_runner(cfg, **kwargs):
    """The real runner of ``cfg`` (its keys and sharing need no data) with a small stand-in training pool, so
    that planning loads nothing."""
    r = runner(cfg, **kwargs)
    pool = SimpleNamespace(queries=pd.DataFrame({"source": ["msmarco"] * 30 + ["orcas"] * 10}))
    get = r.get
    r.get = lambda ask: pool if ask.stage == "pool" else get(ask)
    return r


@pytest.fixture
def cfg(tmp_path):
    return compose([f"store={tmp_path}", "grid.models=[knrm,monot5]", "grid.sizes=[128,384]"])


# sizes x corpora x leakages, one seed: 9 cells per size ask for a model each; after sharing 7 are trained per size
# (the No-Leakage model of a size is one for every corpus: 1 + 3 corpora x {msm, test})
CELLS_PER_SIZE, TRAINED_PER_SIZE = 3 * 3, 1 + 3 * 2


def test_plan_uses_the_assumed_table_without_a_bench_file(cfg):
    info = plan(cfg, fake_runner(cfg))
    # the toy world's pool is counted from its settings (data.queries_per_source): nothing is generated
    assert info["queries"] == {"msmarco": 2000, "orcas": 2000} and info["queries_total"] == 4000
    assert info["throughput_source"] == {"knrm": "assumed", "monot5": "assumed"} and info["bench_file"] is None
    assert info["jobs_before_sharing"]["train"] == 2 * 2 * CELLS_PER_SIZE  # models x sizes x cells
    assert info["jobs"]["train"] == 2 * 2 * TRAINED_PER_SIZE
    cells_instances = (128 + 384) * TRAINED_PER_SIZE  # one epoch per distinct trained model
    assert info["training_instances_per_model"] == {"knrm": cells_instances, "monot5": cells_instances}
    assumed = cfg.plan_of("knrm").train_instances_per_s
    assert info["train_gpu_hours"]["knrm"] == pytest.approx(cells_instances / assumed / 3600)
    assert "not on your machine" in render_plan(info)


def test_a_models_assumed_figures_are_its_files_plan_block_and_key_nothing(cfg, tmp_path):
    """What plan assumes of a model lives with the model (conf/model/<name>.yaml, ``plan:``): halving KNRM's training
    rate doubles its GPU-hours and changes no artifact's key; a bad value is one line naming it."""
    from leakexp.runner.registry import compose

    from leakexp.stages.cell import Cell

    slower = compose([f"store={tmp_path}", "grid.models=[knrm,monot5]", "grid.sizes=[128,384]",
                      f"model_overrides.knrm.plan.train_instances_per_s={cfg.plan_of('knrm').train_instances_per_s / 2}"])
    a, b = plan(cfg, fake_runner(cfg)), plan(slower, fake_runner(slower))
    assert b["train_gpu_hours"]["knrm"] == pytest.approx(2 * a["train_gpu_hours"]["knrm"])
    assert b["train_gpu_hours"]["monot5"] == a["train_gpu_hours"]["monot5"]
    cell = Cell("toy_robust", "msm", 128, "knrm", 1)
    assert runner(cfg, readonly=True).key(cell.ask("train")) == runner(slower, readonly=True).key(cell.ask("train"))
    with pytest.raises(ConfigError, match="model.plan.rerank_docs_per_s: input should be greater than 0"):
        compose([f"store={tmp_path}", "model=knrm", "model.plan.rerank_docs_per_s=0"])


def test_plan_uses_measured_figures_from_the_bench_file(cfg, tmp_path):
    bench = tmp_path / "bench" / "gpu.json"
    bench.parent.mkdir(parents=True)
    bench.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "models": {
        "monot5": {"train_instances_per_s": 500.0, "rerank_docs_per_s": 4000.0}}}))
    info = plan(cfg, fake_runner(cfg))
    assert info["throughput_source"] == {"knrm": "assumed", "monot5": "measured (NVIDIA H100 80GB HBM3)"}
    assert info["train_gpu_hours"]["monot5"] == pytest.approx((128 + 384) * TRAINED_PER_SIZE / 500 / 3600)
    topics, depth = 30 + 12 + 12, int(cfg.rerank.depth)  # the toy corpora's topics, the demo's re-ranking depth
    # every cell re-ranks its own corpus: the shared No-Leakage model re-ranks each corpus once
    assert info["rerank_gpu_hours"]["monot5"] == pytest.approx(topics * 3 * 2 * depth / 4000 / 3600)
    assert "measured (NVIDIA H100" in render_plan(info) and str(bench) in render_plan(info)


def test_an_update_budget_sets_the_training_instances(tmp_path):
    cfg = compose([f"store={tmp_path}", "grid.models=[knrm]", "grid.sizes=[128,384]", "train.updates=320"])
    info = plan(cfg, fake_runner(cfg))
    # 320 updates x 8 pairs (the demo's KNRM batch) x 2 instances, whatever the size, per distinct trained model
    assert info["training_instances_per_model"]["knrm"] == 2 * (320 * 8 * 2) * TRAINED_PER_SIZE


def test_a_broken_bench_file_is_named(tmp_path):
    bad = tmp_path / "gpu.json"
    bad.write_text(json.dumps({"device": "x", "models": {"knrm": {"train_instances_per_s": 5}}}))
    with pytest.raises(ValueError, match="gpu.json: not a leakexp GPU benchmark file"):
        load_measured(bad)
    assert load_measured(tmp_path / "missing.json") is None


def test_plan_counts_robustness_jobs_and_time_when_enabled(tmp_path):
    # the demo's robustness: toy_core17 at its largest size, OOD toy_core18, two query attacks, stuffing
    base = [f"store={tmp_path}", "grid.models=[knrm]", "grid.sizes=[128,384]"]
    off = plan(compose([*base, "robustness.enabled=false"]), fake_runner(compose([*base, "robustness.enabled=false"])))
    assert off["robustness"] is None
    cfg = compose(base)
    info = plan(cfg, fake_runner(cfg))
    r = info["robustness"]
    cells = 3  # toy_core17 x {none, msm, test} x knrm x one seed at size 384
    assert r["jobs"]["robustness/own-corpus"] == cells and r["jobs"]["robustness/query-attack"] == 2 * cells
    assert r["jobs"]["robustness/doc-manipulation"] == cells
    # the None model's re-ranking of toy_core18 is the grid's own run; the two leaked models' are extra
    assert r["shared_ood_reranks"] == 1 and r["jobs"]["extra OOD re-rankings"] == 2
    depth, topics = int(cfg.rerank.depth), 12
    assert r["docs"]["knrm"] == 2 * topics * depth + 2 * cells * topics * depth + cells * 2 * topics
    assert r["gpu_hours"]["knrm"] == pytest.approx(r["docs"]["knrm"] / cfg.plan_of("knrm").rerank_docs_per_s / 3600)
    assert info["gpu_hours_total"] == pytest.approx(off["gpu_hours_total"] + r["gpu_hours"]["knrm"])
    assert "robustness (robustness.enabled): own-corpus 3" in render_plan(info)


def test_each_training_process_pays_its_start_up_assumed_or_measured(cfg, tmp_path):
    jobs = 2 * TRAINED_PER_SIZE  # per model: sizes x distinct trained models
    per_cell = compose([*cfg.overrides, "plan.cells_per_job=1"])
    info = plan(per_cell, fake_runner(per_cell))
    assert info["startup_hours"] == pytest.approx({"knrm": jobs * 5 / 3600, "monot5": jobs * 20 / 3600})
    info = plan(cfg, fake_runner(cfg))  # plan.cells_per_job = 5: one start-up per 5 cells
    processes = math.ceil(jobs / 5)
    assert info["startup_hours"] == pytest.approx({"knrm": processes * 5 / 3600, "monot5": processes * 20 / 3600})
    assert info["gpu_hours_total"] == pytest.approx(sum(info["train_gpu_hours"].values())
                                                    + sum(info["rerank_gpu_hours"].values())
                                                    + sum(info["startup_hours"].values())
                                                    + sum((info["robustness"] or {}).get("gpu_hours", {}).values()))
    bench = tmp_path / "bench" / "gpu.json"
    bench.parent.mkdir(parents=True)
    bench.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "models": {
        "knrm": {"train_instances_per_s": 3000.0, "rerank_docs_per_s": 20000.0, "startup_s": 3600.0}}}))
    info = plan(cfg, fake_runner(cfg))
    assert info["startup_hours"]["knrm"] == pytest.approx(processes)  # one hour per process, as measured
    assert "job start-up" in render_plan(info)


def test_plan_counts_the_cpu_hours_of_negatives_and_df_tables(cfg):
    info = plan(cfg, fake_runner(cfg))
    cpu = info["cpu"]
    # every distinct set (7 per size) pairs the queries of one 8,192-query negatives chunk at these sizes
    assert cpu["negatives_queries"] == 2 * TRAINED_PER_SIZE * 8192
    assert cpu["negatives_cpu_hours"] == pytest.approx(cpu["negatives_queries"] / 25_000 / 3600)
    text = render_plan(info)
    assert "negatives (CPU, one core; plan.negatives_queries_per_s): 114,688 training queries" in text
    # KNRM (Capreolus' defaults) and monoT5 read no idf: no df table to count
    assert cpu["df_cpu_hours"] == {} and cpu["df_unknown"] == [] and "df tables" not in text


def test_plan_df_hours_at_the_papers_scale(tmp_path):
    cfg = compose([f"store={tmp_path}", "grid.models=[duet]", "grid.sizes=[128000]", "data.queries_per_source=70000", "plan.df_words_per_s=440000",
                   "plan.negatives_queries_per_s=20000", "plan.collections.toy_robust={docs: 1000, words_per_doc: 100}",
                   "plan.collections.train={docs: 3213835, words_per_doc: 1100}", "~plan.collections.toy_core17",
                   "~plan.collections.toy_core18"])
    info = plan(cfg, fake_runner(cfg))
    cpu = info["cpu"]
    # Duet reads the training pool's df table and each ranked corpus's; MS MARCO documents: 3,213,835 x 1,100 words
    # at 440k words/s on one core, about 2.2 hours
    assert cpu["df_cpu_hours"]["train"] == pytest.approx(3_213_835 * 1100 / 440_000 / 3600)
    assert 2.1 < cpu["df_cpu_hours"]["train"] < 2.3
    assert cpu["df_cpu_hours"]["toy_robust"] == pytest.approx(1000 * 100 / 440_000 / 3600)
    assert sorted(cpu["df_unknown"]) == ["toy_core17", "toy_core18"]  # toy corpora have no size in the plan
    # a 128k set reads 9 chunks of 8,192 queries (64k pairs + slack); 7 distinct sets
    assert cpu["negatives_queries"] == 7 * 9 * 8192
    assert cpu["negatives_cpu_hours"] == pytest.approx(7 * 9 * 8192 / 20_000 / 3600)
    text = render_plan(info)
    assert "train ~2.23 h" in text and "toy_core17 size unknown" in text


def test_plan_and_status_of_the_paper_grid_read_each_config_file_and_key_each_artifact_once(tmp_path, monkeypatch):
    """plan and status key every artifact of the paper's 1,800 cells: each model file is parsed once (not once per
    training job) and each artifact's config is selected once (not once per dependant that asks for its key)."""
    import leakexp.runner.config as config_module
    import leakexp.runner.pipeline as pipeline_module
    from leakexp.grid.work import grid_status
    from omegaconf import OmegaConf

    from conftest import paper_env

    cfg = compose([f"store={tmp_path / 'store'}", *paper_env(tmp_path, monkeypatch)])
    config_module._parsed_yaml.cache_clear()
    loads, selects = [], []
    load, select = OmegaConf.load, pipeline_module.select
    monkeypatch.setattr(config_module.OmegaConf, "load", lambda path, *a, **k: loads.append(str(path)) or load(path, *a, **k))
    monkeypatch.setattr(pipeline_module, "select", lambda *a: selects.append(a) or select(*a))
    r = fake_runner(cfg, files=False)  # as `leakexp plan`: no input file read, no hub model needed
    info = plan(cfg, r)
    assert info["jobs_before_sharing"]["train"] == 1800
    assert len(loads) == len(set(loads)), sorted(p for p in set(loads) if loads.count(p) > 1)
    status = grid_status(cfg, runner=r)
    assert sum(st.total for st in status.values()) > 1800
    assert len(selects) == len(r._configs)  # one selection per distinct artifact, whichever asked first


def test_a_changed_config_file_is_read_again_and_a_returned_config_is_the_callers(tmp_path, monkeypatch):
    """The parsed group files are kept per file version: an edited model file is read anew, and a caller changing
    the config it got changes nobody else's."""
    import os
    import shutil

    from leakexp.runner.config import conf_dir, model_config

    shutil.copytree(conf_dir(), tmp_path / "conf")
    monkeypatch.setenv("LEAKEXP_CONF", str(tmp_path / "conf"))
    first = model_config("knrm")
    first["train"]["lr"] = 123.0
    assert model_config("knrm")["train"]["lr"] != 123.0
    path = tmp_path / "conf" / "model" / "knrm.yaml"
    text = path.read_text()
    path.write_text(text.replace("name: knrm", "name: knrm\ncomment: edited", 1))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert model_config("knrm")["comment"] == "edited"


def test_the_demo_plans_its_own_small_df_tables_and_the_paper_the_real_ones(tmp_path):
    """A df table is sized by the data the experiment reads: the toy world's training pool is not MS MARCO's 3.2
    million documents although both are named train (the demo's plan said ~2.18 h for it)."""
    for experiment, hours in (("demo", (0, 0.001)), ("paper", (2.1, 2.3))):
        cfg = compose([f"store={tmp_path}", f"experiment={experiment}", "grid.models=[duet]"])
        train = plan(cfg, fake_runner(cfg, readonly=True, files=False))["cpu"]["df_cpu_hours"]["train"]
        assert hours[0] <= train < hours[1], (experiment, train)


def test_plan_writes_nothing_and_counts_the_toy_worlds_queries_from_its_settings(tmp_path, capsys):
    """plan reads no input and computes nothing: the toy world it would generate is counted from its settings, the
    store is not made, and the job list goes only where --jobs says."""
    from leakexp.cli.main import main

    store = tmp_path / "store"
    assert main(["plan", f"store={store}", "data.queries_per_source=700"]) == 0
    out = capsys.readouterr().out
    assert "training queries: 1,400 (msmarco 700, orcas 700)" in out and "--jobs FILE writes them" in out
    assert not store.exists()
    assert main(["plan", f"store={store}", "--jobs", str(tmp_path / "jobs.tsv")]) == 0
    jobs = pd.read_csv(tmp_path / "jobs.tsv", sep="\t")
    assert len(jobs) == 90 and list(jobs.columns) == ["corpus", "leakage", "size", "model", "seed"]
    assert not store.exists()
