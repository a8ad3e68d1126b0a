import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from leakexp.lib.stats import assign_folds, bonferroni, cross_validate, evaluate_corpus, order_swaps, paired_t


def test_folds_are_deterministic_balanced_and_seeded():
    qids = [str(i) for i in range(301, 351)]
    f = assign_folds(qids, 5, seed=0)
    assert f == assign_folds(list(reversed(qids)), 5, seed=0)
    assert sorted(pd.Series(f).value_counts().tolist()) == [10] * 5
    assert f != assign_folds(qids, 5, seed=1)


def _grid(values: dict[int, list[float]], qids):
    return pd.DataFrame([(s, q, v) for s, vs in values.items() for q, v in zip(qids, vs)],
                        columns=["size", "qid", "value"])


def test_size_selection_on_a_hand_made_grid():
    qids = ["a", "b", "c", "d"]
    folds = {"a": 0, "b": 1, "c": 2, "d": 3}
    # size 1000 is best on every topic except d, where 2000 is far better
    grid = _grid({1000: [0.9, 0.8, 0.7, 0.0], 2000: [0.5, 0.5, 0.5, 0.9]}, qids)
    cv = cross_validate(grid, folds, "nDCG@10", leakage="none", mfr="reciprocal_of_mrr")
    # folds 0-2 train on d's fold too: means (1000: [0.8+0.7+0.0]/3 ...) -> recompute by hand
    # fold 0 (held out a): train b,c,d: 1000 -> 0.5, 2000 -> 0.633 => 2000; fold 3 (d): 1000 -> 0.8 => 1000
    assert cv.sizes == {0: 2000, 1: 2000, 2: 2000, 3: 1000}
    assert cv.values.to_dict() == {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.0}
    # MFR: lower is better, so the same grid picks the other size
    mfr = cross_validate(grid, folds, "MFR", leakage="none", mfr="arithmetic")
    assert mfr.sizes == {0: 1000, 1: 1000, 2: 1000, 3: 2000}


def test_the_mfr_definition_decides_which_size_the_cross_validation_takes():
    """Size 1 puts the first relevant document at rank 1 on four topics and at rank 20 on one; size 2 at rank 2 on
    all five. 1/MRR prefers size 1 (1.22 against 2), the arithmetic mean size 2 (4.8 against 2)."""
    qids = ["a", "b", "c", "d", "e"]
    folds = {q: 0 for q in qids[:4]} | {"e": 1}
    grid = _grid({1: [1.0, 1.0, 1.0, 1.0, 20.0], 2: [2.0] * 5}, qids)
    # fold 0 trains on e alone (1/MRR 20 against 2): size 2; fold 1 trains on a-d (1 against 2): size 1
    assert cross_validate(grid, folds, "MFR", leakage="none", mfr="reciprocal_of_mrr").sizes == {0: 2, 1: 1}
    everything = {q: i for i, q in enumerate(qids)}  # each fold trains on the other four topics
    recip = cross_validate(grid, everything, "MFR", leakage="none", mfr="reciprocal_of_mrr")
    arith = cross_validate(grid, everything, "MFR", leakage="none", mfr="arithmetic")
    assert recip.sizes == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}  # e.g. fold 0: 4 / (3 + 1/20) = 1.31 < 2
    assert arith.sizes == {0: 2, 1: 2, 2: 2, 3: 2, 4: 1}  # fold 0: (1 + 1 + 1 + 20) / 4 = 5.75 > 2; fold 4: 1 < 2


def test_max_effect_selects_the_largest_gain_over_none():
    qids = ["a", "b", "c"]
    folds = {"a": 0, "b": 1, "c": 2}
    none = _grid({1: [0.5, 0.5, 0.5], 2: [0.1, 0.1, 0.1]}, qids)
    msm = _grid({1: [0.6, 0.6, 0.6], 2: [0.4, 0.4, 0.4]}, qids)  # best absolute: 1; largest gain: 2 (+0.3)
    assert cross_validate(msm, folds, "P@1", leakage="msm", mfr="reciprocal_of_mrr").sizes == {0: 1, 1: 1, 2: 1}
    eff = cross_validate(msm, folds, "P@1", leakage="msm", selection="max_effect", baseline=none, mfr="reciprocal_of_mrr")
    assert eff.sizes == {0: 2, 1: 2, 2: 2} and eff.values.tolist() == [0.4, 0.4, 0.4]
    assert eff.baseline.tolist() == [0.1, 0.1, 0.1]  # None at the same size, not at its best (1)


def test_paired_t_and_bonferroni_equal_scipy_and_statsmodels():
    rng = np.random.default_rng(3)
    a = pd.Series(rng.random(40), index=[str(i) for i in range(40)])
    b = a + rng.normal(0.05, 0.1, 40)
    c = a + rng.normal(0.0, 0.1, 40)
    p_b, n = paired_t(b, a)
    assert n == 40 and p_b == pytest.approx(sps.ttest_rel(b.values, a.values).pvalue)
    p_c, _ = paired_t(c, a)
    assert bonferroni([p_b, p_c]) == pytest.approx([min(1, 2 * p_b), min(1, 2 * p_c)])
    # NaN (an MFR miss) drops the query from the pair
    b2 = b.copy()
    b2.iloc[0] = np.nan
    assert paired_t(b2, a) == pytest.approx((sps.ttest_rel(b.values[1:], a.values[1:]).pvalue, 39))


def test_corrected_p_values_match_pt_experiment():
    """Three fixed runs through pt.Experiment (baseline none, Bonferroni) and through leakexp's stats."""
    import pyterrier as pt

    from leakexp.lib.measures import per_query

    rng = np.random.default_rng(7)
    qids = [str(q) for q in range(30)]
    qrels = pd.DataFrame([(q, f"{q}-d{j}", int(j < 3)) for q in qids for j in range(10)], columns=["qid", "docno", "label"])

    def run(noise):
        rows = [(q, f"{q}-d{j}", float((j < 3) * noise[int(q)] + rng.random())) for q in qids for j in range(10)]
        df = pd.DataFrame(rows, columns=["qid", "docno", "score"])
        df["rank"] = df.groupby("qid").score.rank(ascending=False, method="first").astype(int) - 1
        return df

    runs = {"none": run(np.full(30, 0.3)), "msm": run(np.full(30, 0.8)), "test": run(np.full(30, 0.35))}
    topics = pd.DataFrame({"qid": qids, "query": ["q"] * 30})
    import ir_measures

    exp = pt.Experiment(list(runs.values()), topics, qrels, [ir_measures.parse_measure("nDCG@10")],
                        names=list(runs), baseline=0, correction="bonferroni")
    exp = exp.set_index("name")
    ours = {k: per_query(v, qrels, ["nDCG@10"]).set_index("qid").value for k, v in runs.items()}
    raw = [paired_t(ours[k], ours["none"])[0] for k in ("msm", "test")]
    corrected = bonferroni(raw)
    assert raw == pytest.approx(exp.loc[["msm", "test"], "nDCG@10 p-value"].tolist())
    assert corrected == pytest.approx(exp.loc[["msm", "test"], "nDCG@10 p-value corrected"].tolist())


def test_order_swaps_on_a_hand_made_case():
    means = {"duet": {"none": 0.201, "msm": 0.198}, "knrm": {"none": 0.194, "msm": 0.214},
             "monot5": {"none": 0.461, "msm": 0.457}}
    assert order_swaps(means) == [("knrm", "duet")]  # the paper's Robust04 example
    mfr = {"pacrr": {"none": 1.649, "msm": 1.383}, "monot5": {"none": 1.577, "msm": 1.503}}
    assert order_swaps(mfr, lower_better=True) == [("pacrr", "monot5")]  # the paper's Core 2018 example


def test_evaluate_corpus_flags_a_clear_improvement():
    rng = np.random.default_rng(0)
    qids = [str(i) for i in range(50)]
    rows = []
    for leakage, shift in (("none", 0.0), ("msm", 0.0), ("test", 0.3)):
        for size in (1000, 2000):
            base = rng.random(50) * 0.5
            rows += [("c", "knrm", leakage, size, "nDCG@10", q, v + shift) for q, v in zip(qids, base)]
    avg = pd.DataFrame(rows, columns=["corpus", "model", "leakage", "size", "measure", "qid", "value"])
    summary, sizes = evaluate_corpus(avg, "c", ["nDCG@10"], mfr="reciprocal_of_mrr")
    s = summary.set_index("leakage")
    assert s.loc["test", "significant"] and not s.loc["none", "significant"]
    assert s.loc["test", "p_bonferroni"] == pytest.approx(min(1, 2 * s.loc["test", "p"]))
    assert len(sizes) == 15 and set(sizes["size"]) <= {1000, 2000}


def test_max_effect_pairs_the_leaked_values_with_none_at_the_same_size():
    """A +0.1 gain at 1k (and a -0.05 loss at 32k) must come out as a gain against None at 1k, not as a
    loss against None's best size (32k)."""
    rng = np.random.default_rng(5)
    qids = [f"t{i:02d}" for i in range(20)]
    none_1k = 0.2 + rng.normal(0, 0.02, 20)
    none_32k = 0.5 + rng.normal(0, 0.02, 20)
    msm_1k = none_1k + 0.1 + rng.normal(0, 0.01, 20)
    msm_32k = none_32k - 0.05 + rng.normal(0, 0.01, 20)
    rows = []
    for leakage, values in (("none", {1000: none_1k, 32000: none_32k}), ("msm", {1000: msm_1k, 32000: msm_32k})):
        for size, vs in values.items():
            rows += [("c", "knrm", leakage, size, "nDCG@10", q, float(v)) for q, v in zip(qids, vs)]
    avg = pd.DataFrame(rows, columns=["corpus", "model", "leakage", "size", "measure", "qid", "value"])

    summary, sizes = evaluate_corpus(avg, "c", ["nDCG@10"], selection="max_effect", mfr="reciprocal_of_mrr")
    s = summary.set_index("leakage")
    assert set(sizes[sizes.leakage == "msm"]["size"]) == {1000}
    assert s.loc["msm", "mean"] == pytest.approx(msm_1k.mean())
    assert s.loc["msm", "none_mean"] == pytest.approx(none_1k.mean())
    assert s.loc["msm", "effect"] == pytest.approx(msm_1k.mean() - none_1k.mean()) and s.loc["msm", "effect"] > 0.09
    assert s.loc["msm", "p"] == pytest.approx(sps.ttest_rel(msm_1k, none_1k).pvalue)
    assert s.loc["msm", "significant"]
    assert s.loc["none", "mean"] == pytest.approx(none_32k.mean())  # the None column: None's best size

    # best (the default): the leaked type takes its best size (32k) and meets None's own best (32k)
    best = evaluate_corpus(avg, "c", ["nDCG@10"], mfr="reciprocal_of_mrr")[0].set_index("leakage")
    assert best.loc["msm", "mean"] == pytest.approx(msm_32k.mean())
    assert best.loc["msm", "effect"] == pytest.approx(msm_32k.mean() - none_32k.mean()) and best.loc["msm", "effect"] < 0
    assert best.loc["msm", "p"] == pytest.approx(sps.ttest_rel(msm_32k, none_32k).pvalue)


def test_max_effect_for_mfr_takes_the_largest_decrease_and_keeps_none_at_that_size():
    qids = ["a", "b", "c"]
    folds = {"a": 0, "b": 1, "c": 2}
    none = _grid({1: [3.0, 3.0, 3.0], 2: [2.0, 2.0, 2.0]}, qids)
    msm = _grid({1: [1.5, 1.5, 1.5], 2: [1.8, 1.8, 1.8]}, qids)  # best absolute: 1 (1.5); largest decrease: 1 (-1.5)
    eff = cross_validate(msm, folds, "MFR", leakage="msm", selection="max_effect", baseline=none, mfr="arithmetic")
    assert eff.sizes == {0: 1, 1: 1, 2: 1}
    assert eff.values.tolist() == [1.5] * 3 and eff.baseline.tolist() == [3.0] * 3
    assert cross_validate(msm, folds, "MFR", leakage="msm", mfr="arithmetic").baseline is None
