import hashlib

import pandas as pd
import pytest

from leakexp.data.files import iter_docs, read_qrels, read_queries, read_trec_topics, read_variants
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
        per = per.drop(["326", "327", "328"], errors="ignore")  # the planted hazards (next test)
        assert per.rel.min() >= 2 and per.non.min() >= 2  # two distinct draws each for test leakage
    truth = pd.read_csv(tmp_path / "truth" / "leaks.tsv", sep="\t", dtype=str)
    leaking = truth[truth.type.isin(LEAK_TYPES)].topic_qid.nunique()
    all_topics = {t.qid for ts in topics.values() for t in ts}
    assert abs(leaking / len(all_topics) - 0.7) < 0.05
    assert set(truth.type) == set(LEAK_TYPES) | {"Different Topic"}
    # every training query has exactly one relevant document in its source's judgments
    for source in ("msmarco", "orcas"):
        tq = read_qrels(tmp_path / "train" / f"{source}.qrels.txt")
        q = read_queries(tmp_path / "train" / f"{source}.queries.tsv")
        assert tq.qid.is_unique and len(tq) == 500 and set(tq.qid) == set(q.qid)


@pytest.fixture(scope="module")
def hazards(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    return root, generate(root, seed=42, queries_per_source=500)["hazards"]


def test_toy_topics_without_relevant_judgment_and_with_a_single_one(hazards):
    root, hz = hazards
    q = read_qrels(root / "robust" / "qrels.txt")
    topics = {t.qid for t in read_trec_topics(root / "robust" / "topics.txt")}
    none, single = hz["no_relevant_topic"], hz["single_relevant_topic"]
    assert {none, single} <= topics
    # judged (as Robust04 topic 672), but nothing relevant
    assert (q.qid == none).sum() >= 6 and (q[q.qid == none].label == 0).all()
    assert (q[q.qid == single].label >= 1).sum() == 1


def test_toy_documents_longer_than_the_models_inputs_and_empty_ones(hazards):
    from transformers import AutoTokenizer

    from leakexp.lib.dense import sbert_path

    root, hz = hazards
    wordpiece = AutoTokenizer.from_pretrained(sbert_path("bundled"))  # BERT's uncased WordPiece vocabulary
    for c in COLLECTIONS:
        docs = dict(iter_docs(root / c / "docs.jsonl"))
        q = read_qrels(root / c / "qrels.txt").set_index("docno")
        assert len(hz["long_docs"][c]) == (3 if c == "robust" else 2)  # robust: also topic 327's only one
        for d in hz["long_docs"][c]:
            # > 800 words (Capreolus' maxdoclen); SentencePiece (T5) gives at least one piece per word
            assert len(docs[d].split()) > 800
            assert len(wordpiece(docs[d])["input_ids"]) > 512
            assert q.loc[d, "label"] == 2  # judged highly relevant: re-ranked and drawn for test leakage
    robust = dict(iter_docs(root / "robust" / "docs.jsonl"))
    (empty,) = hz["empty_docs"]["robust"]
    assert robust[empty] == ""
    q = read_qrels(root / "robust" / "qrels.txt")
    assert q[q.docno == empty].label.tolist() == [0] and (q[q.qid == "328"].label == 0).sum() == 2
    train = dict(iter_docs(root / "train" / "docs.jsonl"))
    assert train[hz["train_empty_doc"]] == ""
    assert sum(len(t.split()) > 800 for t in train.values()) >= 3


def test_toy_training_ids_shared_by_the_sources_name_different_queries(hazards):
    root, hz = hazards
    t = root / "train"
    m, o = read_queries(t / "msmarco.queries.tsv"), read_queries(t / "orcas.queries.tsv")
    shared = set(m.qid) & set(o.qid)
    assert len(shared) == hz["shared_train_qids"] == 25  # every 20th of the 500 ORCAS queries
    mt, ot = m.set_index("qid").text, o.set_index("qid").text
    assert all(mt[q] != ot[q] for q in shared)
    mq, oq = (read_qrels(t / f"{s}.qrels.txt").set_index("qid").docno for s in ("msmarco", "orcas"))
    assert all(mq[q] != oq[q] for q in shared)


def test_toy_core_topic_reuses_a_robust_id_with_another_text(hazards):
    root, hz = hazards
    robust = {t.qid: t for t in read_trec_topics(root / "robust" / "topics.txt")}
    core18 = {t.qid: t for t in read_trec_topics(root / "core18" / "topics.txt")}
    (qid,) = hz["reused_topic_ids"]
    assert core18[qid].title != robust[qid].title and core18[qid].description != robust[qid].description
    truth = pd.read_csv(root / "truth" / "leaks.tsv", sep="\t", dtype=str)
    assert (truth[truth.type.isin(LEAK_TYPES)].topic_qid == qid).sum() >= 2  # both topics have planted leaks


def test_toy_text_has_accents_and_curly_quotes_as_utf8(hazards):
    root, _ = hazards
    robust = {t.qid: t for t in read_trec_topics(root / "robust" / "topics.txt")}
    assert robust["313"].title == "el niño weather"
    assert robust["313"].description.startswith("Find information on “el niño weather”")
    queries = " ".join(read_queries(root / "train" / f"{s}.queries.tsv").text.str.cat(sep=" ") for s in ("msmarco", "orcas"))
    assert "niño" in queries and "café" in queries and "’" in queries
    raw = (root / "robust" / "docs.jsonl").read_bytes()
    assert "communiqué".encode() in raw  # written as UTF-8, not as JSON escapes
    assert "’".encode() in (root / "train" / "docs.jsonl").read_bytes()


def test_toy_query_leaks_for_two_topics(hazards):
    """As SPIRE-22's "industrial espionage" (Robust04 311's title, and 389's only leak through the variant
    "technology espionage"): one training query is a planted leak of two robust topics, the second's only one."""
    root, hz = hazards
    first, second = hz["double_leak_topics"]
    robust = {t.qid: t for t in read_trec_topics(root / "robust" / "topics.txt")}
    assert robust[first].title in read_variants(root / "robust" / "variants.tsv")[second]
    truth = pd.read_csv(root / "truth" / "leaks.tsv", sep="\t", dtype=str)
    leaks = truth[truth.type.isin(LEAK_TYPES)]
    topics = leaks.groupby(["source", "train_qid"]).topic_qid.apply(set)
    assert topics[topics.map(len) > 1].tolist() == [{first, second}]
    assert (leaks.topic_qid == second).sum() == 1  # its only leak (seed 42)
