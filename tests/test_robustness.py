"""Robustness measures on hand-made rankings with known answers, the settings, and the tables' statistics."""

import itertools
import math
import random

import numpy as np
import pandas as pd
import pytest

from leakexp.lib import robustness_stats
from leakexp.stages.robustness import family as rb, parts
from leakexp.tables import robustness as rt
from leakexp.runner.config import ConfigError
from leakexp.runner.registry import compose


def test_vnap_is_the_population_variance_of_ap_over_its_mean():
    # NAP = [0.5, 1, 1.5]: mean 1, variance (0.25 + 0 + 0.25) / 3
    assert robustness_stats.vnap([0.2, 0.4, 0.6]) == pytest.approx(1 / 6)
    assert robustness_stats.vnap([0.1, 0.2, 0.3]) == pytest.approx(1 / 6)  # normalised: the mean does not matter
    assert robustness_stats.vnap([0.3, 0.3]) == 0.0
    assert math.isnan(robustness_stats.vnap([0.0, 0.0])) and math.isnan(robustness_stats.vnap([]))


def test_worst_queries_take_the_ceiling_of_the_fraction_with_ties_by_qid():
    v = pd.Series({"q1": 0.5, "q3": 0.1, "q2": 0.1, "q4": 0.9, "q5": np.nan})
    assert robustness_stats.worst_queries(v, 0.25) == ["q2"]  # ceil(0.25 * 4) = 1 topic; q2 before q3 at equal value
    assert robustness_stats.worst_queries(v, 0.1) == ["q2"]  # ceil(0.4) = 1
    assert robustness_stats.worst_queries(v, 0.5) == ["q2", "q3"]
    assert robustness_stats.worst_queries(v, 1.0) == ["q2", "q3", "q1", "q4"]
    with pytest.raises(ValueError):
        robustness_stats.worst_queries(v, 0)


def test_drop_rates_and_their_per_topic_terms():
    assert robustness_stats.drop_rate(0.3, 0.4) == pytest.approx(-0.25)
    assert robustness_stats.drop_rate(0.5, 0.4) == pytest.approx(0.25)
    assert math.isnan(robustness_stats.drop_rate(0.1, 0.0))
    new, ref = pd.Series({"a": 0.2, "b": 0.4}), pd.Series({"a": 0.4, "b": 0.4})
    terms = robustness_stats.drop_contributions(new, ref)
    assert terms.tolist() == pytest.approx([-0.5, 0.0])
    assert terms.mean() == pytest.approx(robustness_stats.drop_rate(new.mean(), ref.mean()))
    ood = robustness_stats.drop_contributions(pd.Series({"x": 0.1, "y": 0.3}), 0.4)  # DR_OOD against a scalar P_IID
    assert ood.tolist() == pytest.approx([-0.75, -0.25]) and ood.mean() == pytest.approx(robustness_stats.drop_rate(0.2, 0.4))


def test_top_change_and_kendall_tau_distance_on_hand_made_rankings():
    before = ["a", "b", "c", "d"]
    assert robustness_stats.top_change(before, ["b", "a", "d", "c"]) == 1 and robustness_stats.top_change(before, ["a", "c", "b", "d"]) == 0
    assert robustness_stats.kendall_tau_distance(before, before) == 0.0
    assert robustness_stats.kendall_tau_distance(before, ["b", "a", "d", "c"]) == pytest.approx(2 / 6)  # (a,b), (c,d)
    assert robustness_stats.kendall_tau_distance(before, ["a", "c", "b", "d"]) == pytest.approx(1 / 6)
    assert robustness_stats.kendall_tau_distance(before, before[::-1]) == pytest.approx(1.0)
    assert math.isnan(robustness_stats.kendall_tau_distance(["a"], ["a"]))
    with pytest.raises(ValueError, match="same documents"):
        robustness_stats.kendall_tau_distance(["a", "b"], ["a", "c"])
    with pytest.raises(ValueError, match="twice"):
        robustness_stats.kendall_tau_distance(["a", "a"], ["a", "a"])


def test_kendall_tau_distance_counts_discordant_pairs():
    rng = random.Random(0)
    for n in (2, 3, 7, 30):
        docs = [f"d{i}" for i in range(n)]
        for _ in range(20):
            after = rng.sample(docs, n)
            pos = {d: i for i, d in enumerate(after)}
            discordant = sum(pos[x] > pos[y] for x, y in itertools.combinations(docs, 2))
            assert robustness_stats.kendall_tau_distance(docs, after) == pytest.approx(discordant / (n * (n - 1) / 2))


def test_rankings_break_score_ties_by_docno_and_rescore_only_the_manipulated_document():
    run = pd.DataFrame({"docno": ["d3", "d1", "d2", "d4"], "score": [3.0, 2.0, 2.0, 1.0]})
    assert robustness_stats.strict_ranking(run) == ["d3", "d1", "d2", "d4"]
    # d4 stuffed: its re-scored original keeps it last; its stuffed text scores 2.0, tying d1 and d2 -> after d2
    before, after = robustness_stats.rescored_rankings(run, {"d4": 1.0}, {"d4": 2.0})
    assert (before, after) == (["d3", "d1", "d2", "d4"], ["d3", "d1", "d2", "d4"])
    before, after = robustness_stats.rescored_rankings(run, {"d4": 1.0}, {"d4": 3.5})
    assert after == ["d4", "d3", "d1", "d2"]
    assert robustness_stats.top_change(before, after) == 1 and robustness_stats.kendall_tau_distance(before, after) == pytest.approx(3 / 6)
    before, after = robustness_stats.rescored_rankings(run, {"d2": 2.0}, {"d2": 2.5})  # overtakes d1 only
    assert robustness_stats.top_change(before, after) == 0 and robustness_stats.kendall_tau_distance(before, after) == pytest.approx(1 / 6)
    with pytest.raises(ValueError):
        robustness_stats.rescored_rankings(run, {"d9": 1.0}, {"d9": 2.0})


@pytest.fixture(scope="module")
def demo_cfg():
    return compose([])


def _with(cfg, override: str):
    """``cfg`` composed again with one more ``key=value`` override."""
    return compose([*cfg.overrides, override])


def test_settings_check_every_key(demo_cfg):
    s = rb.robustness_settings(demo_cfg)  # the demo's scope (conf/experiment/demo.yaml)
    assert s.first_stage == "pool" and s.measure == "nDCG@10" and s.worst == [0.1, 0.25]
    assert (s.gmap_epsilon, s.bootstrap, s.ood_topics) == (1e-5, 1000, "disjoint")
    assert s.query_attacks == ["char-any-1", "word-any"] and s.doc_manipulations == ["stuff"]
    assert (s.corpora, s.sizes, s.ood) == (["toy_core17"], [384], ["toy_core18"])
    full = rb.robustness_settings(_with(_with(demo_cfg, "robustness.query_attacks=null"), "robustness.doc_manipulations=null"))
    assert full.query_attacks == [] and full.doc_manipulations == []
    for override, message in (
        ("robustness.first_stage=rerun", "robustness.first_stage: input should be 'bm25' or 'pool'"),
        ("robustness.gmap_epsilon=0", "robustness.gmap_epsilon: input should be greater than 0"),
        ("robustness.bootstrap=10", "robustness.bootstrap: input should be greater than or equal to 100"),
        ("robustness.ood_topics=some", "robustness.ood_topics: input should be 'disjoint' or 'all'"),
        ("robustness.query_attacks=[char-any-3]", "unknown query attack 'char-any-3'"),
        ("robustness.doc_manipulations=[spam]", "unknown document manipulation 'spam'"),
        ("robustness.measure=MFR", "higher-is-better"),
        ("robustness.worst=[0]", r"robustness.worst.0: input should be greater than 0"),
        ("robustness.corpora=[robust04]", "robustness.corpora has 'robust04', which is not in data.corpora"),
        ("robustness.ood=[robust04]", "robustness.ood has 'robust04', which is not in data.corpora"),
        ("robustness.sizes=[-2]", "robustness.sizes.0: input should be greater than 0"),
        ("robustness.noise.rate=2", "robustness.noise.rate: input should be less than or equal to 1"),
        ("robustness.stuff.from_rank=0", "robustness.stuff.from_rank: input should be greater than 0"),
        ("robustness.synonyms=/nowhere/syn.tsv", "robustness.synonyms: word list /nowhere/syn.tsv does not exist"),
    ):
        with pytest.raises(ConfigError, match=message):
            rb.robustness_settings(_with(demo_cfg, override))


def test_robustness_cells_follow_the_corpora_and_sizes(demo_cfg):
    cells = rb.robustness_cells(demo_cfg)
    assert {(c.corpus, c.size) for c in cells} == {("toy_core17", 384)}
    assert len(cells) == 3 * 5  # leakage types x models x 1 seed of the demo grid
    every = rb.robustness_cells(_with(_with(demo_cfg, "robustness.corpora=null"), "robustness.sizes=null"))
    assert len(every) == 3 * 3 * 2 * 5


def test_the_full_attack_set_is_the_default_outside_the_demo():
    from omegaconf import OmegaConf

    from leakexp.toolkit.attacks import query_attacks
    from leakexp.runner.config import conf_dir

    r = OmegaConf.load(conf_dir() / "config.yaml").robustness
    assert set(r.query_attacks) == {"char-any-1", "char-any-2", "char-insert-1", "char-delete-1", "char-substitute-1",
                                    "char-swap-1", "word-any", "word-add", "word-delete", "word-substitute",
                                    "word-swap", "word-synonym", "word-misspell"}
    assert set(r.query_attacks) <= set(query_attacks()) and list(r.doc_manipulations) == ["stuff", "noise"]
    # Wu et al. keep the candidates fixed and let the re-ranker re-score the attacked query
    assert r.corpora is None and r.sizes is None and r.ood is None and r.first_stage == "pool"
    assert r.gmap_epsilon == 1e-5 and r.ood_topics == "disjoint" and r.bootstrap == 1000


def _values(rows):
    cols = ["corpus", "leakage", "size", "model", "seed", "part", "kind", "target", "qid", "measure", "value",
            "original", "applied", "shared", "relevant_target"]
    return pd.DataFrame([dict(zip(cols, r + (np.nan,) * (len(cols) - len(r)))) for r in rows], columns=cols)


def _fixture_rows():
    rows = []
    ndcg = {"none": {"q1": 0.8, "q2": 0.2, "q3": 0.5, "q4": 0.1}, "msm": {"q1": 0.9, "q2": 0.1, "q3": 0.05, "q4": 0.75}}
    ap = {"none": {"q1": 0.2, "q2": 0.4, "q3": 0.6, "q4": 0.4}, "msm": {"q1": 0.5, "q2": 0.5, "q3": 0.5, "q4": 0.0}}
    p10 = {"none": {"q1": 0.3, "q2": 0.0, "q3": 0.1, "q4": 0.0}, "msm": {"q1": 0.2, "q2": 0.0, "q3": 0.1, "q4": 0.1}}
    for leak in ("none", "msm"):
        for q in ndcg[leak]:
            for m, table in (("nDCG@10", ndcg), ("AP", ap), ("P@10", p10)):
                rows.append(("c", leak, 64, "knrm", 1, "own", "own", "c", q, m, table[leak][q], np.nan, True))
        # OOD: target d (both topics disjoint), target e (z shared with c, w disjoint)
        ood = {"none": [("d", "x", 0.1, False), ("d", "y", 0.3, False), ("e", "z", 0.2, True), ("e", "w", 0.6, False)],
               "msm": [("d", "x", 0.3, False), ("d", "y", 0.3, False), ("e", "z", 0.9, True), ("e", "w", 0.4, False)]}
        for t, q, v, shared in ood[leak]:
            rows.append(("c", leak, 64, "knrm", 1, f"ood-{t}", "ood", t, q, "nDCG@10", v, np.nan, True, shared))
        # the attack changes q1 and q2; q3 is not applied and must not count
        att = {"none": [("q1", 0.8, 0.4), ("q2", 0.2, 0.2), ("q3", 0.5, 0.0)],
               "msm": [("q1", 0.9, 0.3), ("q2", 0.1, 0.1), ("q3", 0.6, 0.0)]}[leak]
        for q, o, a in att:
            rows.append(("c", leak, 64, "knrm", 1, "word-swap", "query", "c", q, "nDCG@10", a, o, q != "q3"))
        stuff = {"none": [("q1", 1, 0.5, 20, 1, False), ("q2", 0, 0.1, 2, 0, False), ("q3", 0, 0.1, 15, 1, True)],
                 "msm": [("q1", 1, 0.7, 25, 1, False), ("q2", 1, 0.3, 9, 1, False), ("q3", 0, 0.0, 0, 0, True)]}[leak]
        for q, tc, kt, gain, top10, rel in stuff:
            for m, v in (("TC", tc), ("KT", kt), ("gain", gain), ("top10", top10)):
                rows.append(("c", leak, 64, "knrm", 1, "doc-stuff", "doc", "c", q, m, v, np.nan, True, np.nan, rel))
    return rows


def test_robustness_frame_computes_each_column_from_per_topic_values(demo_cfg):
    cfg = _with(_with(demo_cfg, "robustness.query_attacks=[word-swap]"), "robustness.doc_manipulations=[stuff]")
    s = rb.robustness_settings(_with(_with(cfg, "robustness.worst=[0.5]"), "robustness.gmap_epsilon=0.01"))
    assert s.ood_topics == "disjoint" and s.bootstrap == 1000
    long = rt.robustness_frame(_values(_fixture_rows()), s)
    assert set(long.subset) == {"all"}  # no verified leaks given: no split
    got = long.set_index(["leakage", "column"])["mean"]
    assert got["none", "nDCG@10"] == pytest.approx(0.4) and got["msm", "nDCG@10"] == pytest.approx(0.45)
    assert got["none", "VNAP"] == pytest.approx(robustness_stats.vnap([0.2, 0.4, 0.6, 0.4]))
    assert got["msm", "VNAP"] == pytest.approx(robustness_stats.vnap([0.5, 0.5, 0.5, 0.0]))
    # %no (Eq. 8): none has q2, q4 without a relevant document in the top 10, msm only q2
    assert got["none", "%no"] == pytest.approx(50.0) and got["msm", "%no"] == pytest.approx(25.0)
    # gMAP (Eq. 9) by hand with eps = 0.01
    assert got["none", "gMAP"] == pytest.approx(math.exp(np.mean(np.log([0.21, 0.41, 0.61, 0.41]))) - 0.01)
    assert got["msm", "gMAP"] == pytest.approx(math.exp(np.mean(np.log([0.51, 0.51, 0.51, 0.01]))) - 0.01)
    # worst 50 %, each model on its own worst topics: none q4, q2 (0.15); msm q3, q2 (0.075), not None's q4, q2
    assert got["none", "worst 50% (leakexp)"] == pytest.approx(0.15)
    assert got["msm", "worst 50% (leakexp)"] == pytest.approx(0.075)
    # OOD per target on the topic-disjoint topics (e's shared z left out); DR_OOD against the own-corpus P
    assert got["none", "OOD d"] == pytest.approx(0.2) and got["msm", "OOD d"] == pytest.approx(0.3)
    assert got["none", "OOD e"] == pytest.approx(0.6) and got["msm", "OOD e"] == pytest.approx(0.4)
    assert got["none", "DR_OOD d"] == pytest.approx((0.2 - 0.4) / 0.4)
    assert got["msm", "DR_OOD e"] == pytest.approx((0.4 - 0.45) / 0.45)
    assert got["none", "DR word-swap"] == pytest.approx((0.3 - 0.5) / 0.5)
    assert got["msm", "DR word-swap"] == pytest.approx((0.2 - 0.5) / 0.5)
    # the stuffed document's rank gain over the targets not judged relevant (q3's target is relevant: apart)
    assert got["none", "gain stuff"] == pytest.approx(11) and got["msm", "gain stuff"] == pytest.approx(17)
    assert got["none", "median gain stuff"] == pytest.approx(11)
    assert got["none", "top-10 stuff"] == pytest.approx(0.5) and got["msm", "top-10 stuff"] == pytest.approx(1.0)
    assert got["none", "gain stuff (relevant)"] == 15 and got["msm", "gain stuff (relevant)"] == 0
    assert got["none", "TC stuff"] == pytest.approx(1 / 3) and got["msm", "KT stuff"] == pytest.approx(1 / 3)
    tests = long.set_index(["leakage", "column"])
    # DR terms per topic: msm (-1.2, 0), none (-0.8, 0): differences (-0.4, 0), t = -1 with 1 df, p = 0.5
    assert tests.at[("msm", "DR word-swap"), "paired_topics"] == 2
    assert tests.at[("msm", "DR word-swap"), "p"] == pytest.approx(0.5)
    assert not tests.at[("msm", "DR word-swap"), "significant"]
    assert tests.at[("msm", "worst 50% (leakexp)"), "test"] == "randomization"
    assert tests.at[("msm", "OOD e"), "paired_topics"] == 1 and tests.at[("msm", "nDCG@10"), "test"] == "t"
    assert np.isnan(tests.at[("none", "KT stuff"), "p"]) and np.isnan(tests.at[("msm", "VNAP"), "p"])
    assert np.isnan(tests.at[("msm", "DR_OOD d"), "p"])  # CI only: its test would mix in the own-corpus gain
    # every figure has a seeded bootstrap CI over topics around it
    assert (long.bootstrap == 1000).all()
    finite = long.dropna(subset=["ci_low"])
    assert len(finite) >= len(long) - 2  # only single-topic figures may lack spread
    assert ((finite.ci_low <= finite["mean"] + 1e-12) & (finite["mean"] <= finite.ci_high + 1e-12)).all()
    again = rt.robustness_frame(_values(_fixture_rows()), s)
    assert again[["ci_low", "ci_high"]].equals(long[["ci_low", "ci_high"]])
    notes = rt.brittleness_notes(long, s)
    assert notes[0].startswith("MSM leakage, DR_query (query attacks): lower than without leakage (more brittle) "
                               "in 1 of 1")
    wide = rt.wide_table(long, s, ["knrm"])
    assert wide.columns.tolist()[:6] == ["Model", "Leakage", "nDCG@10", "VNAP", "%no", "gMAP"]
    assert wide.set_index("Leakage").at["MSM", "DR word-swap"].startswith("-0.600 [")
    assert wide.set_index("Leakage").at["None", "%no"].startswith("50.0 [")


def test_ood_topics_all_keeps_the_shared_topics(demo_cfg):
    s = rb.robustness_settings(_with(demo_cfg, "robustness.ood_topics=all"))
    got = rt.robustness_frame(_values(_fixture_rows()), s).set_index(["leakage", "column"])["mean"]
    assert got["none", "OOD e"] == pytest.approx(0.4) and got["msm", "OOD e"] == pytest.approx(0.65)


def test_leaked_and_other_topics_get_every_figure_apart(demo_cfg):
    s = rb.robustness_settings(_with(demo_cfg, "robustness.worst=[0.5]"))
    long = rt.robustness_frame(_values(_fixture_rows()), s, leaking={"c": ["q1", "q2"], "d": ["x"]})
    got = long.set_index(["subset", "leakage", "column"])["mean"]
    assert got["leaked", "none", "nDCG@10"] == pytest.approx(0.5) and got["other", "none", "nDCG@10"] == pytest.approx(0.3)
    assert got["leaked", "msm", "nDCG@10"] == pytest.approx(0.5) and got["other", "msm", "nDCG@10"] == pytest.approx(0.4)
    assert got["leaked", "none", "%no"] == pytest.approx(50.0) and got["other", "msm", "%no"] == 0.0
    # only shared OOD topics can be leaked ones (z of e is not a leaked id of c): every OOD topic is "other"
    assert ("leaked", "none", "OOD e") not in got.index and got["other", "none", "OOD d"] == pytest.approx(0.2)
    assert got["all", "none", "nDCG@10"] == pytest.approx(0.4)
    split = rt.wide_table(long, s, ["knrm"], subsets=("leaked", "other"))
    assert split["Topics"].tolist() == ["with leaks", "without leaks"] * 2


def test_robustness_evaluation_follows_evaluate_no_relevant():
    from types import SimpleNamespace

    from leakexp.runner.stage import Config

    run = pd.DataFrame({"qid": ["1", "1", "2"], "docno": ["a", "b", "c"], "score": [2.0, 1.0, 1.0]})
    qrels = pd.DataFrame({"qid": ["1", "2"], "docno": ["a", "c"], "label": [1, 0]})  # topic 2: no relevant judgment
    coll = SimpleNamespace(qrels=qrels, topics={"1": None, "2": None})
    for mode, topics in (("skip", ["1"]), ("zero", ["1", "2"])):
        cfg = Config({"evaluate": {"no_relevant": mode}})
        cfg.declared = ("evaluate.no_relevant",)
        ctx = SimpleNamespace(inputs={"collection": coll}, config=cfg,
                              settings=lambda section, mode=mode: SimpleNamespace(no_relevant=mode))
        pq = parts._values(ctx, run, ["P@10"])
        assert sorted(pq.qid) == topics, mode


# -- Wu et al.'s poorly-performing-query measures, rank gain, topic sharing, CIs and tests (issue 23) ----------
def test_pct_no_is_the_percentage_of_queries_without_a_relevant_document_in_the_top_10():
    from leakexp.lib.measures import per_query

    # q1: relevant at rank 3; q2: relevant only at rank 11; q3: no relevant retrieved; q4: relevant at rank 1
    run = pd.DataFrame([(q, f"{q}-d{i}", 20.0 - i) for q in ("q1", "q2", "q3", "q4") for i in range(12)],
                       columns=["qid", "docno", "score"])
    qrels = pd.DataFrame([("q1", "q1-d2", 1), ("q2", "q2-d10", 2), ("q3", "q3-x", 1), ("q4", "q4-d0", 1),
                          ("q3", "q3-d0", 0)], columns=["qid", "docno", "label"])
    p10 = per_query(run, qrels, ["P@10"]).set_index("qid").value
    assert p10.to_dict() == pytest.approx({"q1": 0.1, "q2": 0.0, "q3": 0.0, "q4": 0.1})
    assert robustness_stats.pct_no(p10) == pytest.approx(50.0)  # q2 and q3 of 4 queries: Eq. 8 in percent
    assert robustness_stats.pct_no([0.3, 0.1]) == 0.0 and robustness_stats.pct_no([0.0]) == 100.0 and math.isnan(robustness_stats.pct_no([]))


def test_gmap_is_the_geometric_mean_of_ap_with_epsilon():
    # exp(mean(log(AP + eps))) - eps by hand: AP = 0.5, 0.125, 0 with eps = 0.01
    by_hand = math.exp((math.log(0.51) + math.log(0.135) + math.log(0.01)) / 3) - 0.01
    assert robustness_stats.gmap([0.5, 0.125, 0.0], 0.01) == pytest.approx(by_hand)
    assert robustness_stats.gmap([0.25, 0.25], 1e-5) == pytest.approx(0.25)
    assert robustness_stats.gmap([0.5, 0.125], 1e-9) == pytest.approx(0.25)  # the plain geometric mean as eps -> 0
    assert robustness_stats.gmap([0.0, 0.9], 1e-5) < 0.01 < np.mean([0.0, 0.9])  # a zero AP dominates, as Eq. 9 intends
    with pytest.raises(ValueError):
        robustness_stats.gmap([0.1], 0)


def test_rank_gain_and_own_worst_mean_by_hand():
    assert robustness_stats.rank_gain([25, 12, 3], [0, 12, 5]).tolist() == [25, 0, -2]
    assert robustness_stats.own_worst_mean([0.8, 0.1, 0.5, 0.2], 0.5) == pytest.approx(0.15)  # its own two lowest
    assert robustness_stats.own_worst_mean([0.8, 0.1, 0.5, np.nan], 0.25) == pytest.approx(0.1)  # ceil(0.25 * 3) = 1
    stat = robustness_stats.own_worst_stat(0.5)
    assert stat(np.array([[0.8, 0.1, 0.5, 0.2], [0.4, 0.4, 0.0, 1.0]])).tolist() == pytest.approx([0.15, 0.2])


def test_shared_topics_are_the_same_id_and_text_or_the_same_text():
    source = pd.DataFrame({"qid": ["301", "302", "303"], "query": ["International Organized Crime", "poliomyelitis", "x"]})
    target = pd.DataFrame({"qid": ["301", "302", "900", "901"],
                           "query": ["international  organized crime", "hubble telescope", "X", "new topic"]})
    # 301: same id and text (case, spacing ignored); 302: a reused id with another text is another topic;
    # 900: the same text under another id
    assert robustness_stats.shared_topics(source, target) == {"301", "900"}


def test_bootstrap_ci_is_seeded_and_covers_the_mean():
    x = np.random.default_rng(3).normal(0.5, 0.1, size=(1, 40, 1))
    mean = lambda a: np.nanmean(a[..., 0], axis=-1)  # noqa: E731
    lo, hi = robustness_stats.bootstrap_ci([x], mean, B=1000, seed=7)
    assert (lo, hi) == robustness_stats.bootstrap_ci([x], mean, B=1000, seed=7)  # seeded
    assert lo < x.mean() < hi
    se = x.std(ddof=1) / math.sqrt(40)  # the normal interval, within bootstrap noise
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)
    assert all(math.isnan(v) for v in robustness_stats.bootstrap_ci([np.zeros((1, 0, 1))], mean, B=10, seed=0))


def test_worst_topic_comparison_has_no_regression_to_the_mean_bias():
    """Null simulation: two models with the same per-topic distribution (topic difficulty plus independent
    noise). Selecting the worst topics on one model's values and comparing the other's on them is significant
    far more often than alpha; each model on its own worst topics with a paired randomization test is not."""
    from leakexp.lib.stats import paired_t

    rng = np.random.default_rng(2024)
    sims, n, frac, alpha = 300, 50, 0.25, 0.05
    old = new = 0
    stat = robustness_stats.own_worst_stat(frac)
    for i in range(sims):
        difficulty = rng.uniform(0.1, 0.7, n)
        none = np.clip(difficulty + rng.normal(0, 0.15, n), 0, 1)
        leaked = np.clip(difficulty + rng.normal(0, 0.15, n), 0, 1)
        worst = np.argsort(none, kind="stable")[:math.ceil(frac * n)]  # the old selection: None's worst topics
        old += paired_t(pd.Series(leaked[worst]), pd.Series(none[worst]))[0] < alpha
        new += robustness_stats.paired_randomization(leaked, none, stat, B=400, seed=i) < alpha
    assert old / sims > 0.5  # the biased design: most comparisons come out "significant"
    assert 0.02 <= new / sims <= 0.09, new / sims  # ~ alpha


def test_paired_randomization_detects_a_real_difference():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.1, 0.7, 60)
    p = robustness_stats.paired_randomization(base + 0.1, base, lambda x: x.mean(axis=-1), B=999, seed=0)
    assert p == pytest.approx(1 / 1000)
    assert robustness_stats.paired_randomization(base, base, lambda x: x.mean(axis=-1), B=99, seed=0) == 1.0
