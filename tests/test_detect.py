import numpy as np
import re

import pytest
import pandas as pd

from leakexp.lib import dense
from leakexp.lib.dense import embed_to_memmap, exact_topk
from leakexp.lib.candidates import leak_pairs, table1


def test_exact_topk_matches_brute_force_across_shards():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(2500, 24)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = base[[3, 70, 900]] + rng.normal(scale=0.3, size=(3, 24)).astype(np.float32)
    sims, ids = exact_topk(base, queries, k=50, shard_size=700, decimals=None)
    ref = queries @ base.T
    ref_ids = np.argsort(-ref, axis=1, kind="stable")[:, :50]
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(sims, np.take_along_axis(ref, ref_ids, axis=1), rtol=1e-5, atol=1e-5)


def test_exact_topk_cuts_on_rounded_scores_and_keeps_every_tie_at_the_cut():
    """Eight copies of one vector (score 1.0 +- float noise) and k=3: the three kept are the lowest rows, however
    the noise orders them, although Faiss's own top-3 may be any three."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(300, 16)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    copies = [40, 7, 250, 120, 3, 199, 77, 18]
    for trial in range(5):
        b = base.copy()
        b[copies] = base[5] * (1 + rng.normal(0, 1e-7, (len(copies), 1))).astype(np.float32)
        sims, ids = exact_topk(b, base[[5]], k=3, shard_size=64)
        assert ids[0].tolist() == [3, 5, 7] and np.all(np.abs(sims - 1) < 1e-5)


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


def _collections():
    from leakexp.data.types import Collection, DictDocStore, Topic

    empty = pd.DataFrame(columns=["qid", "docno", "label"])
    robust = Collection("robust", {"301": Topic("301", "lyme disease", "Lyme?", variants=("tick illness",)),
                                   "330": Topic("330", "obesity in children", "Overweight children?")},
                        empty, DictDocStore({}))
    # the Core track reuses 301 unchanged and 330 with another text
    core = Collection("core", {"301": Topic("301", "lyme disease", "Lyme?", variants=("tick illness",)),
                               "330": Topic("330", "iran nuclear program", "Iran's uranium?")},
                      empty, DictDocStore({}))
    return robust, core


def test_topic_fields_keep_a_reused_topic_id_with_another_text_apart():
    from leakexp.lib.candidates import topic_fields

    t = topic_fields(list(_collections()), ["title", "description", "variant"])
    got = sorted(zip(t.topic_qid, t.field, t.text, t.corpora))
    assert got == [
        ("301", "description", "Lyme?", "robust|core"),
        ("301", "title", "lyme disease", "robust|core"),
        ("301", "variant", "tick illness", "robust|core"),
        ("330", "description", "Iran's uranium?", "core"),
        ("330", "description", "Overweight children?", "robust"),
        ("330", "title", "iran nuclear program", "core"),
        ("330", "title", "obesity in children", "robust"),
    ]


def _reused_id_candidates():
    return pd.DataFrame([
        # train_qid, source, query, topic, field, variant, similarity, corpora
        ("q1", "orcas", "obesity in children", "330", "title", -1, 0.99, "robust"),
        ("q1", "orcas", "obesity in children", "330", "title", -1, 0.20, "core"),
        ("q2", "orcas", "iran nuclear program", "330", "title", -1, 0.98, "core"),
        ("q3", "msmarco", "what is lyme disease", "301", "title", -1, 0.95, "robust|core"),
        ("q3", "msmarco", "what is lyme disease", "301", "variant", 0, 0.93, "robust|core"),
    ], columns=["train_qid", "source", "query", "topic_qid", "field", "variant_index", "similarity", "corpora"])


def test_table1_and_leak_pairs_count_a_reused_id_for_the_corpus_whose_text_matched():
    c = _reused_id_candidates()
    t = table1(c, {"robust": ["301", "330"], "core": ["301", "330"]}, 0.91)
    union = t[(t.field == "Union") & (t.sources == "+ORC")].set_index("corpus")
    assert union.loc["robust", ["T", "Q"]].tolist() == [2, 2]  # q1 (330) and q3 (301); not q2
    assert union.loc["core", ["T", "Q"]].tolist() == [2, 2]  # q2 (330) and q3 (301); not q1
    pairs = leak_pairs(c, 0.91).set_index("train_qid")
    assert pairs.corpora.to_dict() == {"q1": "robust", "q2": "core", "q3": "core|robust"}


def test_verified_leaks_of_a_reused_topic_id_go_to_the_corpus_whose_text_matched():
    from leakexp.toolkit.annotations import verified_leaks

    ann = pd.DataFrame([
        (0, "q1", "obesity in children", "330", True), (1, "q2", "iran nuclear program", "330", True),
        (2, "q3", "what is lyme disease", "301", True), (3, "q9", "from another annotation run", "330", True),
        (4, "q4", "lyme regis", "301", False),
    ], columns=["id", "train_qid", "query", "topic_qid", "leak"])
    pairs = leak_pairs(_reused_id_candidates(), 0.91)
    got = {c: sorted(verified_leaks(ann, ["301", "330"], corpus=c, pairs=pairs).train_qid) for c in ("robust", "core")}
    # q9 is not among the candidates: attributed by its topic id alone, as without the candidate table
    assert got == {"robust": ["q1", "q3", "q9"], "core": ["q2", "q3", "q9"]}
    assert sorted(verified_leaks(ann, ["301", "330"]).train_qid) == ["q1", "q2", "q3", "q9"]


def test_truth_labels_follow_the_source_of_a_shared_query_id():
    from leakexp.toolkit.annotations import truth_labels

    review = pd.DataFrame([("7", "msmarco", "301"), ("7", "orcas", "301")], columns=["train_qid", "source", "topic_qid"])
    truth = pd.DataFrame([("7", "orcas", "301", "Identical")], columns=["train_qid", "source", "topic_qid", "type"])
    assert truth_labels(review, truth) == [["Different Topic"], ["Title-Identical"]]


def test_detection_embeddings_stay_float32_on_gpu(monkeypatch):
    import sentence_transformers

    from leakexp.stages import detect

    class FakeModel:
        def __init__(self, path, device=None):
            self.device, self.halved = device, False

        def half(self):
            self.halved = True
            return self

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", FakeModel)
    model = dense.load_sbert("bundled", device="cuda")
    assert model.device == "cuda" and not model.halved  # fp16 moves similarities near 0.91 by ~1e-3


def test_table1_caption_states_the_searched_fields(tmp_path):
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import Ask
    from leakexp.tables.paper import write_table1

    class Searched:  # the two runner requests Table 1 makes: the candidates and each corpus's collection
        # named as corpora of the configuration: the typed settings resolve every corpus of data.corpora
        collections = dict(zip(["toy_robust", "toy_core17"], _collections()))

        def get(self, ask: Ask):
            if ask.stage == "detect":
                return _reused_id_candidates()
            assert ask.stage == "collection", ask
            return self.collections[ask.params["corpus"]]

    for fields, said in (("[title,description]", "fields searched: title, description (query variants not searched"),
                         ("[title,description,variant]", "fields searched: title, description, variant;")):
        cfg = compose([f"store={tmp_path}", f"detect.fields={fields}", "robustness.ood=null",
                       f"data.corpora=[{','.join(Searched.collections)}]"])  # the fake's corpora (Table 1 reads these)
        assert said in write_table1(cfg, Searched()).read_text()
    # the rounding the threshold is decided on, and what lies within one step of it (0.93: q3's variant, at it)
    corpora = [f"store={tmp_path}", "robustness.ood=null", f"data.corpora=[{','.join(Searched.collections)}]"]
    text = write_table1(compose([*corpora, "detect.threshold=0.93"]), Searched()).read_text()
    assert "similarities rounded to 4 decimals before the threshold, 1 candidate(s) within 0.0001 of it" in text
    assert "none within 0.0001 of it." in write_table1(compose([*corpora, "detect.threshold=0.5"]), Searched()).read_text()


def test_real_corpus_without_variants_is_an_error_that_says_how_to_fix_it(tmp_path, monkeypatch):
    from leakexp.runner import registry as stages
    from leakexp.runner.stage import ConfigError

    for name in ("ROBUST04", "CORE17", "CORE18"):
        monkeypatch.delenv(f"LEAKEXP_VARIANTS_{name}", raising=False)
    overrides = [f"store={tmp_path}", "experiment=paper"]
    message = (r"corpus robust04 has no query variants but detect.fields includes "
               r"'variant': give a TSV file of qid<TAB>variant lines .* corpus.variants=/path/to/variants.tsv "
               r".* or search without variants on purpose with detect.fields=\[title,description\]")
    # a requirement of detection, before any data is loaded: a runner that detects refuses ...
    cfg = stages.compose(overrides)  # composing and read-only commands (plan, status) do not refuse
    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.1 0.2\n")
    monkeypatch.setenv("LEAKEXP_GLOVE", str(glove))  # the input files are there: what lacks is the variants
    with pytest.raises(ConfigError, match=message):
        stages.runner(stages.compose(overrides), needs=("detect",))
    # ... and plan / status list it among what a run will still need
    assert any(re.match(message, line) for line in stages.unmet_requirements(cfg))


def test_variants_file_must_match_the_topics(caplog):
    from omegaconf import OmegaConf

    from leakexp.data.files import DataFormatError
    from leakexp.stages.sources import check_variants, require_variants

    robust, core = _collections()  # robust 301 has a variant, 330 has none
    local = OmegaConf.create({"name": "robust", "kind": "local", "variants": "v.tsv"})
    require_variants(local, ["title", "variant"])  # given: fine
    require_variants(OmegaConf.create({"name": "x", "kind": "local", "variants": None}), ["title"])  # not searched
    with caplog.at_level("WARNING"):
        check_variants(robust, local, ["title", "variant"])
    assert "corpus robust: 1 of 2 topics have no query variants" in caplog.text
    from leakexp.data.types import Collection, Topic

    bare = Collection("robust", {"301": Topic("301", "lyme disease")}, robust.qrels, robust.docs)
    with pytest.raises(DataFormatError, match=r"corpus robust: the variants file v.tsv names none of the 1 topic ids"):
        check_variants(bare, local, ["variant"])
