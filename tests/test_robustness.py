"""Robustness measures on hand-made rankings with known answers, the settings, and the tables' statistics."""

import itertools
import math
import random

import numpy as np
import pandas as pd
import pytest

from leakexp import robustness as rb
from leakexp import robustness_tables as rt
from leakexp.config import ConfigError, compose


def test_vnap_is_the_population_variance_of_ap_over_its_mean():
    # NAP = [0.5, 1, 1.5]: mean 1, variance (0.25 + 0 + 0.25) / 3
    assert rb.vnap([0.2, 0.4, 0.6]) == pytest.approx(1 / 6)
    assert rb.vnap([0.1, 0.2, 0.3]) == pytest.approx(1 / 6)  # normalised: the mean does not matter
    assert rb.vnap([0.3, 0.3]) == 0.0
    assert math.isnan(rb.vnap([0.0, 0.0])) and math.isnan(rb.vnap([]))


def test_worst_queries_take_the_ceiling_of_the_fraction_with_ties_by_qid():
    v = pd.Series({"q1": 0.5, "q3": 0.1, "q2": 0.1, "q4": 0.9, "q5": np.nan})
    assert rb.worst_queries(v, 0.25) == ["q2"]  # ceil(0.25 * 4) = 1 topic; q2 before q3 at equal value
    assert rb.worst_queries(v, 0.1) == ["q2"]  # ceil(0.4) = 1
    assert rb.worst_queries(v, 0.5) == ["q2", "q3"]
    assert rb.worst_queries(v, 1.0) == ["q2", "q3", "q1", "q4"]
    with pytest.raises(ValueError):
        rb.worst_queries(v, 0)


def test_drop_rates_and_their_per_topic_terms():
    assert rb.drop_rate(0.3, 0.4) == pytest.approx(-0.25)
    assert rb.drop_rate(0.5, 0.4) == pytest.approx(0.25)
    assert math.isnan(rb.drop_rate(0.1, 0.0))
    new, ref = pd.Series({"a": 0.2, "b": 0.4}), pd.Series({"a": 0.4, "b": 0.4})
    terms = rb.drop_contributions(new, ref)
    assert terms.tolist() == pytest.approx([-0.5, 0.0])
    assert terms.mean() == pytest.approx(rb.drop_rate(new.mean(), ref.mean()))
    ood = rb.drop_contributions(pd.Series({"x": 0.1, "y": 0.3}), 0.4)  # DR_OOD against a scalar P_IID
    assert ood.tolist() == pytest.approx([-0.75, -0.25]) and ood.mean() == pytest.approx(rb.drop_rate(0.2, 0.4))


def test_top_change_and_kendall_tau_distance_on_hand_made_rankings():
    before = ["a", "b", "c", "d"]
    assert rb.top_change(before, ["b", "a", "d", "c"]) == 1 and rb.top_change(before, ["a", "c", "b", "d"]) == 0
    assert rb.kendall_tau_distance(before, before) == 0.0
    assert rb.kendall_tau_distance(before, ["b", "a", "d", "c"]) == pytest.approx(2 / 6)  # (a,b), (c,d)
    assert rb.kendall_tau_distance(before, ["a", "c", "b", "d"]) == pytest.approx(1 / 6)
    assert rb.kendall_tau_distance(before, before[::-1]) == pytest.approx(1.0)
    assert math.isnan(rb.kendall_tau_distance(["a"], ["a"]))
    with pytest.raises(ValueError, match="same documents"):
        rb.kendall_tau_distance(["a", "b"], ["a", "c"])
    with pytest.raises(ValueError, match="twice"):
        rb.kendall_tau_distance(["a", "a"], ["a", "a"])


def test_kendall_tau_distance_counts_discordant_pairs():
    rng = random.Random(0)
    for n in (2, 3, 7, 30):
        docs = [f"d{i}" for i in range(n)]
        for _ in range(20):
            after = rng.sample(docs, n)
            pos = {d: i for i, d in enumerate(after)}
            discordant = sum(pos[x] > pos[y] for x, y in itertools.combinations(docs, 2))
            assert rb.kendall_tau_distance(docs, after) == pytest.approx(discordant / (n * (n - 1) / 2))


def test_rankings_break_score_ties_by_docno_and_rescore_only_the_manipulated_document():
    run = pd.DataFrame({"docno": ["d3", "d1", "d2", "d4"], "score": [3.0, 2.0, 2.0, 1.0]})
    assert rb.strict_ranking(run) == ["d3", "d1", "d2", "d4"]
    # d4 stuffed: its re-scored original keeps it last; its stuffed text scores 2.0, tying d1 and d2 -> after d2
    before, after = rb.rescored_rankings(run, {"d4": 1.0}, {"d4": 2.0})
    assert (before, after) == (["d3", "d1", "d2", "d4"], ["d3", "d1", "d2", "d4"])
    before, after = rb.rescored_rankings(run, {"d4": 1.0}, {"d4": 3.5})
    assert after == ["d4", "d3", "d1", "d2"]
    assert rb.top_change(before, after) == 1 and rb.kendall_tau_distance(before, after) == pytest.approx(3 / 6)
    before, after = rb.rescored_rankings(run, {"d2": 2.0}, {"d2": 2.5})  # overtakes d1 only
    assert rb.top_change(before, after) == 0 and rb.kendall_tau_distance(before, after) == pytest.approx(1 / 6)
    with pytest.raises(ValueError):
        rb.rescored_rankings(run, {"d9": 1.0}, {"d9": 2.0})


@pytest.fixture(scope="module")
def demo_cfg():
    return compose([])


def _with(cfg, override: str):
    """``cfg`` with one ``key=value`` override (YAML value), without composing again."""
    from omegaconf import OmegaConf

    key, _, value = override.partition("=")
    out = OmegaConf.create(OmegaConf.to_container(cfg))
    OmegaConf.update(out, key, yaml_value(value), merge=False)
    return out


def yaml_value(text: str):
    import yaml

    return yaml.safe_load(text)


def test_settings_check_every_key(demo_cfg):
    s = rb.settings(demo_cfg)  # the demo's scope (conf/experiment/demo.yaml)
    assert s.first_stage == "bm25" and s.measure == "nDCG@10" and s.worst == (0.1, 0.25)
    assert s.query_attacks == ("char-any-1", "word-synonym") and s.doc_manipulations == ("stuff",)
    assert (s.corpora, s.sizes, s.ood) == (("toy_core17",), (384,), ("toy_core18",))
    full = rb.settings(_with(_with(demo_cfg, "robustness.query_attacks=null"), "robustness.doc_manipulations=null"))
    assert full.query_attacks == () and full.doc_manipulations == ()
    for override, message in (
        ("robustness.first_stage=rerun", "robustness.first_stage=rerun is unknown; use bm25"),
        ("robustness.query_attacks=[char-any-3]", "unknown query attack 'char-any-3'"),
        ("robustness.doc_manipulations=[spam]", "unknown document manipulation 'spam'"),
        ("robustness.measure=MFR", "higher-is-better"),
        ("robustness.worst=[0]", r"robustness.worst=\[0.0\]"),
        ("robustness.corpora=[robust04]", "robustness.corpora has 'robust04', which is not in data.corpora"),
        ("robustness.ood=[robust04]", "robustness.ood has 'robust04', which is not in data.corpora"),
        ("robustness.sizes=[-2]", "robustness.sizes has -2"),
        ("robustness.noise.rate=2", "robustness.noise.rate=2"),
        ("robustness.stuff.from_rank=0", "robustness.stuff.from_rank=0"),
        ("robustness.synonyms=/nowhere/syn.tsv", "robustness.synonyms: word list /nowhere/syn.tsv does not exist"),
    ):
        with pytest.raises(ConfigError, match=message):
            rb.settings(_with(demo_cfg, override))


def test_robustness_cells_follow_the_corpora_and_sizes(demo_cfg):
    cells = rb.robustness_cells(demo_cfg)
    assert {(c.corpus, c.size) for c in cells} == {("toy_core17", 384)}
    assert len(cells) == 3 * 5  # leakage types x models x 1 seed of the demo grid
    every = rb.robustness_cells(_with(_with(demo_cfg, "robustness.corpora=null"), "robustness.sizes=null"))
    assert len(every) == 3 * 3 * 2 * 5


def test_the_full_attack_set_is_the_default_outside_the_demo():
    from omegaconf import OmegaConf

    from leakexp.attacks import query_attacks
    from leakexp.config import conf_dir

    r = OmegaConf.load(conf_dir() / "config.yaml").robustness
    assert set(r.query_attacks) == {"char-any-1", "char-any-2", "char-insert-1", "char-delete-1", "char-substitute-1",
                                    "char-swap-1", "word-delete", "word-swap", "word-synonym", "word-misspell"}
    assert set(r.query_attacks) <= set(query_attacks()) and list(r.doc_manipulations) == ["stuff", "noise"]
    assert r.corpora is None and r.sizes is None and r.ood is None and r.first_stage == "bm25"


def _values(rows):
    cols = ["corpus", "leakage", "size", "model", "seed", "part", "kind", "target", "qid", "measure", "value",
            "original", "applied"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)


def test_robustness_frame_computes_each_column_from_per_topic_values(demo_cfg):
    cfg = _with(_with(demo_cfg, "robustness.query_attacks=[word-swap]"), "robustness.doc_manipulations=[stuff]")
    s = rb.settings(_with(cfg, "robustness.worst=[0.5]"))
    rows = []
    iid = {"none": {"q1": 0.8, "q2": 0.2, "q3": 0.5, "q4": 0.1}, "msm": {"q1": 0.9, "q2": 0.1, "q3": 0.6, "q4": 0.2}}
    ap = {"none": {"q1": 0.2, "q2": 0.4, "q3": 0.6, "q4": 0.4}, "msm": {"q1": 0.5, "q2": 0.5, "q3": 0.5, "q4": 0.5}}
    for leak in ("none", "msm"):
        for q in iid[leak]:
            rows.append(("c", leak, 64, "knrm", 1, "iid", "iid", "c", q, "nDCG@10", iid[leak][q], np.nan, True))
            rows.append(("c", leak, 64, "knrm", 1, "iid", "iid", "c", q, "AP", ap[leak][q], np.nan, True))
        # OOD on corpus d: P_OOD = 0.2 (none) and 0.3 (msm); P_IID = 0.4 (none), 0.45 (msm)
        for q, v in (("x", 0.1), ("y", 0.3)) if leak == "none" else (("x", 0.3), ("y", 0.3)):
            rows.append(("c", leak, 64, "knrm", 1, "ood-d", "ood", "d", q, "nDCG@10", v, np.nan, True))
        # the attack changes q1 and q2; q3 is not applied and must not count
        att = {"none": [("q1", 0.8, 0.4), ("q2", 0.2, 0.2), ("q3", 0.5, 0.0)],
               "msm": [("q1", 0.9, 0.3), ("q2", 0.1, 0.1), ("q3", 0.6, 0.0)]}[leak]
        for q, o, a in att:
            rows.append(("c", leak, 64, "knrm", 1, "word-swap", "query", "c", q, "nDCG@10", a, o, q != "q3"))
        for q, tc, kt in (("q1", 1, 0.5), ("q2", 0, 0.1)) if leak == "none" else (("q1", 1, 0.7), ("q2", 1, 0.3)):
            rows.append(("c", leak, 64, "knrm", 1, "doc-stuff", "doc", "c", q, "TC", tc, np.nan, True))
            rows.append(("c", leak, 64, "knrm", 1, "doc-stuff", "doc", "c", q, "KT", kt, np.nan, True))
    long = rt.robustness_frame(_values(rows), s)
    got = long.set_index(["leakage", "column"])["mean"]
    assert got["none", "nDCG@10"] == pytest.approx(0.4) and got["msm", "nDCG@10"] == pytest.approx(0.45)
    assert got["none", "VNAP"] == pytest.approx(rb.vnap([0.2, 0.4, 0.6, 0.4])) and got["msm", "VNAP"] == 0
    # worst 50% by the None model: q4 (0.1) and q2 (0.2)
    assert got["none", "worst 50%"] == pytest.approx(0.15) and got["msm", "worst 50%"] == pytest.approx(0.15)
    assert got["none", "DR_OOD"] == pytest.approx((0.2 - 0.4) / 0.4)
    assert got["msm", "DR_OOD"] == pytest.approx((0.3 - 0.45) / 0.45)
    assert got["none", "DR word-swap"] == pytest.approx((0.3 - 0.5) / 0.5)
    assert got["msm", "DR word-swap"] == pytest.approx((0.2 - 0.5) / 0.5)
    assert got["none", "TC stuff"] == 0.5 and got["msm", "KT stuff"] == pytest.approx(0.5)
    tests = long.set_index(["leakage", "column"])
    # DR terms per topic: msm (-1.2, 0), none (-0.8, 0): differences (-0.4, 0), t = -1 with 1 df, p = 0.5
    assert tests.at[("msm", "DR word-swap"), "paired_topics"] == 2
    assert tests.at[("msm", "DR word-swap"), "p"] == pytest.approx(0.5)
    assert not tests.at[("msm", "DR word-swap"), "significant"]
    assert np.isnan(long.set_index(["leakage", "column"]).loc[("none", "KT stuff")].p)
    assert np.isnan(long.set_index(["leakage", "column"]).loc[("msm", "VNAP")].p)  # no per-topic value
    notes = rt.brittleness_notes(long, s)
    assert notes[0].startswith("MSM leakage, DR_query (query attacks): lower than without leakage (more brittle) "
                               "in 1 of 1")
    assert "KT (document manipulations): higher than without leakage (more brittle) in 1 of 1" in notes[1]
    wide = rt.wide_table(long, s, ["knrm"])
    assert wide.columns.tolist()[:3] == ["Model", "Leakage", "nDCG@10"]
    assert wide.set_index("Leakage").at["MSM", "DR word-swap"] == "-0.600"


# -- Wu et al.'s poorly-performing-query measures, rank gain, topic sharing, CIs and tests (issue 23) ----------
def test_pct_no_is_the_percentage_of_queries_without_a_relevant_document_in_the_top_10():
    from leakexp.evaluate import per_query

    # q1: relevant at rank 3; q2: relevant only at rank 11; q3: no relevant retrieved; q4: relevant at rank 1
    run = pd.DataFrame([(q, f"{q}-d{i}", 20.0 - i) for q in ("q1", "q2", "q3", "q4") for i in range(12)],
                       columns=["qid", "docno", "score"])
    qrels = pd.DataFrame([("q1", "q1-d2", 1), ("q2", "q2-d10", 2), ("q3", "q3-x", 1), ("q4", "q4-d0", 1),
                          ("q3", "q3-d0", 0)], columns=["qid", "docno", "label"])
    p10 = per_query(run, qrels, ["P@10"]).set_index("qid").value
    assert p10.to_dict() == pytest.approx({"q1": 0.1, "q2": 0.0, "q3": 0.0, "q4": 0.1})
    assert rb.pct_no(p10) == pytest.approx(50.0)  # q2 and q3 of 4 queries: Eq. 8 in percent
    assert rb.pct_no([0.3, 0.1]) == 0.0 and rb.pct_no([0.0]) == 100.0 and math.isnan(rb.pct_no([]))


def test_gmap_is_the_geometric_mean_of_ap_with_epsilon():
    # exp(mean(log(AP + eps))) - eps by hand: AP = 0.5, 0.125, 0 with eps = 0.01
    by_hand = math.exp((math.log(0.51) + math.log(0.135) + math.log(0.01)) / 3) - 0.01
    assert rb.gmap([0.5, 0.125, 0.0], 0.01) == pytest.approx(by_hand)
    assert rb.gmap([0.25, 0.25], 1e-5) == pytest.approx(0.25)
    assert rb.gmap([0.5, 0.125], 1e-9) == pytest.approx(0.25)  # the plain geometric mean as eps -> 0
    assert rb.gmap([0.0, 0.9], 1e-5) < 0.01 < np.mean([0.0, 0.9])  # a zero AP dominates, as Eq. 9 intends
    with pytest.raises(ValueError):
        rb.gmap([0.1], 0)


def test_rank_gain_and_own_worst_mean_by_hand():
    assert rb.rank_gain([25, 12, 3], [0, 12, 5]).tolist() == [25, 0, -2]
    assert rb.own_worst_mean([0.8, 0.1, 0.5, 0.2], 0.5) == pytest.approx(0.15)  # its own two lowest
    assert rb.own_worst_mean([0.8, 0.1, 0.5, np.nan], 0.25) == pytest.approx(0.1)  # ceil(0.25 * 3) = 1
    stat = rb.own_worst_stat(0.5)
    assert stat(np.array([[0.8, 0.1, 0.5, 0.2], [0.4, 0.4, 0.0, 1.0]])).tolist() == pytest.approx([0.15, 0.2])


def test_shared_topics_are_the_same_id_and_text_or_the_same_text():
    source = pd.DataFrame({"qid": ["301", "302", "303"], "query": ["International Organized Crime", "poliomyelitis", "x"]})
    target = pd.DataFrame({"qid": ["301", "302", "900", "901"],
                           "query": ["international  organized crime", "hubble telescope", "X", "new topic"]})
    # 301: same id and text (case, spacing ignored); 302: a reused id with another text is another topic;
    # 900: the same text under another id
    assert rb.shared_topics(source, target) == {"301", "900"}


def test_bootstrap_ci_is_seeded_and_covers_the_mean():
    x = np.random.default_rng(3).normal(0.5, 0.1, size=(1, 40, 1))
    mean = lambda a: np.nanmean(a[..., 0], axis=-1)  # noqa: E731
    lo, hi = rb.bootstrap_ci([x], mean, B=1000, seed=7)
    assert (lo, hi) == rb.bootstrap_ci([x], mean, B=1000, seed=7)  # seeded
    assert lo < x.mean() < hi
    se = x.std(ddof=1) / math.sqrt(40)  # the normal interval, within bootstrap noise
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)
    assert all(math.isnan(v) for v in rb.bootstrap_ci([np.zeros((1, 0, 1))], mean, B=10, seed=0))


def test_worst_topic_comparison_has_no_regression_to_the_mean_bias():
    """Null simulation: two models with the same per-topic distribution (topic difficulty plus independent
    noise). Selecting the worst topics on one model's values and comparing the other's on them is significant
    far more often than alpha; each model on its own worst topics with a paired randomization test is not."""
    from leakexp.stats import paired_t

    rng = np.random.default_rng(2024)
    sims, n, frac, alpha = 300, 50, 0.25, 0.05
    old = new = 0
    stat = rb.own_worst_stat(frac)
    for i in range(sims):
        difficulty = rng.uniform(0.1, 0.7, n)
        none = np.clip(difficulty + rng.normal(0, 0.15, n), 0, 1)
        leaked = np.clip(difficulty + rng.normal(0, 0.15, n), 0, 1)
        worst = np.argsort(none, kind="stable")[:math.ceil(frac * n)]  # the old selection: None's worst topics
        old += paired_t(pd.Series(leaked[worst]), pd.Series(none[worst]))[0] < alpha
        new += rb.paired_randomization(leaked, none, stat, B=400, seed=i) < alpha
    assert old / sims > 0.5  # the biased design: most comparisons come out "significant"
    assert 0.02 <= new / sims <= 0.09, new / sims  # ~ alpha


def test_paired_randomization_detects_a_real_difference():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.1, 0.7, 60)
    p = rb.paired_randomization(base + 0.1, base, lambda x: x.mean(axis=-1), B=999, seed=0)
    assert p == pytest.approx(1 / 1000)
    assert rb.paired_randomization(base, base, lambda x: x.mean(axis=-1), B=99, seed=0) == 1.0
