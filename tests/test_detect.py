import numpy as np
import pandas as pd

from leakexp.detect import embed_to_memmap, exact_topk, leak_pairs, table1


def test_exact_topk_matches_brute_force_across_shards():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(2500, 24)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = base[[3, 70, 900]] + rng.normal(scale=0.3, size=(3, 24)).astype(np.float32)
    sims, ids = exact_topk(base, queries, k=50, shard_size=700)
    ref = queries @ base.T
    ref_ids = np.argsort(-ref, axis=1, kind="stable")[:, :50]
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(sims, np.take_along_axis(ref, ref_ids, axis=1), rtol=1e-5, atol=1e-5)


def test_table1_counts_topics_and_queries_by_field_and_source():
    c = pd.DataFrame([
        # train_qid, source, query, topic, field, variant, similarity
        ("q1", "msmarco", "a", "301", "title", -1, 0.95),
        ("q1", "msmarco", "a", "301", "variant", 0, 0.93),   # same query, other field
        ("q2", "orcas", "b", "301", "variant", 1, 0.92),
        ("q3", "orcas", "c", "302", "description", -1, 0.97),
        ("q4", "orcas", "d", "302", "title", -1, 0.91),       # not > 0.91
        ("q5", "msmarco", "e", "900", "title", -1, 0.99),     # topic of another corpus
    ], columns=["train_qid", "source", "query", "topic_qid", "field", "variant_index", "similarity"])
    t = table1(c, {"r": ["301", "302"]}, 0.91).set_index(["field", "sources"])
    assert t.loc[("Title", "MSM"), ["T", "Q"]].tolist() == [1, 1]
    assert t.loc[("Title", "+ORC"), ["T", "Q"]].tolist() == [1, 1]
    assert t.loc[("Description", "+ORC"), ["T", "Q"]].tolist() == [1, 1]
    assert t.loc[("Variants", "MSM"), ["T", "Q"]].tolist() == [1, 1]
    assert t.loc[("Variants", "+ORC"), ["T", "Q"]].tolist() == [1, 2]
    assert t.loc[("Union", "+ORC"), ["T", "Q"]].tolist() == [2, 3]
    pairs = leak_pairs(c, 0.91)
    assert sorted(zip(pairs.train_qid, pairs.topic_qid)) == [("q1", "301"), ("q2", "301"), ("q3", "302"), ("q5", "900")]
    assert pairs.set_index("train_qid").loc["q1", "similarity"] == 0.95


class _FakeModel:
    """Deterministic 'embedding' counting calls, standing in for SBERT."""

    def __init__(self, fail_after=None):
        self.calls, self.fail_after = 0, fail_after

    def get_embedding_dimension(self):
        return 4

    def encode(self, texts, **_):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt("killed")
        return np.array([[len(t), 1, 0, 0] for t in texts], dtype=np.float32)


def test_embedding_resumes_after_a_kill_without_reembedding(tmp_path):
    texts = [f"q{'x' * i}" for i in range(10)]
    dying = _FakeModel(fail_after=2)
    try:
        embed_to_memmap(dying, texts, tmp_path, chunk_size=3)
    except KeyboardInterrupt:
        pass
    assert dying.calls == 3  # two chunks done, the third interrupted
    resumed = _FakeModel()
    emb = embed_to_memmap(resumed, texts, tmp_path, chunk_size=3)
    assert resumed.calls == 2  # only chunks 3 and 4 (texts 6..9) are embedded again
    np.testing.assert_array_equal(emb[:, 0], [len(t) for t in texts])
