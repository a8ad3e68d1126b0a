"""Decisions on kernel-computed floats: another CPU's float noise flips no review order, leak and training set.

The SBERT similarities of two machines differ in their last bits (ATen's kernels, MKL's and Faiss's BLAS): a
training query that copies a topic's title has similarity 1.0 +- a few ulp on each. The tests nudge the stored
similarities of the toy world's candidates as such noise would and rebuild the leakage path (review, annotations,
verified leaks, the MS MARCO leakage sets): nothing may change.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from leakexp.lib import decisions
from leakexp.lib.training_sets import Negatives, build_set, leaking_queries
from leakexp.runner.stage import Ask
from leakexp.lib.candidates import leak_pairs
from leakexp.toolkit.annotations import (read_annotations, review_candidates, to_annotation_records, truth_labels,
                                         verified_leaks, write_annotations)


def test_rounded_keeps_ties_of_noisy_copies_and_states_its_step():
    one = np.float32(1.0)
    noisy = np.array([one, np.nextafter(one, np.float32(2)), np.nextafter(np.nextafter(one, np.float32(0)),
                                                                        np.float32(0))], dtype=np.float32)
    assert len(set(noisy.tolist())) == 3
    assert set(decisions.rounded(noisy).tolist()) == {1.0}
    assert decisions.SIMILARITY_STEP == 10.0 ** -decisions.SIMILARITY_DECIMALS == 1e-4


def test_above_decides_on_the_rounded_value_and_near_marks_what_noise_could_move():
    sims = np.array([0.9100, 0.91004, 0.91006, 0.9102, 0.9098, 0.95], dtype=np.float32)
    assert decisions.above(sims, 0.91).tolist() == [False, False, True, True, False, True]
    assert decisions.near(sims, 0.91).tolist() == [True, True, True, False, False, False]


def test_ranked_orders_by_rounded_value_then_ids():
    frame = pd.DataFrame({"topic_qid": ["1", "1", "1", "2"], "similarity": [0.99990002, 0.9999, 0.5, 0.7],
                          "source": ["orcas", "msmarco", "msmarco", "msmarco"], "train_qid": ["9", "10", "3", "4"]})
    out = decisions.ranked(frame, "similarity", by=["topic_qid"], ties=["source", "train_qid"])
    assert list(zip(out.source, out.train_qid)) == [("msmarco", "10"), ("orcas", "9"), ("msmarco", "3"),
                                                    ("msmarco", "4")]


def _leakage_path(cands, threshold, top_k, collections, truth, pool, fillers, negatives, tmp, size, seed):
    """What the verify, leaks and build stages make of detection's candidates: the review records and, per corpus,
    the MS MARCO leakage set's content hash and leaked queries."""
    pairs = leak_pairs(cands, threshold)
    review = review_candidates(pairs, top_k)
    records = to_annotation_records(review, collections, truth_labels(review, truth))
    write_annotations(tmp / "annotations.jsonl", records)
    records = [{k: v for k, v in rec.items() if k != "cosine_similarity"} for rec in records]  # shown, not decided on
    ann = read_annotations([tmp / "annotations.jsonl"], allow_empty=True)
    sets = {}
    for c in collections:
        leaks = leaking_queries(pool, verified_leaks(ann, list(c.topics), corpus=c.name, pairs=pairs))
        frame, manifest = build_set(corpus=c.name, leakage="msm", size=size, fixed_queries=min(20, len(leaks)),
                                    fillers=fillers, negatives=negatives, leaks=leaks, pool_docs=pool.docs,
                                    seed=seed, take_all_leaks=True)
        leaked = frame[frame.origin == "msm-leak"]
        sets[c.name] = (manifest["content_hash"], sorted(set(zip(leaked.source, leaked.qid))))
    return records, sets


@pytest.fixture(scope="module")
def leakage_inputs(small_cfg):
    from leakexp.runner.registry import runner

    r = runner(small_cfg)
    s = r.settings
    pool = r.get(Ask.of("pool"))
    runs = [r.get(Ask.of("negatives", part=part)) for part in ("0", "leaks")]
    negatives = Negatives.from_frames(pool.qrels, pd.concat(runs, ignore_index=True), s.build.seed)
    truth = pd.read_csv(r.ensure(Ask.of("toy")) / "truth" / "leaks.tsv", sep="\t", dtype=str)
    collections = [r.get(Ask.of("collection", corpus=n)) for n in s.data.corpora]
    return dict(cands=r.get(Ask.of("detect")), threshold=s.detect.threshold, top_k=s.verify.review_top_k,
                collections=collections, truth=truth, pool=pool, fillers=r.get(Ask.of("fillers")),
                negatives=negatives, size=256, seed=s.build.seed)


def test_kernel_noise_in_the_similarities_changes_no_review_leak_or_training_set(leakage_inputs, tmp_path):
    """The candidates hold exact copies of topic texts (similarity 1.0 +- ulp, tied); nudged by a few ulp and by
    1e-6 noise, 40 times, the review records, the verified leaks and the MS MARCO leakage sets stay the same."""
    inputs = dict(leakage_inputs)
    cands = inputs.pop("cands")
    sims = cands.similarity.to_numpy(np.float32)
    assert (np.abs(sims - 1) < 1e-6).sum() >= 10  # the tie groups the noise would reorder
    base = _leakage_path(cands, tmp=tmp_path, **inputs)
    rng = np.random.default_rng(7)
    changed = []
    for trial in range(40):
        if trial % 2:
            nudged = sims + rng.normal(0, 1e-6, len(sims)).astype(np.float32)
        else:
            nudged = sims.copy()
            for _ in range(2):
                step = rng.integers(-1, 2, len(sims))
                nudged = np.where(step > 0, np.nextafter(nudged, np.float32(2)),
                                  np.where(step < 0, np.nextafter(nudged, np.float32(-2)), nudged))
        out = _leakage_path(cands.assign(similarity=nudged.astype(np.float32)), tmp=tmp_path, **inputs)
        if out != base:
            changed.append(trial)
    assert changed == []


def test_equal_means_summed_in_another_order_tie_and_the_smaller_size_wins():
    """Two sizes whose per-topic values are the same numbers on other topics: their means differ in the last bit
    (summed in another order) but are equal, so the cross-validation takes the smaller size, on any machine."""
    from leakexp.lib.stats import _pick, order_swaps

    values = [0.134, 0.847, 0.764, 0.255, 0.495]
    a, b = sum(values) / 5, sum(reversed(values)) / 5
    assert a != b
    assert _pick({384: max(a, b), 128: min(a, b)}, lower_better=False) == 128  # the larger is ahead by a bit
    assert _pick({384: min(a, b), 128: max(a, b)}, lower_better=True) == 128
    # a model "overtaken" by a last-bit difference is no order swap
    assert order_swaps({"x": {"none": min(a, b), "msm": max(a, b)}, "y": {"none": max(a, b), "msm": 0.0}}) == []
