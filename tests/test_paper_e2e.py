"""experiment=paper end to end on miniature raw corpora read through ir_datasets (tests/irds_corpora.py).

The paper's configuration, changed only where the miniature or this machine requires it: the bundled small models
(all-MiniLM for detection, KNRM with a small seeded GloVe file), query variants and annotation files written for
the generated topics, leak counts and sizes that a few topics and tens of training queries support, and Core
2017 / 2018 re-ranking the authors' bundled runs (the generator writes their top-100 documents under their ids).
Every step goes through the documented command line (``leakexp.cli.main.main``): status, plan, detect, annotations
review, verify, index, build, one cell per corpus, the grid, status again and the tables.

ir_datasets fixes its home when it is imported, and the other tests' session home holds the default miniature:
the pipeline runs in one child process with its own ``IR_DATASETS_HOME`` and reports every command's exit code and
output; the assertions read that report and the store.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from irds_corpora import PLANTS, STOP, WORDS

# about 60 s of CPU in one process: `make test-slow` (and CI) runs it; the default suite covers its parts apart
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
CORPORA = ("robust04", "core17", "core18")
SIZES = (16, 24)
FIXED = {"robust04": 3, "core17": 2, "core18": 2}  # verified leaks per corpus: 4, 3, 3 (PLANTS)
TEST_LEAK = {"robust04": 8, "core17": 6, "core18": 6}  # Robust04: each topic twice, as the paper (672 is skipped)
GRID = [f"grid.sizes=[{','.join(map(str, SIZES))}]", "grid.seeds=[1]", "grid.models=[knrm]"]


def _overrides(store: Path, annotations: list[Path]) -> list[str]:
    out = ["experiment=paper", f"store={store}", "detect.sbert=bundled", *GRID,
           f"verify.annotations=[{','.join(map(str, annotations))}]",
           "rerank.depth=5",  # the miniature holds the authors' Core runs down to rank 5 (50 topics each)
           "model_overrides.knrm.train.batch_size=4"]  # a few updates per cell instead of one
    for corpus in CORPORA:
        out += [f"corpus_overrides.{corpus}.fixed_leak_queries={FIXED[corpus]}",
                f"corpus_overrides.{corpus}.test_leak_queries={TEST_LEAK[corpus]}"]
    return out


def _glove(path: Path, dim: int = 20) -> None:
    """A GloVe-format text file of the generated corpora's vocabulary, seeded random vectors."""
    rng = np.random.default_rng(0)
    words = [*WORDS, *STOP, "what", "is", "news", "by", "more"]
    path.write_text("".join(f"{w} {' '.join(f'{x:.5f}' for x in rng.normal(size=dim))}\n" for w in words))


def _command(results: dict, name: str, argv: list[str]) -> dict:
    from leakexp.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    start, wall = time.process_time(), time.time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    results[name] = {"rc": rc, "out": out.getvalue(), "err": err.getvalue()[-4000:],
                     "cpu_s": round(time.process_time() - start, 2), "wall_s": round(time.time() - wall, 2)}
    return results[name]


def _annotate(review: Path, plants: list[dict], out: list[Path]) -> None:
    """The annotators: each reviewed candidate gets its planted query's labels (unplanted ones: Different Topic),
    written in the study's format to two files (as the study's iterations)."""
    labels = {(p["qid"], p["topic"]): p["labels"] for p in plants}
    records = [json.loads(line) for line in review.read_text().splitlines()]
    for r in records:
        r["label"] = labels.get((r["ms-marco-qid"], r["topic"]), ["Different Topic"])
    half = len(records) // 2
    for path, part in zip(out, (records[:half], records[half:])):
        path.write_text("".join(json.dumps(r) + "\n" for r in part))


def child(work: str) -> None:
    """The pipeline, in a process whose ir_datasets home is ``work/irds``: writes ``work/results.json``."""
    work = Path(work)
    os.environ["IR_DATASETS_HOME"] = str(work / "irds")
    from irds_corpora import irds_home, write_paper_corpora

    start = time.process_time()
    world = write_paper_corpora(irds_home(), seed=7)
    generator_s = time.process_time() - start
    for corpus, path in world["variants"].items():
        os.environ[f"LEAKEXP_VARIANTS_{corpus.upper()}"] = str(path)
    _glove(work / "glove.txt")
    os.environ["LEAKEXP_GLOVE"] = str(work / "glove.txt")
    annotations = [work / "annotations-01.jsonl", work / "annotations-02.jsonl"]
    for a in annotations:  # the configuration names them before they are written (status, plan, detect read none)
        a.write_text("")
    o = _overrides(work / "store", annotations)
    results: dict = {"world": {**{k: world[k] for k in ("topics", "plants", "runs")}, "generator_s": generator_s,
                               "documents": {k: len(v) for k, v in world["ids"].items()}}}
    try:
        _command(results, "status-before", ["status", *o])
        _command(results, "plan", ["plan", *o, "--jobs", str(work / "jobs.tsv")])
        _command(results, "detect", ["detect", *o])
        _command(results, "review", ["annotations", "review", *o, "--out", str(work / "review.jsonl")])
        if results["review"]["rc"] == 0:
            _annotate(work / "review.jsonl", world["plants"], annotations)
        for name, argv in (("verify", ["verify", *o]), ("index", ["index", *o]), ("build", ["build", *o])):
            if _command(results, name, argv)["rc"] != 0:
                return
        for corpus in CORPORA:
            _command(results, f"cell-{corpus}",
                     ["cell", *o, f"corpus={corpus}", "leakage=msm", f"size={SIZES[0]}", "model=knrm", "seed=1"])
        _command(results, "grid", ["grid", *o])
        _command(results, "status-after", ["status", *o])
        _command(results, "tables", ["tables", *o])
    finally:
        (work / "results.json").write_text(json.dumps(results, indent=1))


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    """(results of every command, the store, the work folder, wall seconds)."""
    work = tmp_path_factory.mktemp("paper-e2e")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("LEAKEXP_STORE", None)
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", f"import test_paper_e2e as t; t.child({str(work)!r})"],
                          cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=1200)
    seconds = time.time() - start
    if not (work / "results.json").exists():
        pytest.fail(f"the pipeline's process failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    results = json.loads((work / "results.json").read_text())
    failed = {k: v for k, v in results.items() if k != "world" and v["rc"] not in (0, 1)}
    assert not failed, "\n".join(f"{k}: rc {v['rc']}\n{v['out'][-2000:]}\n{v['err']}" for k, v in failed.items())
    return results, work / "store", work, seconds


# -- what the generator planted, per corpus ------------------------------------------------------------------------
def _plants_of(world: dict, corpus: str) -> list[dict]:
    """The planted queries of ``corpus``: those of its topics, counting a topic id that another corpus uses with the
    same text (Core 2018's topics of Core 2017) and not one it uses with another text (321)."""
    topics = world["topics"]
    return [p for p in world["plants"]
            if topics[corpus].get(p["topic"]) is not None and topics[corpus][p["topic"]] == topics[p["corpus"]][p["topic"]]]


def _table(text: str) -> pd.DataFrame:
    """A Markdown table printed by a command."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not set(line) <= set("|:- ")]
    return pd.DataFrame(rows[1:], columns=rows[0])


def _artifact(store: Path, *parts: str) -> Path:
    """The one finished artifact under ``store/parts`` (one configuration ran)."""
    found = [p.parent for p in store.joinpath(*parts).glob("*/DONE.json")]
    assert len(found) == 1, (parts, found)
    return found[0]


def _status(out: str) -> dict[str, dict[str, int]]:
    """``leakexp status``'s table: stage -> column (done, missing, total, ...) -> count."""
    head, *rows = out.splitlines()
    columns = re.split(r"\s{2,}", head.strip())[1:]
    table = {}
    for row in rows:
        fields = row.split()
        if len(fields) == len(columns) + 1 and all(f.isdigit() for f in fields[1:]):
            table[fields[0]] = dict(zip(columns, map(int, fields[1:])))
    return table


def test_status_lists_every_artifact_missing_and_plan_counts_the_grid(paper_run):
    results, store, _, _ = paper_run
    before = results["status-before"]
    assert before["rc"] == 1  # incomplete
    status = _status(before["out"])
    assert len(status) == 11 and all(s["done"] == 0 and s["missing"] == s["total"] > 0 for s in status.values()), \
        before["out"]
    totals = {stage: s["total"] for stage, s in status.items()}
    # 3 corpora x 2 leaked types x 2 sizes + the No-Leakage set of each size, one model and seed each; 18 cells
    assert {k: totals[k] for k in ("build", "train", "rerank", "evaluate")} == {"build": 14, "train": 14, "rerank": 18,
                                                                           "evaluate": 18}
    assert totals["firststage"] == 3 and totals["memorization"] == 12  # every leaked cell's memorization
    plan = results["plan"]
    assert plan["rc"] == 0
    assert "jobs: training sets 14, train 14, rerank 18, evaluate 18" in plan["out"]
    assert "(cells asking: training sets 18, train 18, rerank 18, evaluate 18" in plan["out"]
    jobs = pd.read_csv(store.parent / "jobs.tsv", sep="\t")
    assert not (store / "plan").exists()  # plan writes nothing but the job list it is asked for
    assert len(jobs) == 18 and set(jobs.corpus) == set(CORPORA) and set(jobs["size"]) == set(SIZES)


def test_detection_finds_the_planted_near_duplicates_and_nothing_else(paper_run):
    from leakexp.lib.candidates import leak_pairs

    results, store, _, _ = paper_run
    world = results["world"]
    assert results["detect"]["rc"] == 0 and "threshold 0.91" in results["detect"]["out"]
    cands = pd.read_parquet(_artifact(store, "detect", "all-MiniLM-L6-v2") / "candidates.parquet")
    pairs = leak_pairs(cands, 0.91)
    found = set(zip(pairs.source, pairs.train_qid, pairs.topic_qid))
    assert found == {(p["source"], p["qid"], p["topic"]) for p in world["plants"]}
    assert len(found) == len(PLANTS) == 14
    # a variant plant is found through the variant field only
    variant = [p for p in world["plants"] if p["labels"][-1] == "Variant-Identical"]
    best = pairs.set_index(["train_qid", "topic_qid"]).field
    assert variant and {best[(p["qid"], p["topic"])] for p in variant} == {"variant"}
    # Table 1's union row: topics and queries per corpus, a reused topic id counted by its text
    t1 = pd.read_csv(store / "tables" / "msmarco-orcas" / "table1.csv")
    union = t1.set_index("Candidates").loc["Union"]
    for corpus in CORPORA:
        mine = _plants_of(world, corpus)
        assert (union[f"{corpus} +ORC T"], union[f"{corpus} +ORC Q"]) == (len({p["topic"] for p in mine}), len(mine))
        msm = [p for p in mine if p["source"] == "msmarco"]
        assert (union[f"{corpus} MSM T"], union[f"{corpus} MSM Q"]) == (len({p["topic"] for p in msm}), len(msm))
    assert [len(_plants_of(world, c)) for c in CORPORA] == [5, 7, 5]
    # the generator: 50 Core topics each with the authors' top-5 documents, in seconds
    assert world["documents"] == {"wapo": 280, "nyt": 280, "disks45": 28, "msmarco": 30}
    assert [len(world["topics"][c]) for c in CORPORA] == [4, 50, 50] and world["generator_s"] < 5


def test_verify_counts_the_annotations_true_labels(paper_run):
    results, _, work, _ = paper_run
    world = results["world"]
    records = [json.loads(line) for f in ("annotations-01.jsonl", "annotations-02.jsonl")
               for line in (work / f).read_text().splitlines()]
    assert len(records) == 14 and results["review"]["out"].startswith("14 candidates for annotation")
    true = [r for r in records if "Different Topic" not in r["label"]]
    out = results["verify"]["out"]
    assert out.startswith(f"{len(records)} annotated candidates, {len(true)} true leaks\n") and len(true) == 11
    for corpus in CORPORA:
        leaks = [p for p in _plants_of(world, corpus) if p["leak"]]
        assert f"{corpus}: {len(leaks)} verified leaking queries for {len({p['topic'] for p in leaks})} topics" in out
    assert [len([p for p in _plants_of(world, c) if p["leak"]]) for c in CORPORA] == [4, 5, 4]


def test_table2a_counts_each_corpus_candidates_by_the_text_they_matched(paper_run):
    results, store, _, _ = paper_run
    world = results["world"]
    t2 = pd.read_csv(store / "tables" / "msmarco-orcas" / "table2a.csv", dtype={"candidates": str})
    t2 = t2.set_index(["corpus", "candidates"])
    for corpus in CORPORA:
        for flag, name in ((True, "true"), (False, "false")):
            mine = [p for p in _plants_of(world, corpus) if p["leak"] == flag]
            assert (t2.loc[(corpus, name), "queries"], t2.loc[(corpus, name), "topics"]) == (
                len(mine), len({p["topic"] for p in mine})), (corpus, name)


def test_index_and_documents_hold_the_archives_full_text(paper_run):
    from archive_text import ARCHIVES

    results, store, work, _ = paper_run
    out = results["index"]["out"].splitlines()
    assert [line.split(":")[0] for line in out] == ["train", *CORPORA]
    assert out[0].endswith("(30 documents)") and out[1].endswith("(28 documents)")
    for corpus in CORPORA:
        archive = ARCHIVES[corpus](work / "irds")
        stats = json.loads((_artifact(store, "corpus-stats", corpus) / "DONE.json").read_text())["figures"]
        assert stats["documents"] == len(archive) and stats["duplicate_docnos"] == 0, corpus
        assert stats["median_words"] == statistics.median(len(t.split()) for t in archive.values()), corpus
        assert stats["median_words"] > 80, corpus  # articles, not titles (ir_datasets' WaPo text: ~10 words)
    index = json.loads((_artifact(store, "index", "robust04") / "DONE.json").read_text())["figures"]
    robust = ARCHIVES["robust04"](work / "irds")
    assert index["corpus_median_words"] == statistics.median(len(t.split()) for t in robust.values())
    # Core 2018 re-ranks the authors' run: its top-5 of every topic, each document read from the miniature WaPo
    wapo = ARCHIVES["core18"](work / "irds")
    for corpus in ("core17", "core18"):
        run = pd.read_parquet(_artifact(store, "firststage", corpus) / "run.parquet")
        assert run.groupby("qid").docno.apply(sorted).to_dict() == {
            q: sorted(d) for q, d in results["world"]["runs"][corpus].items()}
        assert len(run) == 250
    assert set(pd.read_parquet(_artifact(store, "firststage", "core18") / "run.parquet").docno) <= set(wapo)


def test_build_holds_the_configured_leaks(paper_run):
    results, _, _, _ = paper_run
    sets = _table(results["build"]["out"])
    assert len(sets) == 18
    for r in sets.itertuples(index=False):
        size, instances, leaked = int(r.size), int(r.instances), int(r.leaked)
        if r.leakage == "none":
            assert (instances, leaked) == (size, 0)
        elif r.leakage == "msm":
            assert (instances, leaked) == (size, 2 * FIXED[r.corpus])
        elif r.corpus == "robust04":  # topic 672 has no relevant judgment: its two occurrences are skipped
            assert (instances, leaked, int(r.test)) == (size - 4, 2 * TEST_LEAK[r.corpus] - 4, 12)
        else:
            assert (instances, leaked, int(r.test)) == (size, 2 * TEST_LEAK[r.corpus], 2 * TEST_LEAK[r.corpus])


def _measures(line: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"(\S+)=([-\d.naif]+)", line)}


def test_one_cell_per_corpus_has_finite_measures(paper_run):
    results, _, _, _ = paper_run
    for corpus in CORPORA:
        r = results[f"cell-{corpus}"]
        assert r["rc"] == 0, r["err"]
        assert r["out"].startswith(f"{corpus}/msm/{SIZES[0]}/knrm/seed-1: ")
        m = _measures(r["out"].split(": ", 1)[1].split("  (")[0])
        assert set(m) == {"nDCG@10", "P@1", "MFR"} and all(math.isfinite(v) for v in m.values()), m
        assert 0 <= m["nDCG@10"] <= 1 and 0 <= m["P@1"] <= 1
        # 1/MRR: at least one run's bound for its P@1 (the topics not at rank 1 are at rank 2 or later)
        assert 2 / (1 + m["P@1"]) - 1e-4 <= m["MFR"]
        assert m["nDCG@10"] > 0  # each topic's run holds a relevant document


def test_grid_completes_and_the_tables_name_the_three_corpora(paper_run):
    results, store, _, seconds = paper_run
    print(f"paper e2e: {seconds:.0f}s wall; CPU of the in-process commands: "
          + ", ".join(f"{k} {v['cpu_s']:.1f}s" for k, v in results.items() if k != "world"))
    assert results["grid"]["rc"] == 0 and "18/18 cells done" in results["grid"]["out"], results["grid"]["err"]
    after = results["status-after"]
    assert after["rc"] == 0, after["out"]
    status = _status(after["out"])
    assert len(status) == 11 and all(s["done"] == s["total"] > 0 for s in status.values()), after["out"]
    assert not re.search(r"^(MISSING|FAILED|DAMAGED|STALE)", after["out"], re.M)
    assert results["tables"]["rc"] == 0
    tables = store / "tables" / "msmarco-orcas"
    assert results["tables"]["out"].strip() == f"tables: {tables}"
    captions = {n: (tables / f"table{n}.md").read_text().split("\n", 1)[0] for n in (3, 4, 5)}
    assert "Effectiveness on Robust04 (data=msmarco-orcas, 3 topics" in captions[3]
    assert "three-fold cross-validation (one topic per fold: 3 topics for evaluate.folds=5)" in captions[3]
    assert "left out (672)" in captions[3]
    for n, name, corpus in ((4, "Common Core 2017", "core17"), (5, "Common Core 2018", "core18")):
        assert f"Effectiveness on {name} (data=msmarco-orcas, 50 topics" in captions[n]
        assert "five-fold cross-validation over" in captions[n]
        assert f"Anserini BM25 run {corpus}.bm25-anserini.top100.run.gz" in captions[n]
    summary = pd.read_csv(tables / "summary.csv")
    assert sorted(set(zip(summary.corpus, summary["size"]))) == sorted((c, s) for c in CORPORA for s in SIZES)
    values = summary.drop(columns=["corpus", "model", "size", "seeds"], errors="ignore").to_numpy(float)
    assert values.size and np.isfinite(values).all()
    assert pd.read_csv(tables / "incomplete.csv").empty
    for stem in ("table6-size16", "table7-size24", "table8-cv", "figure2"):
        assert (tables / f"{stem}.csv").exists()
