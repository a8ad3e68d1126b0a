import pandas as pd
import pytest

from leakexp.build import BuildError, Negatives, build_set, export_monot5, filler_order
from leakexp.data.types import Collection, DictDocStore, Topic, TrainPool


@pytest.fixture
def world():
    """40 + 40 training queries (each with one relevant doc), a BM25 run, a 3-topic test collection."""
    q = [(f"m{i}", f"msmarco query {i}", "msmarco") for i in range(40)] + \
        [(f"o{i}", f"orcas query {i}", "orcas") for i in range(40)]
    queries = pd.DataFrame(q, columns=["qid", "text", "source"])
    qrels = pd.DataFrame([(qid, f"D-{qid}") for qid, _, _ in q], columns=["qid", "docno"])
    docs = {f"D-{qid}": f"doc of {qid}" for qid, _, _ in q}
    pool = TrainPool(queries, qrels, DictDocStore(docs))
    # BM25 top-5: the query's own doc plus four others; m0 retrieves only its own doc (no negative)
    run = []
    for i, (qid, _, _) in enumerate(q):
        ranked = [f"D-{qid}"] if qid == "m0" else [f"D-{qid}"] + [f"D-{q[(i + j) % len(q)][0]}" for j in range(1, 5)]
        run += [(qid, d, r) for r, d in enumerate(ranked)]
    run = pd.DataFrame(run, columns=["qid", "docno", "rank"])
    topics = {t: Topic(t, f"topic {t}") for t in ("301", "302", "303")}
    tq = []
    for t in topics:
        tq += [(t, f"{t}-r{j}", 1 + j % 2) for j in range(3)] + [(t, f"{t}-n{j}", 0) for j in range(3)]
    tdocs = {d: f"text {d}" for _, d, _ in tq}
    coll = Collection("c", topics, pd.DataFrame(tq, columns=["qid", "docno", "label"]), DictDocStore(tdocs))
    leaks = pd.DataFrame([(f"o{i}", f"orcas query {i}", "orcas") for i in range(30, 36)],
                         columns=["qid", "text", "source"])
    excluded = {("orcas", f"o{i}") for i in range(30, 40)}  # candidates above the threshold
    return pool, Negatives.from_frames(qrels, run, seed=0), coll, leaks, excluded


def _build(world, leakage, size, fixed=3, seed=0, **kw):
    pool, neg, coll, leaks, excluded = world
    return build_set(corpus="c", leakage=leakage, size=size, fixed_queries=fixed,
                     fillers=filler_order(pool, excluded, seed), negatives=neg, leaks=leaks, collection=coll,
                     pool_docs=pool.docs, seed=seed, **kw)


def test_counts_balance_and_no_candidate_fillers(world):
    for leakage, leaked in (("none", 0), ("msm", 6), ("test", 6)):
        for size in (20, 40):
            f, m = _build(world, leakage, size)
            assert len(f) == size and m["leaked_instances"] == leaked
            assert m["leakage_ratio"] == pytest.approx(leaked / size)
            fill = f[f.origin == "filler"]
            assert len(fill) == size - leaked
            n_m, n_o = (fill.source == "msmarco").sum() // 2, (fill.source == "orcas").sum() // 2
            assert abs(n_m - n_o) <= 1
            assert not set(zip(fill.source, fill.qid)) & world[4]
            # positive then negative, per query
            assert f.label.tolist() == [1, 0] * (size // 2)
            assert (f.groupby("pair").qid.nunique() == 1).all()
    f, _ = _build(world, "msm", 20)
    assert (f.origin == "msm-leak").sum() == 6 and set(f[f.origin == "msm-leak"].source) == {"orcas"}


def test_sizes_nest_and_types_share_the_filler_prefix(world):
    key = lambda f: list(zip(f[f.origin == "filler"].qid, f[f.origin == "filler"].docno))
    small, _ = _build(world, "none", 20)
    large, _ = _build(world, "none", 40)
    msm, _ = _build(world, "msm", 20)
    test, _ = _build(world, "test", 20)
    assert key(large)[: len(key(small))] == key(small)
    assert key(msm) == key(small)[: len(key(msm))] == key(test)


def test_test_leakage_draws_distinct_docs_from_the_right_labels(world):
    f, _ = _build(world, "test", 20, fixed=6)
    t = f[f.origin == "test-leak"]
    assert set(t.qid) == {"301", "302", "303"} and (t.source == "test").all()
    qrels = world[2].qrels.set_index("docno").label
    assert (qrels[t[t.label == 1].docno] >= 1).all() and (qrels[t[t.label == 0].docno] == 0).all()
    for _, g in t.groupby("qid"):  # each topic twice, with different documents each time
        assert g[g.label == 1].docno.is_unique and g[g.label == 0].docno.is_unique and len(g) == 4


def test_negatives_are_never_relevant_and_m0_without_negative_is_skipped(world):
    f, _ = _build(world, "none", 40)
    rel = world[0].qrels.groupby("qid").docno.apply(set)
    neg = f[f.label == 0]
    assert not any(d in rel[q] for q, d in zip(neg.qid, neg.docno))
    assert "m0" not in set(f.qid)


def test_same_seed_same_bytes_other_seed_other_set(world, tmp_path):
    a, ma = _build(world, "msm", 20, seed=1)
    b, mb = _build(world, "msm", 20, seed=1)
    c, mc = _build(world, "msm", 20, seed=2)
    assert ma["content_hash"] == mb["content_hash"] != mc["content_hash"]
    export_monot5(a, tmp_path / "a.txt")
    export_monot5(b, tmp_path / "b.txt")
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    first = (tmp_path / "a.txt").read_text().splitlines()[0]
    assert first.startswith("Query: ") and " Document: " in first and first.endswith("Relevant:\ttrue")


def test_errors_name_corpus_type_size_and_numbers(world):
    with pytest.raises(BuildError, match=r"corpus=c leakage=msm size=4: size 4 is smaller than the 6 fixed"):
        _build(world, "msm", 4)
    with pytest.raises(BuildError, match=r"6 verified .* but 8 are requested"):
        _build(world, "msm", 20, fixed=8)
    f, m = _build(world, "msm", 20, fixed=8, take_all_leaks=True)
    assert m["leaks_taken"] == 6 and m["leaks_requested"] == 8
    with pytest.raises(BuildError, match=r"topic 30\d has 3 relevant document\(s\) but needs 4"):
        _build(world, "test", 40, fixed=12)
    f, _ = _build(world, "test", 40, fixed=12, test_with_replacement=True)
    assert (f.origin == "test-leak").sum() == 24
    with pytest.raises(BuildError, match=r"filler pool is exhausted"):
        _build(world, "none", 400)
    with pytest.raises(BuildError, match=r"size must be a positive even number"):
        _build(world, "none", 21)
