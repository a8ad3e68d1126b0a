"""The runner end to end on a small toy world (fixture ``small_run`` in conftest)."""

import json

import pandas as pd
import pytest

from leakexp.stages.cell import Cell
from leakexp.grid.work import run_cell, stored_results
from leakexp.runner.stage import Ask
from leakexp.runner.registry import runner
from leakexp.runner.store import DONE
from conftest import SMALL


def _markers(store, stage):
    return {p.parent: json.loads(p.read_text())["finished_at"] for p in store.path(stage).rglob(DONE)}


def _set(r, corpus, leakage, size):
    """The training set artifact of (corpus, leakage, size); No-Leakage sets are one for every corpus."""
    return r.ensure(Ask.of("build", corpus=corpus, leakage=leakage, size=size))


def _excluded(r):
    """(source, qid) of every training query that No-Leakage sets must not use: above the threshold for any
    topic of any corpus, annotated (whatever its recomputed similarity), or a verified leak."""
    from leakexp.lib.training_sets import excluded_queries
    from leakexp.lib.candidates import above_threshold

    pairs = above_threshold(r.get(Ask.of("detect")), r.settings.detect.threshold)
    leaks = [r.get(Ask.of("leaks", corpus=c)) for c in r.settings.data.corpora]
    return excluded_queries(r.get(Ask.of("pool")), pairs, r.get(Ask.of("verify")), leaks)


def test_every_cell_has_measures_in_range(small_run):
    r, cells, means, out = small_run
    assert len(cells) == 18
    for cell, m in means.items():
        assert set(m) == {"nDCG@10", "P@1", "MFR"}
        assert 0 <= m["nDCG@10"] <= 1 and 0 <= m["P@1"] <= 1 and 1 <= m["MFR"] <= 100
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 3 * 2  # corpus x size rows for one model
    assert {"nDCG@10 none", "nDCG@10 msm", "nDCG@10 test", "MFR test"} <= set(summary.columns)
    assert (out / "summary.md").read_text().startswith("**Mean effectiveness")


def test_detection_recovers_planted_leaks(small_run):
    r = small_run[0]
    ann = r.get(Ask.of("verify"))
    assert len(ann) > 50 and ann.leak.mean() > 0.9  # the toy truth judges the reviewed candidates
    robust = r.get(Ask.of("leaks", corpus="toy_robust"))
    assert len(robust) >= r.settings.corpus_of("toy_robust").fixed_leak_queries
    assert set(robust.source) == {"msmarco", "orcas"}


def test_training_sets_have_the_configured_leaked_part(small_run):
    r = small_run[0]
    for corpus, fixed in (("toy_robust", 60), ("toy_core17", 24)):
        m = json.loads((_set(r, corpus, "msm", 256) / "manifest.json").read_text())
        assert m["by_origin"] == {"filler": 256 - 2 * fixed, "msm-leak": 2 * fixed}
        t = json.loads((_set(r, corpus, "test", 128) / "manifest.json").read_text())
        short = 4 if corpus == "toy_robust" else 0  # toy topic 326 has no relevant judgment: skipped, 2 x 2 short
        assert t["by_origin"]["test-leak"] == 2 * fixed - short and t["leakage_ratio"] == (2 * fixed - short) / 128


def test_no_leakage_sets_and_models_are_one_per_size_for_every_corpus(small_run, small_cfg):
    r, cells, _, _ = small_run
    sizes, corpora = list(small_cfg.grid.sizes), list(small_cfg.grid.corpora)
    none_sets = {_set(r, c, "none", s) for c in corpora for s in sizes}
    assert none_sets == {p.parent for p in r.store.path("build", "none").rglob(DONE)}
    assert len(none_sets) == len(sizes)  # one per size, shared by the corpora
    none_models = {r.path(c.ask("train")) for c in cells if c.leakage == "none"}
    assert len(none_models) == len(sizes) * len(small_cfg.grid.models) * len(small_cfg.grid.seeds)
    assert none_models == {p.parent for p in r.store.path("train", "none").rglob(DONE)}
    # each corpus re-ranks with the shared model: one re-ranking and evaluation per corpus
    assert len({r.path(c.ask("rerank")) for c in cells if c.leakage == "none"}) == len(corpora) * len(sizes)


def test_rerun_is_a_no_op_and_a_changed_measure_setting_redoes_only_evaluation(small_run, small_cfg):
    r, cells, _, _ = small_run
    before = {s: _markers(r.store, s) for s in ("build", "train", "rerank", "evaluate")}
    run_cell(runner(small_cfg), cells[0])
    assert {s: _markers(r.store, s) for s in before} == before
    from leakexp.runner.registry import compose

    cfg = compose([f"store={small_cfg.run.store}", "data.queries_per_source=600", "evaluate.measures=[nDCG@10,P@1,MFR,P@10]"])
    other = runner(cfg)
    run_cell(other, cells[0])
    after = {s: _markers(r.store, s) for s in before}
    for s in ("build", "train", "rerank"):
        assert after[s] == before[s]
    # the other configuration's evaluation is a new artifact beside the first, which stays untouched
    assert {k: v for k, v in after["evaluate"].items() if k in before["evaluate"]} == before["evaluate"]
    assert set(after["evaluate"]) - set(before["evaluate"]) == {other.path(cells[0].ask("evaluate"))}
    assert other.path(cells[0].ask("evaluate")) != r.path(cells[0].ask("evaluate"))
    # and back: nothing is recomputed, the first configuration still finds its own result
    run_cell(runner(small_cfg), cells[0])
    assert _markers(r.store, "evaluate") == after["evaluate"]


def test_tables_regenerate_from_the_store_alone(small_run, small_cfg):
    from leakexp.tables.paper import write_tables

    r, cells, _, out = small_run
    names = ["summary.csv", "table3.md", "table4.tex", "table5.csv", "figure2.csv", "detail.csv", "cv_sizes.csv",
             "leaked_vs_other.csv"]
    before = {n: (out / n).read_text() for n in names}
    assert (out / "figure2.png").stat().st_size > 0 and (out / "figure2.pdf").exists()
    for n in names:
        (out / n).unlink()
    write_tables(small_cfg)  # no runner given: a read-only one over the store
    assert {n: (out / n).read_text() for n in names} == before
    assert "Table 3. Effectiveness on toy_robust" in before["table3.md"] and "KNRM" in before["table3.md"]
    assert len(stored_results(r, cells)[0]) > 0
    absent = Cell("toy_robust", "none", 4096, "knrm", 9)
    missing, states = stored_results(r, [absent])
    assert len(missing) == 0 and states == {absent: "missing"}


def test_every_toy_set_has_exact_counts_balance_and_no_candidate_filler(small_run, small_cfg):
    r = small_run[0]
    excluded = _excluded(r)
    fixed = {c: r.values["corpora"][c] for c in small_cfg.grid.corpora}
    for corpus in small_cfg.grid.corpora:
        prefix = None
        for size in small_cfg.grid.sizes:
            for leakage in small_cfg.grid.leakages:
                f = pd.read_parquet(_set(r, corpus, leakage, size) / "instances.parquet")
                leaked = {"none": 0, "msm": 2 * fixed[corpus]["fixed_leak_queries"],
                          "test": 2 * fixed[corpus]["test_leak_queries"]}[leakage]
                short = 4 if (corpus, leakage) == ("toy_robust", "test") else 0  # topic 326: no relevant judgment
                leaked -= short
                origin = {"none": None, "msm": "msm-leak", "test": "test-leak"}[leakage]
                assert len(f) == size - short
                assert (f.origin != "filler").sum() == leaked and (origin is None or (f.origin == origin).sum() == leaked)
                fill = f[f.origin == "filler"]
                assert not set(zip(fill.source, fill.qid)) & excluded
                counts = fill.source.value_counts()
                assert abs(counts.get("msmarco", 0) - counts.get("orcas", 0)) <= 2  # +-1 query = 2 instances
                if leakage == "msm":
                    leaks = r.get(Ask.of("leaks", corpus=corpus))
                    assert set(f[f.origin == "msm-leak"].qid) <= set(leaks.qid)
                qids = fill.qid.tolist()[::2]
                if leakage == "none":
                    if prefix is not None:
                        assert qids[: len(prefix)] == prefix  # each size's fillers start with the last's
                    prefix = qids


def test_an_external_first_stage_run_is_what_the_models_rerank(small_run, small_cfg, tmp_path):
    from leakexp.runner.registry import compose

    r, cells, _, _ = small_run
    cell = next(c for c in cells if c.corpus == "toy_core17")
    bm25 = r.get(Ask.of("firststage", corpus="toy_core17"))
    # an external run: BM25's top-10 of every topic in reverse order, as a gzipped TREC run file
    top = bm25[bm25["rank"] < 10].assign(score=lambda d: d["rank"].astype(float))
    path = tmp_path / "toy_core17.run"
    path.write_text("".join(f"{x.qid} Q0 {x.docno} {i + 1} {x.score} ext\n"
                            for i, x in enumerate(top.itertuples(index=False))))
    settings = [f"store={small_cfg.run.store}", "data.queries_per_source=600", "corpus=toy_core17",
                f"rerank.first_stage={path}"]
    # one run is one corpus's: a grid of several corpora is refused before any work, naming the fix
    with pytest.raises(ValueError, match="is one run, for corpus=toy_core17, but the grid also re-ranks toy_robust"):
        runner(compose(settings))
    q = runner(compose([*settings, "grid.corpora=[toy_core17]"]))
    run = pd.read_parquet(q.ensure(cell.ask("rerank")) / "run.parquet")
    assert run.groupby("qid").size().max() == 10
    assert set(zip(run.qid, run.docno)) == set(zip(top.qid, top.docno))
    assert q.path(cell.ask("rerank")) != r.path(cell.ask("rerank"))  # kept apart from the BM25 re-ranking


def test_leaked_and_other_topics_split_the_cross_validated_values(small_run, small_cfg):
    from leakexp.stages.verify import stored_leaking_topics as leaking_topics

    r, cells, _, out = small_run
    t = pd.read_csv(out / "leaked_vs_other.csv", dtype={"qid": str})
    leaking = leaking_topics(r)
    for corpus in small_cfg.grid.corpora:
        c = t[(t.corpus == corpus) & (t.measure == "nDCG@10") & (t.leakage == "msm")].set_index("group")
        assert c.loc["leaked", "queries"] + c.loc["other", "queries"] == c.loc["all", "queries"]
        assert 0 < c.loc["leaked", "queries"] <= len(leaking[corpus])
    # a leaked type is tested against None on the same group; None itself has no test
    assert t[t.leakage == "none"].p.isna().all() and t[t.leakage != "none"].p.notna().any()


def test_status_why_names_the_setting_that_made_a_stored_set_stale(small_run, small_cfg, capsys):
    from leakexp.cli.main import main

    small_run  # the small grid is in the store
    base = [f"store={small_cfg.run.store}", *SMALL, "corpus=toy_core17", "leakage=msm", "size=256"]
    assert main(["status", *base, "bm25.stemmer=porter", "--why", "build", "train"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("build/toy_core17/msm/256: key ") and "train/" in out
    assert 'bm25.stemmer: "porter2" -> "porter"' in out  # found through the negatives' input, upstream
    assert main(["status", *base, "--why", "build"]) == 0  # the stored set is this configuration's: nothing differs
    out = capsys.readouterr().out
    assert "differs" not in out
    assert main(["status", *base, "--why", "sets"]) == 0  # the stage's name before the rename still answers
    assert capsys.readouterr().out == f"note: stage sets is called build now (its keys keep the old name)\n{out}"
    assert main(["status", *base, "--why", "bogus"]) == 2
    assert "no stage named bogus" in capsys.readouterr().err


def test_tables_from_unchanged_artifacts_are_kept_and_a_missing_one_is_written_again(small_run, small_cfg):
    from leakexp.tables.paper import TABLES_KEY, write_tables

    r, _, _, out = small_run
    write_tables(small_cfg, r)
    assert (out / TABLES_KEY).exists()
    stamp = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    write_tables(small_cfg, r)  # the same artifacts, settings and table code: nothing rewritten
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamp
    (out / "summary.md").unlink()
    write_tables(small_cfg, r)
    assert (out / "summary.md").exists() and (out / "summary.md").stat().st_mtime_ns != stamp["summary.md"]


def test_status_why_answers_for_every_stage_a_cell_reads(small_run, small_cfg, capsys):
    """Stages with parameters of their own (a corpus's first stage, a df table, the tokens of a set and of a run) are
    found among the cell's inputs: each gets its lineage, none a crash."""
    from leakexp.cli.main import main

    small_run  # the small grid is in the store
    base = [f"store={small_cfg.run.store}", *SMALL, "corpus=toy_core17", "leakage=msm", "size=256"]
    for stage in ("index", "firststage", "tokens", "collection", "negatives", "verify"):
        assert main(["status", *base, "--why", stage]) == 0, stage
        out = capsys.readouterr().out
        assert out.startswith((f"{stage}/", f"{stage}:")) and ": key " in out, out[:300]
    assert main(["status", *base, "model.maxdoclen=400", "--why", "tokens"]) == 0
    out = capsys.readouterr().out
    assert "tokens/" in out and "maxdoclen" in out and "400" in out  # both tokens artifacts of the cell re-keyed


def test_status_why_names_each_setting_as_the_command_line_sets_it(small_run, small_cfg, capsys):
    """Every value `status --why` lists is named by an override that sets it (models.knrm.train.lr was refused as one),
    and the runner's spelling given on the command line is answered with the override's."""
    from leakexp.cli.main import main
    from leakexp.runner.registry import compose

    small_run
    base = [f"store={small_cfg.run.store}", *SMALL, "corpus=toy_core17", "leakage=msm", "size=256"]
    assert main(["status", *base, "model_overrides.knrm.train.lr=0.5", "--why", "train"]) == 0
    out = capsys.readouterr().out
    assert "reads model_overrides.knrm.train.lr = 0.5" in out and "model_overrides.knrm.train.lr: 0.01 -> 0.5" in out
    reads = [line.split(" reads ", 1)[1].split(" = ")[0] for line in out.splitlines() if " reads " in line]
    assert reads and not any(r.startswith(("models.", "corpora.")) for r in reads)
    for setting in reads:  # each one composes as an override
        value = next(line.split(" = ", 1)[1] for line in out.splitlines() if f" reads {setting} = " in line)
        compose([*base[1:], f"{setting}={value}"])
    assert main(["status", *base, "models.knrm.train.lr=0.5"]) == 2
    assert "did you mean model_overrides.knrm.train.lr=...?" in capsys.readouterr().err
