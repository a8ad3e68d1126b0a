from types import SimpleNamespace

import pandas as pd
import pytest

from leakexp.stages.build import NEGATIVES_CHUNK, NegativeRuns
from leakexp.lib.training_sets import BuildError, Negatives, build_set, export_monot5, filler_order
from leakexp.data.types import Collection, DictDocStore, Topic, TrainPool


@pytest.fixture
def world():
    """40 + 40 training queries (each with one relevant doc), a BM25 run, a 3-topic test collection."""
    q = [(f"m{i}", f"msmarco query {i}", "msmarco") for i in range(40)] + \
        [(f"o{i}", f"orcas query {i}", "orcas") for i in range(40)]
    queries = pd.DataFrame(q, columns=["qid", "text", "source"])
    qrels = pd.DataFrame([(source, qid, f"D-{qid}") for qid, _, source in q], columns=["source", "qid", "docno"])
    docs = {f"D-{qid}": f"doc of {qid}" for qid, _, _ in q}
    pool = TrainPool(queries, qrels, DictDocStore(docs))
    # BM25 top-5: the query's own doc plus four others; m0 retrieves only its own doc (no negative)
    run = []
    for i, (qid, _, source) in enumerate(q):
        ranked = [f"D-{qid}"] if qid == "m0" else [f"D-{qid}"] + [f"D-{q[(i + j) % len(q)][0]}" for j in range(1, 5)]
        run += [(source, qid, d, r) for r, d in enumerate(ranked)]
    run = pd.DataFrame(run, columns=["source", "qid", "docno", "rank"])
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


def test_a_query_leaking_for_two_topics_is_one_training_query(world):
    """A verified leak per topic (o30 leaks for 301 and 302) draws the query once: the set is the one its distinct
    queries give, and with all leaks taken every query is in it exactly once."""
    pool, neg, coll, leaks, excluded = world
    per_topic = leaks.assign(topic_qid="301")
    per_topic = pd.concat([per_topic.iloc[:1], per_topic.iloc[:1].assign(topic_qid="302"), per_topic.iloc[1:]],
                          ignore_index=True)
    assert len(per_topic) == 7 and per_topic.qid.nunique() == 6
    kw = dict(corpus="c", leakage="msm", size=20, fillers=filler_order(pool, excluded, 0), negatives=neg,
              pool_docs=pool.docs, seed=0)
    for fixed in (3, 6):
        once, m1 = build_set(**kw, fixed_queries=fixed, leaks=per_topic)
        distinct, m2 = build_set(**kw, fixed_queries=fixed, leaks=leaks)
        pd.testing.assert_frame_equal(once, distinct)
        assert m1 == m2
    leaked = once[(once.origin == "msm-leak") & (once.label == 1)]
    assert sorted(leaked.qid) == [f"o{i}" for i in range(30, 36)]  # all six, none twice
    with pytest.raises(BuildError, match=r"6 verified leaking queries are usable \(6 verified"):
        build_set(**kw, fixed_queries=7, leaks=per_topic)


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
    f, m = _build(world, "test", 40, fixed=12, test_with_replacement=True)
    assert (f.origin == "test-leak").sum() == 24
    assert m["reused_documents"] == [{"topic": t, "label": label, "documents": 3, "occurrences": 4}
                                     for t in ("301", "302", "303") for label in ("relevant", "non-relevant")]
    with pytest.raises(BuildError, match=r"build.test_missing_judgments='drop' is unknown; use skip or top_up"):
        _build(world, "test", 20, test_missing_judgments="drop")
    with pytest.raises(BuildError) as exhausted:
        _build(world, "none", 400)
    assert str(exhausted.value) == ("corpus=c leakage=none size=400: the filler pool is exhausted: it holds 69 "
                                    "non-leaking queries with a BM25 negative (1 more have none) but this set needs "
                                    "200; choose size <= 138 or a larger training pool")
    assert len(_build(world, "none", 138)[0]) == 138  # the size it names can be built
    with pytest.raises(BuildError, match=r"size must be a positive even number"):
        _build(world, "none", 21)


def test_judgments_and_negatives_are_keyed_by_source_and_query_id():
    # id 7 names one MS MARCO and one ORCAS query, each with its own relevant document
    qrels = pd.DataFrame([("msmarco", "7", "dA"), ("orcas", "7", "dB")], columns=["source", "qid", "docno"])
    run = pd.DataFrame([("msmarco", "7", "dA", 0), ("msmarco", "7", "dB", 1), ("msmarco", "7", "dC", 2),
                        ("orcas", "7", "dB", 0), ("orcas", "7", "dA", 1)],
                       columns=["source", "qid", "docno", "rank"])
    neg = Negatives.from_frames(qrels, run, seed=0)
    assert neg.qrels == {("msmarco", "7"): ["dA"], ("orcas", "7"): ["dB"]}
    assert neg.ranked[("orcas", "7")] == ["dB", "dA"]
    assert neg.pair("orcas", "7") == ("dB", "dA")  # the other source's relevant document is a fair negative
    assert neg.pair("msmarco", "7")[0] == "dA" and neg.pair("msmarco", "7")[1] in {"dB", "dC"}
    assert neg.pair("msmarco", "8") is None


def _big_world(n_topics=250, n_queries=1200, no_rel=(), no_non=(), unjudged=(), single_rel=()):
    """``n_topics`` topics (301...) with 3 relevant + 3 non-relevant judgments each, except the hazards."""
    q = [(f"q{i}", f"query {i}", ("msmarco", "orcas")[i % 2]) for i in range(n_queries)]
    queries = pd.DataFrame(q, columns=["qid", "text", "source"])
    qrels = pd.DataFrame([(s, qid, f"D-{qid}") for qid, _, s in q], columns=["source", "qid", "docno"])
    run = pd.DataFrame([(s, qid, d, r) for i, (qid, _, s) in enumerate(q)
                        for r, d in enumerate([f"D-{qid}", f"D-{q[(i + 1) % n_queries][0]}"])],
                       columns=["source", "qid", "docno", "rank"])
    pool = TrainPool(queries, qrels, DictDocStore({f"D-{qid}": qid for qid, _, _ in q}))
    topics = {str(t): Topic(str(t), f"topic {t}") for t in range(301, 301 + n_topics)}
    tq = []
    for t in topics:
        if t in unjudged:
            continue
        if t not in no_rel:
            tq += [(t, f"{t}-r{j}", 1) for j in range(1 if t in single_rel else 3)]
        if t not in no_non:
            tq += [(t, f"{t}-n{j}", 0) for j in range(3)]
    coll = Collection("c", topics, pd.DataFrame(tq, columns=["qid", "docno", "label"]),
                      DictDocStore({d: "" if d.endswith("n0") else f"text {d}" for _, d, _ in tq}))
    return pool, Negatives.from_frames(qrels, run, seed=0), coll


def _test_set(world, size, fixed, **kw):
    pool, neg, coll = world
    return build_set(corpus="c", leakage="test", size=size, fixed_queries=fixed, fillers=filler_order(pool, set(), 0),
                     negatives=neg, collection=coll, pool_docs=pool.docs, seed=0, **kw)


def test_test_leakage_skips_topics_without_judgments_as_the_authors_996():
    # Robust04: 250 topics, topic 672 has no relevant judgment; 500 leaked queries = each topic twice
    world = _big_world(no_rel={"400"})
    f, m = _test_set(world, 1000, 500)
    assert len(f) == m["instances"] == 996 and m["size"] == 1000  # 249 topics x 2 x (1 rel + 1 non-rel)
    assert m["skipped_topics"] == [{"topic": "400", "reason": "no relevant judgment"}]
    assert m["leaked_instances"] == 996 and m["leaked_requested"] == 1000 and m["leaked_shortfall"] == 4
    assert "400" not in set(f.qid) and (f[f.origin == "test-leak"].groupby("qid").size() == 4).all()
    f2, m2 = _test_set(world, 2000, 500)  # larger sets keep the same leaked part: 1,996, 3,996, ...
    assert len(f2) == 1996 and m2["by_origin"] == {"filler": 1000, "test-leak": 996}
    assert m2["leakage_ratio"] == 996 / 2000


def test_test_leakage_top_up_fills_the_configured_number_from_usable_topics():
    world = _big_world(no_rel={"400"}, no_non={"401"}, unjudged={"402"})
    f, m = _test_set(world, 1000, 500, test_missing_judgments="top_up")
    assert m["skipped_topics"] == [{"topic": "400", "reason": "no relevant judgment"},
                                   {"topic": "401", "reason": "no judged non-relevant document"},
                                   {"topic": "402", "reason": "no judgments"}]
    assert len(f) == 1000 and m["leaked_instances"] == 1000 and m["leaked_shortfall"] == 0
    per_topic = f[f.origin == "test-leak"].groupby("qid").size() // 2  # occurrences per usable topic
    assert len(per_topic) == 247 and per_topic.sum() == 500 and sorted(set(per_topic)) == [2, 3]
    assert (per_topic == 3).sum() == 500 - 2 * 247
    _, skip = _test_set(world, 1000, 500)
    assert skip["leaked_instances"] == 1000 - 12 and skip["leaked_shortfall"] == 12
    with pytest.raises(BuildError, match=r"no topic of the corpus has a relevant and a judged non-relevant"):
        _test_set(_big_world(n_topics=2, no_rel={"301", "302"}), 40, 4)


def test_a_single_relevant_document_is_reused_and_recorded_an_empty_document_kept():
    world = _big_world(n_topics=3, n_queries=40, single_rel={"302"})
    with pytest.raises(BuildError, match=r"topic 302 has 1 relevant document\(s\) but needs 2 distinct"):
        _test_set(world, 20, 6)
    f, m = _test_set(world, 20, 6, test_with_replacement=True)
    t = f[(f.origin == "test-leak") & (f.qid == "302")]
    assert t[t.label == 1].docno.tolist() == ["302-r0", "302-r0"]
    assert m["reused_documents"] == [{"topic": "302", "label": "relevant", "documents": 1, "occurrences": 2}]
    # 301-n0 .. 303-n0 are empty documents: instances keep them as empty texts
    empty = f[f.docno.str.endswith("n0")]
    assert len(empty) >= 1 and (empty.text == "").all() and (empty.label == 0).all()


def _shared_id_pool():
    # id 7 names an MS MARCO and an ORCAS query; 8 is MS MARCO only
    q = pd.DataFrame([("7", "what is lyme disease", "msmarco"), ("8", "hubble telescope", "msmarco"),
                      ("7", "ferry sinkings", "orcas"), ("9", "polio vaccine", "orcas")],
                     columns=["qid", "text", "source"])
    qrels = pd.DataFrame([("msmarco", "7", "dA"), ("msmarco", "8", "dB"), ("orcas", "7", "dC"), ("orcas", "9", "dD")],
                         columns=["source", "qid", "docno"])
    return TrainPool(q, qrels, DictDocStore({d: d for d in ("dA", "dB", "dC", "dD")}))


def test_verified_leaks_find_their_source_by_query_text():
    from leakexp.lib.training_sets import leaking_queries

    pool = _shared_id_pool()
    leaks = pd.DataFrame([("7", "Ferry  Sinkings", "303", "Identical"), ("8", "hubble", "302", "Generalization"),
                          ("7", "what is lyme disease", "301", "Identical")],
                         columns=["train_qid", "query", "topic_qid", "type"])
    got = leaking_queries(pool, leaks)
    assert sorted(zip(got.source, got.qid, got.text)) == [
        ("msmarco", "7", "what is lyme disease"), ("msmarco", "8", "hubble telescope"), ("orcas", "7", "ferry sinkings")]
    with pytest.raises(ValueError, match=r"annotated training query 7 \('tick bite'\) matches no query text"):
        leaking_queries(pool, pd.DataFrame([("7", "tick bite", "301", "Identical")], columns=leaks.columns))
    with pytest.raises(ValueError, match=r"annotated training query 5 \('x'\) is not in the training pool"):
        leaking_queries(pool, pd.DataFrame([("5", "x", "301", "Identical")], columns=leaks.columns))


def test_no_leakage_excludes_annotated_candidates_whatever_their_similarity_and_verified_leaks():
    from leakexp.lib.training_sets import excluded_queries

    pool = _shared_id_pool()
    above = pd.DataFrame([("msmarco", "8")], columns=["source", "train_qid"])
    # annotated at similarity 0.90 (below a 0.91 threshold recomputed today), judged not a leak
    annotations = pd.DataFrame([("7", "ferry sinkings", 0.90, False), ("5", "not in this pool", 0.95, True)],
                               columns=["train_qid", "query", "similarity", "leak"])
    leaks = [pd.DataFrame([("9", "orcas")], columns=["qid", "source"])]
    assert excluded_queries(pool, above, annotations, leaks) == {("msmarco", "8"), ("orcas", "7"), ("orcas", "9")}
    fillers = filler_order(pool, excluded_queries(pool, above, annotations, leaks), seed=0)
    assert list(zip(fillers.source, fillers.qid)) == [("msmarco", "7")]


def test_toy_pipeline_meets_and_handles_the_real_datas_hazards(small_cfg):
    """On the toy world (shared store with the pipeline tests): the sets and leaks the hazards affect."""
    import json

    from leakexp.lib.training_sets import excluded_queries
    from leakexp.lib.candidates import above_threshold
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    r = runner(small_cfg)
    path = r.ensure(Ask.of("build", corpus="toy_robust", leakage="test", size=128))
    m = json.loads((path / "manifest.json").read_text())
    assert m["skipped_topics"] == [{"topic": "326", "reason": "no relevant judgment"}]
    assert m["reused_documents"] == [{"topic": "327", "label": "relevant", "documents": 1, "occurrences": 2}]
    assert (m["leaked_instances"], m["leaked_shortfall"], m["instances"]) == (116, 4, 124)
    f = pd.read_parquet(path / "instances.parquet")
    assert ((f.text == "") & (f.qid == "328") & (f.label == 0)).sum() == 1  # the empty judged document
    assert f.text.str.split().str.len().max() > 800  # a long relevant document
    # topic id 330 is robust's "obesity in children" and core18's "iran nuclear program": leaks by text
    robust, core18 = (r.get(Ask.of("leaks", corpus=c)) for c in ("toy_robust", "toy_core18"))
    r330, c330 = (set(x[x.topic_qid == "330"].text) for x in (robust, core18))
    assert r330 and c330 and not r330 & c330
    assert all("iran" in t or "nuclear" in t or "uranium" in t or "atomic" in t for t in c330)
    # queries whose id both sources use keep their own source's relevant document
    pool = r.get(Ask.of("pool"))
    q = pool.queries
    shared = set(q[q.source == "msmarco"].qid) & set(q[q.source == "orcas"].qid)
    assert len(shared) == 30  # every 20th of the 600 ORCAS queries
    # the negatives the sets draw from: BM25 runs of the first fillers chunk and of every verified leak
    runs = [r.get(Ask.of("negatives", part=part)) for part in ("0", "leaks")]
    neg = Negatives.from_frames(pool.qrels, pd.concat(runs, ignore_index=True), int(small_cfg.build.seed))
    rel = pool.qrels.set_index(["source", "qid"]).docno
    used = [(s, i) for s in ("msmarco", "orcas") for i in shared if neg.pair(s, i)]
    assert used and all(neg.pair(s, i)[0] == rel[(s, i)] for s, i in used)
    # No-Leakage excludes every annotated query and every verified leak
    cands, threshold = r.get(Ask.of("detect")), float(small_cfg.detect.threshold)
    leaks = [r.get(Ask.of("leaks", corpus=c)) for c in small_cfg.data.corpora]
    excluded = excluded_queries(pool, above_threshold(cands, threshold), r.get(Ask.of("verify")), leaks)
    assert set(zip(robust.source, robust.qid)) <= excluded
    none = pd.read_parquet(r.ensure(Ask.of("build", corpus="toy_robust", leakage="none", size=256)) /
                           "instances.parquet")
    assert not set(zip(none.source, none.qid)) & excluded
    # the fillers No-Leakage sets walk are exactly the training queries outside that exclusion
    fillers = r.get(Ask.of("fillers"))
    assert not set(zip(fillers.source, fillers.qid)) & excluded
    assert len(fillers) == len(q.drop_duplicates(["source", "qid"])) - len(excluded & set(zip(q.source, q.qid)))


def test_a_negatives_chunk_past_the_end_of_the_fillers_is_empty_not_an_error(tmp_path):
    """A set larger than the fillers asks for a chunk that starts past their end: no BM25 search (it failed on the
    empty query frame), an empty run, and the set itself says that the filler pool is exhausted."""
    fillers = pd.DataFrame({"qid": ["1", "2"], "text": ["a", "b"], "source": ["msmarco", "orcas"]})
    ctx = SimpleNamespace(params={"part": "1"}, inputs={"queries": fillers, "index": None})
    assert len(fillers) < NEGATIVES_CHUNK
    assert NegativeRuns().compute(ctx, tmp_path) == {"queries": 0, "rows": 0}
    run = pd.read_parquet(tmp_path / "run.parquet")
    assert list(run.columns) == ["source", "qid", "docno", "rank"] and run.empty
    neg = Negatives.from_frames(pd.DataFrame({"source": ["msmarco"], "qid": ["1"], "docno": ["d"]}), run, seed=0)
    assert not neg.pairs(fillers).ok.any()
