"""``leakexp check`` and the checks before any work (leakexp/grid/preflight.py): every input a grid or a cell lacks in
one report, for every corpus at once, asking only for what the cell's model reads; ``status`` of one cell's rows; a
multirun refused once, before any job, when every job would fail alike; README's paper recipe, from nothing placed
to a clean check, on small local files shaped like the real ones."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from leakexp.cli.main import main

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CORPORA = ("robust04", "core17", "core18")
CELL = ["corpus=robust04", "leakage=msm", "size=16000", "seed=3"]


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """experiment=paper on a machine with none of its inputs: no variants, GloVe, annotations or hub models."""
    for corpus in CORPORA:
        monkeypatch.delenv(f"LEAKEXP_VARIANTS_{corpus.upper()}", raising=False)
    monkeypatch.delenv("LEAKEXP_GLOVE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LEAKEXP_DOWNLOADS", str(tmp_path / "downloads"))
    monkeypatch.chdir(tmp_path)
    return ["experiment=paper", f"store={tmp_path / 'store'}"]


def _items(report: str) -> list[str]:
    """The inputs a report names, one per ``  - `` line."""
    return [line[4:] for line in report.splitlines() if line.startswith("  - ")]


def test_check_names_every_missing_input_of_every_corpus_in_one_report(bare, tmp_path, capsys):
    from leakexp.toolkit.annotations import FINAL_NAMES

    assert main(["check", *bare]) == 1
    out = capsys.readouterr().out
    assert len(re.findall(r"input\(s\) missing for", out)) == 1  # one report
    assert out.startswith(f"{len(_items(out))} input(s) missing for the configured grid:\n")
    items = _items(out)
    for corpus in CORPORA:  # every corpus at once, not Core 2017's after Robust04's are supplied
        assert f"query variants of {corpus}" in items
    for name in FINAL_NAMES:
        assert f"SPIRE-22 annotations {name} (verify.annotations)" in items
    assert "word vectors glove.6B.300d.txt (embeddings of knrm, duet, pacrr)" in items
    for model, setting in (("sentence-transformers/paraphrase-MiniLM-L6-v2", "detect.sbert"),
                           ("t5-base", "model_overrides.monot5.checkpoint"),
                           ("bert-base-uncased", "model_overrides.monobert.checkpoint")):
        assert any(i.startswith(f"Hugging Face model {model} at ") and i.endswith(f"({setting})") for i in items)
    assert not any("SPIRE-22 run" in i for i in items)  # the authors' full runs: no stage reads them
    # each with where it comes from and where it goes
    assert len(re.findall(r"^      from: ", out, re.M)) == len(re.findall(r"^      to:   ", out, re.M)) == len(items)
    glove = out.split("word vectors glove.6B.300d.txt")[1].splitlines()
    assert glove[1].strip() == "from: leakexp fetch --only glove experiment=paper (from " \
                               "https://nlp.stanford.edu/data/glove.6B.zip)" and glove[2].strip() == "to:   glove.6B.300d.txt"
    annotations = out.split(f"SPIRE-22 annotations {FINAL_NAMES[0]}")[1].splitlines()
    assert annotations[2].strip() == \
        f"to:   {tmp_path / 'downloads' / 'SPIRE-22@f3ab030' / 'manual-annotations' / FINAL_NAMES[0]}"
    assert not (tmp_path / "store").exists() and not (tmp_path / "downloads").exists()  # reads, writes nothing


def test_a_monot5_cell_asks_no_glove_and_a_knrm_cell_does(bare, capsys):
    """What a cell asks for follows from what its model declares: monoT5 reads no word vectors, KNRM does; neither
    asks for another model's weights."""
    assert main(["check", *bare, *CELL, "model=monot5"]) == 1
    monot5 = capsys.readouterr().out
    assert monot5.startswith(f"{len(_items(monot5))} input(s) missing for cell robust04/msm/16000/monot5/seed-3:")
    assert "glove" not in monot5 and "bert-base-uncased" not in monot5 and "Hugging Face model t5-base" in monot5
    assert main(["check", *bare, *CELL, "model=knrm"]) == 1
    knrm = capsys.readouterr().out
    assert "word vectors glove.6B.300d.txt (embeddings of knrm)" in _items(knrm)
    assert "t5-base" not in knrm and "bert-base-uncased" not in knrm
    # the rest is the same: detection's model, the annotations, every corpus's variants and collections
    assert set(_items(monot5)) - set(_items(knrm)) == {i for i in _items(monot5) if "t5-base" in i}
    # `leakexp cell` refuses with that same report, before any work, and asks for no GloVe either
    assert main(["cell", *bare, *CELL, "model=monot5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("leakexp: ") and err.removeprefix("leakexp: ") == monot5


def test_check_of_the_demo_is_clean(tmp_path, capsys):
    assert main(["check", f"store={tmp_path / 'store'}"]) == 0
    assert capsys.readouterr().out == "all inputs present for the configured grid\n"
    assert not (tmp_path / "store").exists()


def test_status_of_one_seed_counts_that_cells_rows_only(tmp_path, capsys):
    """``status seed=2`` reports the cells of seed 2 (here, of a one-seed grid: none done), not the whole grid."""
    store = f"store={tmp_path / 'store'}"

    def rows(*overrides: str) -> dict[str, list[int]]:
        assert main(["status", store, *overrides]) == 1
        out = capsys.readouterr().out.splitlines()
        return {line.split()[0]: [int(x) for x in line.split()[1:]] for line in out[1:]
                if re.match(r"^[a-z][a-z0-9_/-]* +\d", line)}

    grid = rows("grid.seeds=[1,2]")
    one = rows("grid.seeds=[1,2]", "seed=2")
    assert one["train"][-1] * 2 == grid["train"][-1] > 0  # half the models: those of seed 2
    assert one["evaluate"][-1] * 2 == grid["evaluate"][-1]
    assert one["build"][-1] == grid["build"][-1]  # the training sets do not depend on the seed
    assert rows("grid.seeds=[1,2]", "seed=1,2") == grid  # a comma list: those cells
    beyond = rows("seed=2")  # the demo's grid has one seed: its cells with seed 2
    assert beyond["train"][-1] == one["train"][-1]
    knrm = rows("grid.seeds=[1,2]", "model=knrm", "seed=2")
    assert 0 < knrm["train"][-1] < one["train"][-1]


def test_a_sweep_that_would_fail_in_every_job_is_checked_once_without_launching(tmp_path):
    """``leakexp-run -m`` (Hydra's basic launcher): the sweep is checked whole before its first job; the missing
    inputs are said once, exit 2, and no job ran (no job folder, no multirun.yaml)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKEXP_VARIANTS_") and k != "LEAKEXP_GLOVE"}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1",
               LEAKEXP_DOWNLOADS=str(tmp_path / "downloads"))
    store = tmp_path / "store"
    run = subprocess.run([sys.executable, "-m", "leakexp.cli.app", "-m", "experiment=paper", "corpus=robust04",
                          "leakage=none,msm", "size=1000", "model=knrm,duet", "seed=1,2", f"store={store}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr[-3000:]
    err = run.stderr
    assert err.count("was not started") == 1 and err.startswith("leakexp-run: the sweep of 8 job(s) was not started")
    assert err.count("input(s) missing for 8 job(s)") == 1
    assert "word vectors glove.6B.300d.txt (embeddings of knrm, duet)" in err
    for corpus in CORPORA:
        assert err.count(f"query variants of {corpus}") == 1
    assert "Traceback" not in err and "FAILED" not in err
    assert not list(store.rglob("multirun.yaml")) and not list(store.rglob("*_knrm_s*"))


def test_a_sweep_check_reports_a_bad_setting_and_a_size_the_pool_cannot_fill_once():
    from leakexp.grid.preflight import check_sweep, sweep_jobs
    from leakexp.runner.registry import compose

    jobs = sweep_jobs({}, ["corpus=toy_core17", "leakage=msm", "size=64,100000", "model=knrm", "seed=1,2"])
    assert len(jobs) == 4
    message = check_sweep(jobs, compose)
    assert message.startswith("the sweep of 4 job(s) was not started")
    assert message.count("size=100000") == 1 and "the filler pool is exhausted" in message
    assert check_sweep(sweep_jobs({}, ["corpus=toy_core17", "size=64", "seed=1,2"]), compose) is None
    bad = check_sweep(sweep_jobs({}, ["corpus=toy_core17", "size=64", "seed=1,2", "evaluate.mfr=nope"]), compose)
    assert bad.count("\n  - ") == 1 and "evaluate.mfr: input should be 'reciprocal_of_mrr' or 'arithmetic'" in bad


# -- README's paper recipe on small local files --------------------------------------------------------------------
def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def recipe_child(work: str) -> None:
    """README's recipe in a process whose ir_datasets home is ``work/irds`` (ir_datasets fixes it on import):
    check with nothing placed, fetch from a local server, place the licensed files and the variants, check again;
    writes ``work/results.json``."""
    work = Path(work)
    os.environ["IR_DATASETS_HOME"] = str(work / "irds")
    os.chdir(work)
    sys.path.insert(0, str(TESTS))
    import contextlib

    from http_files import FileServer
    from irds_corpora import write_paper_corpora
    from test_hub import fake_cache
    from test_paper_needs import PAPER_MODELS

    from leakexp.toolkit.annotations import FINAL_NAMES

    def run(name: str, argv: list[str]) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            rc = main(argv)
        results[name] = {"rc": rc, "out": out.getvalue()}

    results: dict = {}
    vectors = b"the 0.1 0.2 0.3\nnews 0.3 0.2 0.1\n"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("glove.6B.300d.txt", vectors)
    annotations = {n: f'{{"id": {i}}}\n'.encode() for i, n in enumerate(FINAL_NAMES)}
    served = FileServer()
    commit = "f3ab03077aa732a82fa52e0c0f6ecd12f5c29212"
    served.files["/glove.6B.zip"] = archive.getvalue()
    for name, data in annotations.items():
        served.files[f"/spire/{commit}/src/main/resources/manual-annotations/{name}"] = data
    # the local server's address and the stand-ins' checksums: no path is typed
    o = ["experiment=paper", f"store={work / 'store'}", f"fetch.glove.url={served.url}/glove.6B.zip",
         f"fetch.glove.sha256={_sha(archive.getvalue())}", f"fetch.spire22.url={served.url}/spire",
         "fetch.spire22.annotations=[" + ",".join(f"{{name: {n}, sha256: {_sha(d)}}}" for n, d in annotations.items())
         + "]"]
    try:
        run("check-before", ["check", *o])
        run("fetch", ["fetch", *o, "--only", "glove", "annotations"])
        fake_cache(work / "hub", *PAPER_MODELS)  # the Hugging Face cache, as copied from a connected machine
        world = write_paper_corpora(work / "irds")  # the licensed corpora and the public files, placed
        for corpus, path in world["variants"].items():
            os.environ[f"LEAKEXP_VARIANTS_{corpus.upper()}"] = str(path)
        run("check-after", ["check", *o])
    finally:
        served.close()
    (work / "results.json").write_text(json.dumps(results))


def test_readme_paper_recipe_from_nothing_placed_to_a_clean_check(tmp_path):
    from leakexp.toolkit.annotations import FINAL_NAMES

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKEXP_VARIANTS_") and k != "LEAKEXP_GLOVE"}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_CACHE=str(tmp_path / "hub"), HF_HUB_OFFLINE="1",
               LEAKEXP_DOWNLOADS=str(tmp_path / "downloads"))
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_preflight; " \
           f"test_preflight.recipe_child({str(tmp_path)!r})"
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    results = json.loads((tmp_path / "results.json").read_text())
    before = results["check-before"]
    assert before["rc"] == 1 and before["out"].count("input(s) missing for the configured grid:") == 1
    items = _items(before["out"])
    expected = [*(f"query variants of {c}" for c in CORPORA),
                *(f"SPIRE-22 annotations {n} (verify.annotations)" for n in FINAL_NAMES),
                "word vectors glove.6B.300d.txt (embeddings of knrm, duet, pacrr)"]
    irds = {"disks45/nocr/trec-robust-2004": ("documents", "topics", "qrels"),
            "nyt/trec-core-2017": ("documents", "topics", "qrels"),
            "wapo/v2/trec-core-2018": ("documents", "topics", "qrels"),
            "msmarco-document/train": ("documents", "queries", "qrels"),
            "msmarco-document/orcas": ("queries", "qrels")}
    expected += [f"ir_datasets '{d}' {part}" for d, parts in irds.items() for part in parts]
    for item in expected:
        assert item in items, item
    assert sum(i.startswith("Hugging Face model ") for i in items) == 3
    assert len(items) == len(expected) + 3
    assert results["fetch"]["rc"] == 0, results["fetch"]["out"]
    after = results["check-after"]
    assert (after["rc"], after["out"]) == (0, "all inputs present for the configured grid\n"), after["out"]
    assert (tmp_path / "glove.6B.300d.txt").read_bytes() == b"the 0.1 0.2 0.3\nnews 0.3 0.2 0.1\n"


def test_a_monot5_job_needs_no_glove_where_the_grid_has_knrm(tmp_path, monkeypatch):
    """The checks a computing job makes before any work ask for the cell's model's files and weights only: a monoT5
    cell of the paper's grid is not refused for GloVe, which KNRM, PACRR and Duet read."""
    from conftest import paper_env
    from test_hub import fake_cache
    from test_paper_needs import PAPER_MODELS

    from leakexp.runner.registry import check_requirements, compose
    from leakexp.runner.stage import ConfigError

    monkeypatch.chdir(tmp_path)
    overrides = paper_env(tmp_path, monkeypatch)
    monkeypatch.delenv("LEAKEXP_GLOVE")
    monkeypatch.setenv("HF_HUB_CACHE", str(fake_cache(tmp_path / "hub", *PAPER_MODELS)))
    s = compose([*overrides, f"store={tmp_path / 'store'}", *CELL, "model=monot5"])
    check_requirements(s, models=["monot5"])
    with pytest.raises(ConfigError, match="embeddings names glove.6B.300d.txt, which does not exist"):
        check_requirements(s, models=["knrm"])
