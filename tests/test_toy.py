import hashlib

import pandas as pd

from leakexp.data.files import read_qrels, read_trec_topics, read_variants
from leakexp.data.toy import COLLECTIONS, LEAK_TYPES, generate


def _digest(root):
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_toy_world_is_deterministic_per_seed(tmp_path):
    generate(tmp_path / "a", seed=7, queries_per_source=300)
    generate(tmp_path / "b", seed=7, queries_per_source=300)
    generate(tmp_path / "c", seed=8, queries_per_source=300)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_toy_world_shape(tmp_path):
    fig = generate(tmp_path, seed=42, queries_per_source=500)
    assert fig["train"]["msmarco"] == 500 and fig["train"]["orcas"] == 500
    topics = {c: read_trec_topics(tmp_path / c / "topics.txt") for c in COLLECTIONS}
    assert [len(topics[c]) for c in COLLECTIONS] == [30, 12, 12]
    robust = {t.qid: t.title for t in topics["robust"]}
    # core17 reuses robust topics (same qid, same title); core18 reuses some and adds new ones
    assert all(robust.get(t.qid) == t.title for t in topics["core17"])
    reused18 = [t for t in topics["core18"] if t.qid in robust]
    assert 0 < len(reused18) < 12
    for c in COLLECTIONS:
        variants = read_variants(tmp_path / c / "variants.tsv")
        assert min(len(v) for v in variants.values()) >= 8
        q = read_qrels(tmp_path / c / "qrels.txt")
        assert set(q.label) == {0, 1, 2}
        per = q.groupby("qid").label.agg(rel=lambda s: (s >= 1).sum(), non=lambda s: (s == 0).sum())
        assert per.rel.min() >= 2 and per.non.min() >= 2  # test leakage needs two distinct draws each
    truth = pd.read_csv(tmp_path / "truth" / "leaks.tsv", sep="\t", dtype=str)
    leaking = truth[truth.type.isin(LEAK_TYPES)].topic_qid.nunique()
    all_topics = {t.qid for ts in topics.values() for t in ts}
    assert abs(leaking / len(all_topics) - 0.7) < 0.05
    assert set(truth.type) == set(LEAK_TYPES) | {"Different Topic"}
    # every training query has exactly one relevant document, which exists
    tq = read_qrels(tmp_path / "train" / "qrels.txt")
    assert tq.qid.is_unique and len(tq) == 1000
