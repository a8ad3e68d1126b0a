"""Memorization of leaked instances (Tables 6-8): hypothetical ranks, pairing, macro-averaging, offsets."""

import math

import numpy as np
import pandas as pd
import pytest

from leakexp.lib import memorization as pure
from leakexp.stages import memorization as M
from leakexp.tables import memorization as MT
from leakexp.stages.cell import Cell
from leakexp.runner.registry import schema_of
from leakexp.grid.work import ready_cells
from leakexp.runner.config import RunSettings
from leakexp.runner.schema import Settings
from leakexp.models.base import rank_with_docno_ties
from leakexp.runner.stage import Ask

RUN_SCORES = [3.0, 2.0, 2.0, 1.0]
RUN_DOCNOS = ["d1", "d2", "d4", "d5"]


# -- hypothetical ranks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("score, docno, rank", [
    (2.0, "d3", 3),  # tie with d2 (smaller docno: stays ahead) and d4 (larger docno: falls behind)
    (2.0, "d0", 2),  # tie with two larger docnos: ahead of both
    (2.0, "d9", 4),  # tie with two smaller docnos: behind both
    (3.0, "d0", 1),  # tie with the top document, smaller docno
    (3.0, "d2", 2),  # tie with the top document, larger docno
    (5.0, "d9", 1),  # beats all
    (0.5, "d0", 5),  # loses to all: depth + 1
])
def test_hypothetical_rank_inserts_like_the_ranking(score, docno, rank):
    assert pure.hypothetical_rank(score, docno, RUN_SCORES, RUN_DOCNOS) == rank
    run = pd.DataFrame({"qid": "t", "docno": RUN_DOCNOS + [docno], "score": RUN_SCORES + [score]})
    ranked = rank_with_docno_ties(run)  # the re-ranking's own tie rule, with the document inserted
    assert int(ranked.loc[ranked.docno == docno, "rank"].iloc[0]) + 1 == rank


def test_hypothetical_rank_of_an_empty_run_is_one_and_lengths_must_match():
    assert pure.hypothetical_rank(-7.0, "x", [], []) == 1
    with pytest.raises(ValueError, match="differ in length"):
        pure.hypothetical_rank(1.0, "x", [1.0, 2.0], ["a"])


# -- leaked documents and their topics ------------------------------------------------------------------
def _instances(origin="msm-leak"):
    rows = []
    for pair, (qid, query, source, pos, neg) in enumerate([
        ("q1", "lyme disease", "msmarco", "P1", "N1"),
        ("q2", "hubble", "orcas", "P2", "N2"),
        ("q3", "hubble telescope", "orcas", "P3", "N3"),
    ]):
        rows += [(pair, qid, query, pos, f"text {pos}", 1, origin, source),
                 (pair, qid, query, neg, f"text {neg}", 0, origin, source)]
    rows += [(3, "f1", "filler", "F1", "t", 1, "filler", "orcas"), (3, "f1", "filler", "F2", "t", 0, "filler", "orcas")]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label", "origin", "source"])


def test_msm_query_leaking_for_two_topics_counts_for_each():
    pairs = pure.leaked_pairs(_instances(), "msm")
    assert list(pairs.pair) == [0, 1, 2] and list(pairs.pos_docno) == ["P1", "P2", "P3"]
    verified = pd.DataFrame({
        "train_qid": ["q1", "q2", "q2", "q3"],
        "query": ["lyme disease", "hubble", "hubble", "Hubble Telescope"],  # q3: text normalised differently
        "topic_qid": ["301", "302", "310", "302"],
    })
    topics = pure.msm_topics(pairs, verified, "toy")
    assert list(map(tuple, topics.values)) == [(0, "301"), (1, "302"), (1, "310"), (2, "302")]
    docs = pure.leaked_documents(pairs, topics)
    assert len(docs) == 8  # 4 (query, topic) pairs x relevant + non-relevant
    assert list(docs[docs.pair == 1].topic) == ["302", "302", "310", "310"]
    assert list(docs[docs.topic == "310"].label) == [1, 0] and list(docs[docs.topic == "310"].docno) == ["P2", "N2"]


def test_msm_query_without_a_verified_topic_is_an_error_naming_it():
    pairs = pure.leaked_pairs(_instances(), "msm")
    verified = pd.DataFrame({"train_qid": ["q1", "q2"], "query": ["lyme disease", "hubble"], "topic_qid": ["301", "302"]})
    with pytest.raises(ValueError, match=r"corpus toy: leaked training query q3 \('hubble telescope'\)"):
        pure.msm_topics(pairs, verified, "toy")


def test_leaked_pairs_needs_a_leaked_type_and_complete_pairs():
    with pytest.raises(ValueError, match="leakage='none' has no leaked instances"):
        pure.leaked_pairs(_instances(), "none")
    broken = _instances().drop(index=1)
    with pytest.raises(ValueError, match="one relevant and one non-relevant document per pair"):
        pure.leaked_pairs(broken, "msm")


# -- ranking in a stored run ----------------------------------------------------------------------------
def _run():
    return pd.DataFrame({"qid": ["t1"] * 4 + ["t2"] * 2, "query": ["q one"] * 4 + ["q two"] * 2,
                         "docno": ["a", "b", "c", "d", "a", "e"], "score": [4.0, 3.0, 2.0, 1.0, 9.0, 8.0],
                         "rank": [0, 1, 2, 3, 0, 1]})


def _docs():
    return pd.DataFrame({"topic": ["t1", "t1", "t2", "t2"], "pair": [0, 0, 1, 1], "train_qid": ["t1", "t1", "t2", "t2"],
                         "train_query": ["x"] * 4, "source": ["test"] * 4, "docno": ["c", "z", "e", "b"],
                         "text": ["tc", "tz", "te", "tb"], "label": [1, 0, 1, 0]})


def test_rank_leaked_reuses_the_run_and_scores_only_documents_outside_it_once():
    calls = []

    def score(queries, texts):
        calls.append((list(queries), list(texts)))
        return [{"tz": 2.0, "tb": 0.5}[t] for t in texts]

    out = pure.rank_leaked(_docs(), _run(), {"t1": "q one", "t2": "q two"}, score, always_score=False)
    assert calls == [(["q one", "q two"], ["tz", "tb"])]  # one batched call, the topic's query
    assert list(out["rank"]) == [3, 4, 2, 3]  # c: stored rank 2 (0-based) + 1; z ties c (2.0) but "z" > "c"
    assert list(out.score) == [2.0, 2.0, 8.0, 0.5]
    assert list(out.in_run) == [True, False, True, False]
    assert list(out.depth) == [4, 4, 2, 2] and "text" not in out.columns


def test_rank_leaked_always_scores_msm_documents_even_with_a_docno_in_the_run():
    calls = []

    def score(queries, texts):
        calls.append(list(texts))
        return [10.0] * len(texts)

    out = pure.rank_leaked(_docs(), _run(), {"t1": "q one", "t2": "q two"}, score, always_score=True)
    assert calls == [["tc", "tz", "te", "tb"]]
    assert list(out["rank"]) == [1, 1, 1, 1] and not out.in_run.any()


# -- pairing, macro-averaging, offsets ------------------------------------------------------------------
def test_the_without_model_is_the_none_cell_of_the_same_corpus_size_model_and_seed():
    assert M.without_cell(Cell("robust04", "msm", 16000, "monot5", 3)) == Cell("robust04", "none", 16000, "monot5", 3)


class _FakeRunner:
    """Re-rankings per cell; ``missing``: cells whose re-ranking is not in the store yet."""

    def __init__(self, missing=()):
        self.missing = set(missing)

    def state(self, ask, **_):
        assert ask.stage == "rerank", ask  # ready_cells looks at the re-rankings only (cheap)
        return ("missing" if Cell(**ask.params) in self.missing else "done"), None, ""


def test_config_names_the_with_and_the_matching_without_rerank_and_waits_for_both(tmp_path):
    from leakexp.runner.registry import compose, runner

    cfg = compose([f"store={tmp_path}"])
    r = runner(cfg)
    cell = Cell("toy_core17", "msm", 128, "knrm", 2)
    none = Cell("toy_core17", "none", 128, "knrm", 2)
    inputs = r.record(cell.ask("memorization"))["inputs"]  # the keys the memorization's key is made of
    assert inputs["run-with"] == r.key(cell.ask("rerank"))
    assert inputs["run-without"] == r.key(none.ask("rerank"))
    assert inputs["model-with"] == r.key(cell.ask("train")) and inputs["model-without"] == r.key(none.ask("train"))
    assert inputs["annotations"] == r.key(Ask.of("verify"))
    assert "annotations" not in r.record(Cell("toy_core17", "test", 128, "knrm", 2).ask("memorization"))["inputs"]
    # waits for both: with neither re-ranking in the (empty) store, nothing is ready and nothing is there
    assert ready_cells(r.settings, r, cell) == [] and ready_cells(r.settings, r, none) == []
    assert r.state(cell.ask("memorization"))[0] == "missing"
    with pytest.raises(ValueError, match="needs a leaked cell"):
        r.key(none.ask("memorization"))


def test_a_finished_cell_completes_the_memorization_whose_reranks_are_both_there():
    cfg = Settings({"memorization": {"enabled": True, "sizes": ["each", "cv"], "cv_measure": "nDCG@10"}}, schema_of,
                   RunSettings)
    none, msm, test = (Cell("core17", l, 4000, "knrm", 2) for l in ("none", "msm", "test"))
    assert ready_cells(cfg, _FakeRunner(), none) == [msm, test]
    assert ready_cells(cfg, _FakeRunner(missing=[msm]), none) == [test]
    assert ready_cells(cfg, _FakeRunner(missing=[none]), msm) == []
    assert ready_cells(cfg, _FakeRunner(missing=[msm]), msm) == []
    assert ready_cells(cfg, _FakeRunner(), msm) == [msm]


def _rows(spec):
    """spec: (seed, variant, topic, pair, label, rank, score) tuples -> memorization rows of one cell."""
    return pd.DataFrame([{"corpus": "c", "leakage": "test", "size": 64, "model": "knrm", "seed": s, "variant": v,
                          "topic": t, "pair": p, "docno": f"{t}-{p}-{l}", "label": l, "rank": r, "score": sc}
                         for s, v, t, p, l, r, sc in spec])


def test_paired_matches_with_and_without_rows_of_the_same_seed_and_document():
    rows = _rows([(1, "with", "t", 0, 1, 2, 0.9), (1, "without", "t", 0, 1, 5, 0.1),
                  (2, "with", "t", 0, 1, 3, 0.8), (2, "without", "t", 0, 1, 7, 0.2)])
    both = pure.paired(rows).set_index("seed")
    assert both.loc[1, ["rank_with", "rank_without"]].tolist() == [2, 5]
    assert both.loc[2, ["rank_with", "rank_without"]].tolist() == [3, 7]
    with pytest.raises(ValueError, match="lack a with- or without-leakage row"):
        pure.paired(rows.iloc[:3])


def test_macro_average_weighs_a_topic_with_three_leaked_queries_like_one_with_one():
    rows = _rows([(1, "with", "A", 0, 1, 1, 0.0), (1, "with", "A", 1, 1, 1, 0.0), (1, "with", "A", 2, 1, 1, 0.0),
                  (1, "with", "B", 3, 1, 10, 0.0)])
    mean, std, topics = pure.macro_average(rows, "rank")
    assert (mean, topics) == (5.5, 2)  # the micro average would be 13 / 4 = 3.25
    assert std == pytest.approx(math.sqrt(2 * 4.5 ** 2))
    assert math.isnan(pure.macro_average(rows[rows.topic == "A"], "rank")[1])  # one topic: no spread


def test_offset_is_nonrelevant_minus_relevant_and_the_increase_is_with_minus_without():
    rows = _rows([
        (1, "with", "A", 0, 1, 2, 0.0), (1, "with", "A", 0, 0, 10, 0.0),      # offset 8
        (1, "without", "A", 0, 1, 5, 0.0), (1, "without", "A", 0, 0, 6, 0.0),  # offset 1
        (1, "with", "B", 1, 1, 9, 0.0), (1, "with", "B", 1, 0, 3, 0.0),        # offset -6: relevant behind
        (1, "without", "B", 1, 1, 4, 0.0), (1, "without", "B", 1, 0, 4, 0.0),  # offset 0
    ])
    off = pure.rank_offsets(rows).set_index(["variant", "topic"]).offset
    assert (off[("with", "A")], off[("without", "A")], off[("with", "B")]) == (8, 1, -6)
    inc = pure.offset_increase(rows).set_index("topic").increase
    assert (inc["A"], inc["B"]) == (7, -6)
    assert pure.macro_average(pure.offset_increase(rows), "increase")[0] == 0.5


def test_table_rows_report_tables_6_7_8_per_leakage_model_and_corpus():
    rows = _rows([
        (1, "with", "A", 0, 1, 2, 0.9), (1, "with", "A", 0, 0, 10, 0.1),
        (1, "without", "A", 0, 1, 5, 0.4), (1, "without", "A", 0, 0, 6, 0.3),
        (1, "with", "A", 1, 1, 4, 0.7), (1, "with", "A", 1, 0, 8, 0.2),
        (1, "without", "A", 1, 1, 4, 0.5), (1, "without", "A", 1, 0, 4, 0.5),
        (1, "with", "B", 2, 1, 1, 1.0), (1, "with", "B", 2, 0, 31, -1.0),
        (1, "without", "B", 2, 1, 3, 0.6), (1, "without", "B", 2, 0, 31, -1.0),
    ])
    long = MT.table_rows(rows, ["c"], ["knrm"])
    t6 = long["table6"].set_index("variant")
    assert t6.loc["with", "mean"] == 2.0  # topics A (2, 4 -> 3) and B (1)
    assert t6.loc["without", "mean"] == 3.75  # A (5, 4 -> 4.5) and B (3)
    assert t6.loc["with", ["topics", "leaked_queries", "seeds"]].tolist() == [2, 3, 1]
    assert long["table7"].set_index("variant").loc["with", "mean"] == pytest.approx((0.8 + 1.0) / 2)
    t8 = long["table8"].iloc[0]
    assert t8["mean"] == pytest.approx(((7 + 4) / 2 + 2) / 2)  # A: (8-1, 4-0), B: 30-28
    shown = MT._display(long["table6"], "table6", ["c"], ["knrm"])
    assert shown.iloc[0].tolist() == ["Test", "KNRM", "2.00 ± 1.41", "3.75 ± 1.06"]
    assert MT._display(long["table8"], "table8", ["c"], ["knrm"]).iloc[0].tolist() == ["KNRM", "–", "3.750 ± 2.47"]


# -- sizes and config -----------------------------------------------------------------------------------
def test_cv_choice_takes_the_most_frequent_size_and_breaks_ties_to_the_smaller():
    rows = [{"corpus": "c", "model": "knrm", "measure": "nDCG@10", "leakage": "msm", "fold": k, "size": s}
            for k, s in enumerate([256, 128, 256, 512, 256])]
    rows += [{"corpus": "c", "model": "knrm", "measure": "nDCG@10", "leakage": "test", "fold": k, "size": s}
             for k, s in enumerate([512, 128, 512, 128, 1024])]
    rows += [{"corpus": "c", "model": "knrm", "measure": "P@1", "leakage": "msm", "fold": k, "size": 1024} for k in range(5)]
    rows += [{"corpus": "c", "model": "knrm", "measure": "nDCG@10", "leakage": "none", "fold": 0, "size": 64}]
    choice = pure.cv_choice(pd.DataFrame(rows), "nDCG@10")
    assert list(map(tuple, choice.values)) == [("c", "knrm", "msm", 256, 3, 5), ("c", "knrm", "test", 128, 2, 5)]


def test_bad_memorization_settings_name_the_key(tmp_path):
    from leakexp.runner.config import ConfigError
    from leakexp.runner.registry import compose  # composes and runs every stage's config check, memorization's included

    base = [f"store={tmp_path}", "grid.sizes=[128,256]"]
    assert M.memorization_settings(compose(base)).sizes == ["each", "cv"]
    assert M.memorization_settings(compose([*base, "memorization.sizes=pooled"])).sizes == ["pooled"]
    for override, message in (("memorization.sizes=[each,bogus]", r"memorization.sizes.1: input should be .*\(got 'bogus'\)"),
                              ("memorization.sizes=[999]", r"memorization.sizes has 999, which is not in grid.sizes \[128, 256\]"),
                              ("memorization.cv_measure=RR", "memorization.cv_measure='RR' is not one of"),
                              ("memorization.enabled=maybe", r"memorization.enabled: input should be a valid boolean \(got 'maybe'\)")):
        with pytest.raises(ConfigError, match=message):
            compose([*base, override])
    # leakexp.runner.config.compose alone checks no stage's block; building a runner checks it before anything runs
    from leakexp.runner.registry import compose as compose_only
    from leakexp.runner.registry import runner

    with pytest.raises(ConfigError, match=r"memorization.sizes.1: input should be .*'bogus'"):
        runner(compose_only([*base, "memorization.sizes=[each,bogus]"]))


def test_only_leaked_cells_are_wanted_and_enabled_false_turns_it_off(tmp_path):
    from leakexp.runner.registry import compose

    cfg = compose([f"store={tmp_path}"])
    assert M.wanted(cfg, Cell("toy_core17", "msm", 128, "knrm", 1))
    assert not M.wanted(cfg, Cell("toy_core17", "none", 128, "knrm", 1))
    assert not M.wanted(compose([f"store={tmp_path}", "memorization.enabled=false"]), Cell("toy_core17", "test", 128, "knrm", 1))


# -- the stage on the small toy grid --------------------------------------------------------------------
def test_stage_on_the_small_grid_ranks_like_the_stored_runs_and_writes_tables_6_to_8(small_run, small_cfg, tmp_path,
                                                                                    monkeypatch):
    from leakexp.models import load_checkpoint
    from leakexp.runner.registry import runner as make_runner
    from leakexp.runner.store import DONE

    r, cells, _, tables_out = small_run
    absent = Cell("toy_core17", "msm", 4096, "knrm", 9)
    assert ready_cells(r.settings, r, absent) == []  # neither of its re-rankings is there: nothing to compute
    assert not r.path(absent.ask("memorization")).exists()
    assert r.state(absent.ask("memorization"))[0] == "missing"
    leaked = [c for c in cells if c.corpus == "toy_core17" and c.leakage in pure.LEAKED]
    assert len(leaked) == 4
    nones = [c for c in cells if c.corpus == "toy_core17" and c.leakage == "none"]
    ready = [x for c in nones for x in ready_cells(r.settings, r, c)]  # the none cell completes its siblings
    done = [r.ensure(x.ask("memorization")) for x in ready]
    paths = {c: r.ensure(c.ask("memorization")) for c in leaked}
    assert sorted(ready, key=str) == sorted(leaked, key=str) and sorted(done) == sorted(paths.values())
    depth = int(small_cfg.rerank.depth)
    for cell, path in paths.items():
        assert path == r.path(cell.ask("memorization")) and r.state(cell.ask("memorization"))[0] == "done"
        rows = pd.read_parquet(path / M.FILE)
        set_rows = pd.read_parquet(r.ensure(cell.ask("build")) / "instances.parquet")
        leaked_pairs = set_rows[set_rows.origin == pure.ORIGIN[cell.leakage]].pair.nunique()
        assert rows.groupby("variant").pair.nunique().to_dict() == {"with": leaked_pairs, "without": leaked_pairs}
        assert rows["rank"].between(1, depth + 1).all() and (rows.depth == depth).all()
        for variant, run_cell in (("with", cell), ("without", M.without_cell(cell))):
            run = pd.read_parquet(r.ensure(run_cell.ask("rerank")) / "run.parquet")
            run = run.assign(qid=run.qid.astype(str))
            side = rows[rows.variant == variant]
            inside = side[side.in_run].merge(run, left_on=["topic", "docno"], right_on=["qid", "docno"],
                                             suffixes=("", "_run"))
            assert len(inside) == side.in_run.sum()
            assert (inside["rank"] == inside.rank_run + 1).all() and (inside.score == inside.score_run).all()
            outside = side[~side.in_run]
            for row in outside.itertuples():
                topic_run = run[run.qid == row.topic]
                assert row.rank == pure.hypothetical_rank(row.score, row.docno, topic_run.score, topic_run.docno)
            if cell.leakage == "msm":
                assert not side.in_run.any()
                row = outside.iloc[0]
                model = load_checkpoint(r.ensure(run_cell.ask("train")))
                text = set_rows.loc[set_rows.docno == row.docno, "text"].iloc[0]
                assert model.score([row.query], [text])[0] == pytest.approx(row.score, abs=1e-5)
        if cell.leakage == "msm":
            true = r.get(Ask.of("verify"))
            topics = set(r.get(Ask.of("collection", corpus=cell.corpus)).topics)
            true = true[true.leak & true.topic_qid.isin(topics)]
            # keyed by id and text: the toy world gives some ORCAS queries an MS MARCO query's id
            true_topics = true.groupby(["train_qid", "query"]).topic_qid.apply(set)
            assert set(rows.train_qid) == set(set_rows[set_rows.origin == "msm-leak"].qid)
            for key, topics in rows.groupby(["train_qid", "train_query"]).topic.apply(set).items():
                assert topics == true_topics[key]  # every topic the query leaks for, and no other
        else:
            assert (rows.topic == rows.train_qid).all()
    # computed once: a second call and a fresh runner find the artifacts
    marks = {c: (paths[c] / DONE).stat().st_mtime for c in leaked}
    assert {c: r.ensure(c.ask("memorization")) for c in leaked} == paths
    fresh = make_runner(small_cfg)
    assert {c: fresh.ensure(c.ask("memorization")) for c in leaked} == paths
    assert {c: (paths[c] / DONE).stat().st_mtime for c in leaked} == marks

    # the tables read the store only: no model is loaded
    monkeypatch.setattr("leakexp.models.load_checkpoint", lambda *a, **k: pytest.fail("tables must not score"))
    cv_sizes = pd.read_csv(tables_out / "cv_sizes.csv")
    pd.testing.assert_frame_equal(MT.stored_cv_sizes(small_cfg, r, cells), cv_sizes, check_dtype=False)
    extra = Cell("toy_core17", "msm", 128, "knrm", 9)
    written = MT.write_memorization_tables(small_cfg, r, tmp_path, [*cells, extra], cv_sizes)
    names = {w.name for w in written}
    for table in ("table6", "table7", "table8"):
        for suffix in ("size128", "size256", "cv"):
            assert {f"{table}-{suffix}.{ext}" for ext in ("md", "csv", "tex")} <= names
    per_instance = pd.read_csv(tmp_path / "memorization.csv", dtype={"topic": str, "train_qid": str, "docno": str})
    every = [r.state(c.ask("memorization")) for c in cells if M.wanted(r.settings, c)]  # the grid memorizes every corpus
    assert len(every) == 12 and all(state == "done" for state, _, _ in every)
    assert len(per_instance) == sum(len(pd.read_parquet(x / M.FILE)) for _, x, _ in every)
    t6 = pd.read_csv(tmp_path / "table6-size128.csv")
    t6 = t6[t6.corpus == "toy_core17"].set_index(["leakage", "variant"])
    mine = per_instance[(per_instance["size"] == 128) & (per_instance.label == 1) & (per_instance.leakage == "test")
                        & (per_instance.corpus == "toy_core17")]
    for variant in ("with", "without"):
        expected = mine[mine.variant == variant].groupby("topic")["rank"].mean()
        assert t6.loc[("test", variant), "mean"] == pytest.approx(expected.mean())
        assert t6.loc[("test", variant), "std"] == pytest.approx(expected.std())
        assert t6.loc[("test", variant), "topics"] == 12
    md = (tmp_path / "table6-size128.md").read_text()
    assert "training-set size 128" in md and "1 seed(s): 1" in md and f"maximal rank is {depth + 1}" in md
    assert "toy_core17: MSM" in md and "Test 12 topics / 24 leaked queries" in md
    assert "INCOMPLETE" in md and "toy_core17/msm/128/knrm/seed-9" in md
    assert "toy_robust/test/128/knrm/seed-1" not in md  # run_cell memorized every corpus of the grid
    assert "toy_core17/msm/256" not in md  # another size's cells belong to that size's caption
    assert "KNRM" in md and " ± " in md
    cv_md = (tmp_path / "table6-cv.md").read_text()
    assert "cross-validation chose most often (over its folds) for nDCG@10" in cv_md
    assert r"$\pm$" in (tmp_path / "table8-cv.tex").read_text()
    # the same store and config give the same tables
    again = tmp_path / "again"
    MT.write_memorization_tables(small_cfg, r, again, [*cells, extra], cv_sizes)
    for name in ("memorization.csv", "table6-size128.md", "table8-cv.tex", "table7-size256.csv"):
        assert (again / name).read_text() == (tmp_path / name).read_text()
    assert np.isfinite(pd.read_csv(tmp_path / "table8-size256.csv")["mean"]).all()
    from leakexp.runner.registry import compose

    off = compose([f"store={small_cfg.run.store}", "data.queries_per_source=600", "memorization.enabled=false"])
    assert MT.write_memorization_tables(off, r, tmp_path / "off", cells, cv_sizes) == [] and not (tmp_path / "off").exists()


def test_msm_documents_can_be_scored_with_the_leaking_training_query():
    """memorization.msm_query: the topic's query (default, as the re-ranking) or the training query of the leak."""
    docs = pd.DataFrame({"topic": ["301", "301"], "pair": [0, 1], "train_qid": ["a", "b"],
                         "train_query": ["leak one", "leak two"], "source": ["msmarco", "orcas"],
                         "docno": ["D1", "D2"], "text": ["t1", "t2"], "label": [1, 1]})
    run = pd.DataFrame({"qid": ["301"] * 3, "docno": ["X", "Y", "Z"], "score": [3.0, 2.0, 1.0], "rank": [0, 1, 2]})
    seen = []

    def score(queries, texts):
        seen.append(list(queries))
        return [2.5 if q == "leak two" else 0.5 for q in queries]

    topic = pure.rank_leaked(docs, run, {"301": "the title"}, score, always_score=True)
    assert seen[-1] == ["the title", "the title"] and list(topic["rank"]) == [4, 4]
    training = pure.rank_leaked(docs, run, {"301": "the title"}, score, always_score=True, query_source="training")
    assert seen[-1] == ["leak one", "leak two"] and list(training["rank"]) == [4, 2]
    assert list(training["query"]) == ["leak one", "leak two"]
    with pytest.raises(ValueError, match="memorization.msm_query='bogus'"):
        pure.rank_leaked(docs, run, {"301": "the title"}, score, always_score=True, query_source="bogus")
