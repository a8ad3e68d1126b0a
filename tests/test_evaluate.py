import math

import pandas as pd
import pytest

from leakexp.lib.measures import no_relevant_note, per_query, without_relevant
from leakexp.models.base import rank_with_docno_ties

QRELS = pd.DataFrame([("q1", "a", 0), ("q1", "b", 2), ("q1", "c", 1), ("q2", "x", 1), ("q3", "z", 0), ("q3", "w", 1)],
                     columns=["qid", "docno", "label"])
RUN = pd.DataFrame([("q1", "a", 3.0), ("q1", "c", 2.0), ("q1", "b", 1.0),  # first relevant at rank 2
                    ("q2", "x", 5.0), ("q2", "y", 1.0),                     # rank 1
                    ("q3", "z", 1.0)],                                      # its relevant doc w not retrieved
                   columns=["qid", "docno", "score"])


def _values(pq, measure):
    return pq[pq.measure == measure].set_index("qid").value.to_dict()


def test_mfr_skips_misses_by_default_and_counts_depth_plus_one_on_request():
    skip = _values(per_query(RUN, QRELS, ["MFR"]), "MFR")
    assert skip["q1"] == 2.0 and skip["q2"] == 1.0 and math.isnan(skip["q3"])
    depth = _values(per_query(RUN, QRELS, ["MFR"], mfr_missing="depth", depth=100), "MFR")
    assert depth == {"q1": 2.0, "q2": 1.0, "q3": 101.0}


def test_p1_and_ndcg_on_hand_made_rankings():
    pq = per_query(RUN, QRELS, ["P@1", "nDCG@10"])
    assert _values(pq, "P@1") == {"q1": 0.0, "q2": 1.0, "q3": 0.0}
    dcg = 1 / math.log2(3) + 2 / math.log2(4)  # trec_eval's linear gains: label 1 at rank 2, label 2 at rank 3
    idcg = 2 + 1 / math.log2(3)
    assert abs(_values(pq, "nDCG@10")["q1"] - dcg / idcg) < 1e-6


def test_ties_are_broken_by_docno():
    df = pd.DataFrame({"qid": ["1"] * 3, "docno": ["d9", "d10", "d2"], "score": [1.0, 1.0, 2.0]})
    r = rank_with_docno_ties(df)
    assert r.docno.tolist() == ["d2", "d10", "d9"] and r["rank"].tolist() == [0, 1, 2]


def test_a_tie_is_evaluated_in_the_stored_order_by_every_measure():
    # a (relevant) and b tie; the stored order (ties by ascending docno) puts a first. pytrec_eval alone
    # would put b first (descending docno): P@1 0 and nDCG@10 1/log2(3) while MFR says 1.
    tie = pd.DataFrame([("q", "b", 1.0), ("q", "a", 1.0)], columns=["qid", "docno", "score"])
    qrels = pd.DataFrame([("q", "a", 1), ("q", "b", 0)], columns=["qid", "docno", "label"])
    pq = per_query(tie, qrels, ["MFR", "P@1", "nDCG@10"])
    assert _values(pq, "MFR") == {"q": 1.0}
    assert _values(pq, "P@1") == {"q": 1.0}
    assert _values(pq, "nDCG@10") == {"q": 1.0}  # the only relevant document at rank 1
    # a stored rank column is the ranking, whatever the scores say: b first, a second
    stored = tie.assign(rank=[0, 1])
    pq = per_query(stored, qrels, ["MFR", "P@1", "nDCG@10"])
    assert _values(pq, "MFR") == {"q": 2.0} and _values(pq, "P@1") == {"q": 0.0}
    assert abs(_values(pq, "nDCG@10")["q"] - 1 / math.log2(3)) < 1e-9


def test_topics_without_relevant_judgments_are_left_out_and_named_or_counted_as_zero():
    qrels = pd.DataFrame([("301", "a", 1), ("301", "b", 0), ("672", "c", 0), ("672", "d", 0)],
                         columns=["qid", "docno", "label"])
    run = pd.DataFrame([("301", "a", 2.0), ("301", "b", 1.0), ("672", "c", 2.0), ("999", "e", 1.0)],
                       columns=["qid", "docno", "score"])
    topics = ["301", "672", "999"]  # 999: a topic without any judgment
    assert without_relevant(qrels, topics) == ["672", "999"]
    assert without_relevant(qrels) == ["672"]
    skip = per_query(run, qrels, ["nDCG@10", "P@1", "MFR"], topics=topics)
    assert set(skip.qid) == {"301"} and skip.value.tolist() == [1.0, 1.0, 1.0]
    assert no_relevant_note(["672", "999"]) == "2 topics without relevant judgments left out (672, 999)"
    assert no_relevant_note([]) == ""
    zero = per_query(run, qrels, ["nDCG@10", "P@1", "MFR"], topics=topics, no_relevant="zero", mfr_missing="depth",
                     depth=100)
    assert _values(zero, "nDCG@10") == {"301": 1.0, "672": 0.0, "999": 0.0}
    assert _values(zero, "P@1") == {"301": 1.0, "672": 0.0, "999": 0.0}
    assert _values(zero, "MFR") == {"301": 1.0, "672": 101.0, "999": 101.0}
    assert math.isnan(_values(per_query(run, qrels, ["MFR"], no_relevant="zero"), "MFR")["672"])
    assert no_relevant_note(["672"], "zero") == "1 topic without relevant judgments counted as 0 (672)"
    with pytest.raises(ValueError, match="evaluate.no_relevant"):
        per_query(run, qrels, ["P@1"], no_relevant="drop")


def test_mfr_works_inside_pt_experiment():
    import ir_measures
    import pyterrier as pt

    from leakexp.lib.measures import mfr_measure

    topics = pd.DataFrame({"qid": ["q1", "q2"], "query": ["a", "b"]})
    qrels = QRELS[QRELS.qid.isin(["q1", "q2"])]
    run = RUN[RUN.qid.isin(["q1", "q2"])].assign(rank=[0, 1, 2, 0, 1])
    flipped = run.assign(score=-run.score)
    res = pt.Experiment([run, flipped], topics, qrels, [mfr_measure("depth", 100), ir_measures.P @ 1],
                        names=["run", "flipped"], baseline=0)
    assert res.set_index("name").loc["run", "MFR"] == 1.5  # (2 + 1) / 2
    assert res.set_index("name").loc["flipped", "MFR"] == 1.5  # q1: b (relevant) first, q2: x second


def test_reranker_as_a_pyterrier_transformer_breaks_ties_by_docno_and_handles_empty_input():
    import torch

    from leakexp.models.base import Reranker
    from leakexp.stages.rerank import rerank

    class Constant(Reranker):
        name = "constant"

        def featurize(self, queries, docs):
            return {"n": torch.zeros(len(docs))}

        def forward(self, n):
            return n

    bm25 = pd.DataFrame({"qid": ["1"] * 3, "query": ["q"] * 3, "docno": ["d3", "d1", "d2"], "score": [3.0, 2.0, 1.0],
                         "rank": [0, 1, 2]})
    out = rerank(Constant(), bm25, {"d1": "x", "d2": "y", "d3": "z"})
    assert out.docno.tolist() == ["d1", "d2", "d3"] and out["rank"].tolist() == [0, 1, 2]
    empty = Constant().transformer()(bm25.head(0).assign(text=[]))
    assert len(empty) == 0 and {"score", "rank"} <= set(empty.columns)


def test_mfr_definitions_average_the_same_first_ranks_and_name_themselves():
    from leakexp.lib.measures import average, mfr_caption, per_query

    run = pd.DataFrame({"qid": ["1"] * 3 + ["2"] * 3 + ["3"] * 2, "docno": ["a", "b", "c", "d", "e", "f", "g", "h"],
                        "score": [3.0, 2, 1, 3, 2, 1, 2, 1]})
    qrels = pd.DataFrame({"qid": ["1", "2", "3"], "docno": ["a", "f", "x"], "label": [1, 1, 1]})
    ranks = {}
    for missing in ("skip", "depth", "infinite"):
        pq = per_query(run, qrels, ["MFR", "P@1"], mfr_missing=missing, depth=3)
        ranks[missing] = pq[pq.measure == "MFR"].set_index("qid").value
        assert pq[pq.measure == "P@1"].value.tolist() == [1.0, 0.0, 0.0]  # P@1 does not depend on it
    assert ranks["skip"].to_dict() == {"1": 1.0, "2": 3.0, "3": pytest.approx(math.nan, nan_ok=True)}
    assert ranks["depth"]["3"] == 4.0 and ranks["infinite"]["3"] == math.inf
    # the paper's MFR: 1 / mean reciprocal rank; a miss counts reciprocal rank 0 (infinite) or is left out
    assert average(ranks["infinite"], "MFR", "reciprocal_of_mrr") == pytest.approx(3 / (1 + 1 / 3))
    assert average(ranks["skip"], "MFR", "reciprocal_of_mrr") == pytest.approx(2 / (1 + 1 / 3))
    assert average(ranks["depth"], "MFR", "reciprocal_of_mrr") == pytest.approx(3 / (1 + 1 / 3 + 1 / 4))
    # Fuhr's arithmetic mean
    assert average(ranks["skip"], "MFR", "arithmetic") == 2.0
    assert average(ranks["depth"], "MFR", "arithmetic") == pytest.approx((1 + 3 + 4) / 3)
    # other measures are plain means whatever the definition
    assert average(pd.Series([1.0, 0.0, 0.0]), "P@1", "reciprocal_of_mrr") == pytest.approx(1 / 3)
    assert "reciprocal of the mean reciprocal rank" in mfr_caption("infinite", 100, "reciprocal_of_mrr")
    assert "reciprocal rank 0" in mfr_caption("infinite", 100, "reciprocal_of_mrr")
    assert "arithmetic mean rank" in mfr_caption("skip", 100, "arithmetic")
    assert "as rank 101" in mfr_caption("depth", 100, "arithmetic")


def test_an_arithmetic_mean_of_infinite_ranks_and_unknown_definitions_are_refused():
    from leakexp.lib.measures import check_mfr

    with pytest.raises(ValueError, match="mfr_missing=infinite makes an arithmetic MFR infinite"):
        check_mfr("arithmetic", "infinite")
    with pytest.raises(ValueError, match="evaluate.mfr='rank1' is unknown; use reciprocal_of_mrr or arithmetic"):
        check_mfr("rank1", "skip")
    with pytest.raises(ValueError, match="evaluate.mfr_missing='zero' is unknown"):
        check_mfr("reciprocal_of_mrr", "zero")


def test_averaging_in_stages_gives_the_reciprocal_of_the_overall_mrr():
    """Seeds then topics (mean_by, as the tables average) equals 1 / the mean of every reciprocal rank."""
    from leakexp.lib.measures import mean_by

    ranks = [1.0, 2.0, math.inf, 5.0, 1.0, 3.0]
    frame = pd.DataFrame({"seed": [1, 1, 1, 2, 2, 2], "qid": ["a", "b", "c"] * 2, "measure": "MFR", "value": ranks})
    per_topic = mean_by(frame, ["qid", "measure"], "reciprocal_of_mrr")
    assert per_topic.set_index("qid").value.to_dict() == pytest.approx({"a": 2 / (1 + 1 / 5), "b": 2 / (1 / 2 + 1),
                                                                         "c": 2 / (0 + 1 / 3)})
    overall = mean_by(per_topic, ["measure"], "reciprocal_of_mrr").value.iloc[0]
    assert overall == pytest.approx(6 / sum(1 / r for r in ranks))
    arithmetic = mean_by(frame[frame.value < math.inf], ["measure"], "arithmetic").value.iloc[0]
    assert arithmetic == pytest.approx((1 + 2 + 5 + 1 + 3) / 5)


def test_the_t_test_of_a_reciprocal_mfr_pairs_reciprocal_ranks():
    from scipy import stats as sps

    from leakexp.lib.stats import paired_t

    a = pd.Series([1.0, 2.0, 4.0, math.inf, 1.0, 3.0], index=list("abcdef"))
    b = pd.Series([2.0, 2.0, 1.0, 10.0, 5.0, 4.0], index=list("abcdef"))
    p, n = paired_t(a, b, "MFR", "reciprocal_of_mrr")
    assert n == 6 and p == pytest.approx(sps.ttest_rel(1 / a.values, 1 / b.values).pvalue)
    p_rank, n_rank = paired_t(a.drop("d"), b.drop("d"), "MFR", "arithmetic")
    assert n_rank == 5 and p_rank == pytest.approx(sps.ttest_rel(a.drop("d").values, b.drop("d").values).pvalue)
    assert p != pytest.approx(p_rank)
