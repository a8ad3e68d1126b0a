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


def test_mfr_definitions_rank1_and_rank0_and_their_captions():
    import pandas as pd

    from leakexp.lib.measures import mfr_caption, per_query

    run = pd.DataFrame({"qid": ["1"] * 3 + ["2"] * 3 + ["3"] * 2, "docno": ["a", "b", "c", "d", "e", "f", "g", "h"],
                        "score": [3.0, 2, 1, 3, 2, 1, 2, 1]})
    qrels = pd.DataFrame({"qid": ["1", "2", "3"], "docno": ["a", "f", "x"], "label": [1, 1, 1]})
    means = {}
    for mfr in ("rank1", "rank0"):
        for missing in ("skip", "depth"):
            pq = per_query(run, qrels, ["MFR", "P@1"], mfr_missing=missing, depth=3, mfr=mfr)
            v = pq[pq.measure == "MFR"].set_index("qid").value
            means[mfr, missing] = v.mean()
            assert pq[pq.measure == "P@1"].value.tolist() == [1.0, 0.0, 0.0]  # P@1 does not depend on it
    assert means["rank1", "skip"] == 2.0 and means["rank0", "skip"] == 1.0  # (1 + 3) / 2, (0 + 2) / 2
    assert means["rank1", "depth"] == (1 + 3 + 4) / 3 and means["rank0", "depth"] == (0 + 2 + 3) / 3
    assert "counted from 1 (Fuhr); it leaves out queries" in mfr_caption("skip", 100, "rank1")
    assert "counted from 0" in mfr_caption("depth", 100, "rank0") and "as rank 100" in mfr_caption("depth", 100, "rank0")
