"""leakexp.toolkit.audit on hand-made data with known answers: query, lexical and label overlap, the report,
split_eval and the CLI. Embeddings are injected (tiny vectors with chosen cosines) except in one test
that uses the bundled MiniLM."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from leakexp.toolkit import audit as A
from leakexp.toolkit import overlap, queries, split_eval
from leakexp.cli.main import main


def unit(*coords: tuple[int, float], dim: int = 10) -> list[float]:
    """A unit vector from (axis, value) pairs; the rest of the norm goes to the last axis given."""
    v = np.zeros(dim)
    for axis, value in coords:
        v[axis] = value
    return v.tolist()


class FakeEmbedder:
    """Vectors looked up by text: cosines are known exactly."""

    def __init__(self, vectors: dict[str, list[float]]):
        self.vectors = vectors
        self.calls: list[str] = []

    def __call__(self, texts, name):
        self.calls.append(name)
        x = np.array([self.vectors[t] for t in texts], dtype=np.float32).reshape(len(texts), -1)
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def r(c: float) -> float:
    return math.sqrt(1 - c * c)


TEST = {  # qid -> text; each on its own axis
    "q1": "Hubble Telescope Images",
    "q2": "cheap flights to paris from london tonight",
    "q3": "\ufb01sh recipes",  # 'fi' ligature: NFKC makes it 'fish'
    "q4": "quantum computing basics",
    "q5": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
    "q6": "automobile repair shop",
}
TRAIN = {
    "a": "hubble telescope images!!",  # exact duplicate of q1 after normalisation
    "b": "flights to paris from london",  # 0.95 to q2; shares 3 of q2's 5 word 3-grams
    "c": "FISH recipes",  # exact duplicate of q3, but only 0.85 similar
    "d": "history of rome",
    "e": "zero one two three four five six seven eight nine ten eleven twelve thirteen",  # one 13-gram of q5
    "f": "car mechanic garage",  # 0.93 to q6, no word in common
}
VECTORS = {
    TEST["q1"]: unit((0, 1)), TEST["q2"]: unit((1, 1)), TEST["q3"]: unit((2, 1)), TEST["q4"]: unit((3, 1)),
    TEST["q5"]: unit((4, 1)), TEST["q6"]: unit((8, 1)),
    TRAIN["a"]: unit((0, 1)), TRAIN["b"]: unit((1, 0.95), (5, r(0.95))), TRAIN["c"]: unit((2, 0.85), (6, r(0.85))),
    TRAIN["d"]: unit((7, 1)), TRAIN["e"]: unit((4, 0.5), (5, r(0.5))), TRAIN["f"]: unit((8, 0.93), (9, r(0.93))),
}
TEST_QRELS = "q1 0 D1 2\nq1 0 D2 1\nq2 0 D3 1\nq3 0 D4 2\nq3 0 D5 2\nq4 0 D6 0\nq5 0 D7 1\nq6 0 D8 1\n"
TRAIN_QRELS = "a 0 D1 1\nb 0 D3 1\nc 0 D4 2\nc 0 D5 1\nd 0 D9 1\ne 0 D7 0\nf 0 D10 1\n"


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "dev.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in TEST.items()), encoding="utf-8")
    (d / "train.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in TRAIN.items()), encoding="utf-8")
    (d / "dev.qrels").write_text(TEST_QRELS)
    (d / "train.qrels").write_text(TRAIN_QRELS)
    return d


def sides(files):
    train = queries.load_side([str(files / "train.tsv")], [str(files / "train.qrels")], role="train")
    test = queries.load_side([str(files / "dev.tsv")], [str(files / "dev.qrels")])
    return train, test


# -- normalisation and lexical overlap -----------------------------------------------------------------------
def test_normalize_case_punctuation_whitespace_unicode():
    assert overlap.normalize("  Hubble,  TELESCOPE\timages!! ") == "hubble telescope images"
    assert overlap.normalize("\ufb01sh") == "fish"  # NFKC ligature
    assert overlap.normalize("\uff21\uff22\uff23 \u00bfqu\u00e9?") == "abc qué"  # full-width letters, Spanish punctuation
    assert overlap.normalize("Straße") == "strasse"  # case folding, not just lower()
    assert overlap.normalize("c++ & c#") == "c c"  # symbols go, as string.punctuation does in lm-eval


def test_word_ngrams_none_when_shorter():
    assert overlap.word_ngrams("a b c d".split(), 3) == ["a b c", "b c d"]
    assert overlap.word_ngrams("a b".split(), 3) == []


def test_lexical_overlap_known_answers():
    test = list(TEST.values())
    lex = overlap.lexical_overlap(list(TRAIN.values()), test, np.arange(len(test)), len(test), ngrams=(13, 3))
    assert lex.exact_duplicate.tolist() == [True, False, True, False, False, False]
    assert lex.exact_train_row.tolist() == [0, -1, 2, -1, -1, -1]
    assert lex.ngram3_total.tolist() == [1, 5, 0, 1, 12, 1]
    assert lex.ngram3_found.tolist() == [1, 3, 0, 0, 11, 0]
    assert lex.ngram3_containment.iloc[1] == pytest.approx(0.6)
    assert math.isnan(lex.ngram3_containment.iloc[2])  # two words: no 3-gram
    assert lex.ngram13_total.tolist() == [0, 0, 0, 0, 2, 0]
    assert lex.ngram13_found.tolist() == [0, 0, 0, 0, 1, 0]
    assert lex.ngram13_any.tolist() == [False, False, False, False, True, False]


def test_lexical_overlap_unions_the_texts_of_a_query():
    # two texts of query 0 (title + description); the second shares a 3-gram
    lex = overlap.lexical_overlap(["x y z w"], ["a b c", "x y z"], np.array([0, 0]), 1, ngrams=(3,))
    assert lex.ngram3_total.tolist() == [2]
    assert lex.ngram3_found.tolist() == [1]


def test_ngrams_of_stop_words_only_are_no_overlap():
    # "what is the" and "of the the" are stop words only: sharing them is no overlap; "capital of peru" is
    test = ["what is the capital of peru", "in the of the the"]
    train = ["what is the tallest tower", "of the the", "capital of peru today"]
    lex = overlap.lexical_overlap(train, test, np.arange(2), 2, ngrams=(3,))
    # test 0's 3-grams: what is the (stop only), is the capital, the capital of, capital of peru
    assert lex.ngram3_total.tolist() == [3, 0] and lex.ngram3_found.tolist() == [1, 0]
    assert lex.ngram3_any.tolist() == [True, False]
    lex = overlap.lexical_overlap(train[:2], test, np.arange(2), 2, ngrams=(3,))
    assert lex.ngram3_any.tolist() == [False, False]
    assert len(overlap.NLTK_ENGLISH_STOPWORDS) == 179 and len(overlap.stopwords()) == 178  # "it's" and "its" meet
    assert {"what", "is", "the", "dont"} <= overlap.stopwords()


# -- label overlap ------------------------------------------------------------------------------------------------
def qrels_frame(text: str, source: str) -> pd.DataFrame:
    rows = [line.split() for line in text.strip().splitlines()]
    return pd.DataFrame([(source, q, d, int(l)) for q, _, d, l in rows], columns=queries.QREL_COLUMNS)


def test_label_overlap_counts_one_shared_document():
    lab = overlap.label_overlap(qrels_frame(TRAIN_QRELS, "tr"), qrels_frame(TEST_QRELS, "dev"))
    by = lab.set_index("qid")
    assert by.loc["q1", "relevant"] == 2 and by.loc["q1", "shared"] == 1  # exactly one document shared
    assert bool(by.loc["q1", "label_overlap"]) and not bool(by.loc["q1", "reference_rule"])
    assert bool(by.loc["q3", "reference_rule"])  # two shared: the only one the reference script counts
    assert by.loc["q4", "relevant"] == 0  # judged, nothing relevant: still in the denominator
    assert not bool(by.loc["q5", "label_overlap"])  # D7 is not relevant (label 0) for training
    assert lab.label_overlap.tolist() == [True, True, True, False, False, False]
    assert overlap.label_overlap_line(lab) == "label_overlap: 3 of 6 test queries (50.0%)"
    assert int(lab.reference_rule.sum()) == 1
    assert by.loc["q3", "shared_docs"] == "D4 D5" and by.loc["q3", "shared_train"] == "c"


def test_label_overlap_graded_thresholds():
    train, test = qrels_frame(TRAIN_QRELS, "tr"), qrels_frame(TEST_QRELS, "dev")
    strict_test = overlap.label_overlap(train, test, test_rel=2)  # D2, D3, D7, D8 are not relevant enough
    assert strict_test.label_overlap.tolist() == [True, False, True, False, False, False]
    strict_train = overlap.label_overlap(train, test, train_rel=2)  # only c's D4 is relevant enough for training
    assert strict_train.label_overlap.tolist() == [False, False, True, False, False, False]
    assert strict_train.set_index("qid").loc["q3", "shared"] == 1
    assert overlap.label_overlap_line(strict_train) == "label_overlap: 1 of 6 test queries (16.7%)"


def test_label_overlap_keeps_sources_apart():
    test = pd.concat([qrels_frame("q1 0 D1 1\n", "robust"), qrels_frame("q1 0 X9 1\n", "core")])
    lab = overlap.label_overlap(qrels_frame("t 0 D1 1\n", "tr"), test)
    assert lab.set_index("source").label_overlap.to_dict() == {"robust": True, "core": False}


# -- query overlap --------------------------------------------------------------------------------------------
def test_train_best_match_is_exact_when_top_k_saturates():
    rng = np.random.default_rng(3)
    test = rng.standard_normal((5, 16)).astype(np.float32)
    near = test[0] + 0.05 * rng.standard_normal((30, 16)).astype(np.float32)  # 30 near-duplicates of test 0
    train = np.concatenate([near, rng.standard_normal((170, 16)).astype(np.float32)])
    test /= np.linalg.norm(test, axis=1, keepdims=True)
    train /= np.linalg.norm(train, axis=1, keepdims=True)
    sims, ids = overlap.nearest(train, test, k=5)
    assert sims[0, -1] > 0.9  # top-5 of test 0 is saturated
    best, row = overlap.train_best_match(train, test, sims, ids, 0.9, chunk_size=64)
    full = train @ test.T
    want = full.max(axis=1)
    above = want > 0.9
    assert above.sum() == 30
    np.testing.assert_array_equal(best > 0.9, above)
    np.testing.assert_allclose(best[above], want[above], rtol=1e-5)
    np.testing.assert_array_equal(row[above], full.argmax(axis=1)[above])
    assert (row[~above] == -1).all()


def test_audit_report_with_injected_embeddings(files, tmp_path):
    train, test = sides(files)
    emb = FakeEmbedder(VECTORS)
    out = tmp_path / "audit"
    figures = A.audit(train, test, emb, out, A.AuditOptions(k=3, threshold=0.9))
    assert figures["test_queries"] == 6 and figures["train_queries"] == 6
    assert figures["query_overlap"] == 3  # q1 (1.0), q2 (0.95), q6 (0.93)
    assert figures["exact_duplicates"] == 2  # q1, q3
    assert figures["semantic_not_exact"] == 2  # q2, q6
    assert figures["semantic_not_lexical"] == 1  # q6: no word in common
    assert figures["ngram13_any"] == 1 and figures["ngram3_any"] == 3
    assert figures["label_overlap"] == 3 and figures["label_overlap_reference_rule"] == 1
    per = pd.read_csv(out / "per_query.csv", dtype={"qid": str, "train_qid": str}, keep_default_na=False)
    by = per.set_index("qid")
    assert by.best_similarity.astype(float).round(4).to_dict() == {
        "q1": 1.0, "q2": 0.95, "q3": 0.85, "q4": 0.0, "q5": 0.5, "q6": 0.93}
    assert by.train_qid.to_dict() == {"q1": "a", "q2": "b", "q3": "c", "q4": "a", "q5": "e", "q6": "f"}
    assert by.leaked.astype(str).tolist() == ["True", "True", "False", "False", "False", "True"]
    assert by.loc["q3", "exact_train_qid"] == "c"
    assert (out / "similarity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("report.md", "summary.md", "summary.csv", "summary.tex", "examples.csv", "audit.json",
                 "neighbours.parquet"):
        assert (out / name).exists(), name
    report = (out / "report.md").read_text()
    assert "len(overlap) > 1" in report and "similarity.png" in report
    summary = pd.read_csv(out / "summary.csv")
    row = summary[summary.overlap.str.startswith("label overlap: >= 1")].iloc[0]
    assert (row["test queries"], row["of"], row["%"]) == (3, 6, 50.0)
    nb = pd.read_parquet(out / "neighbours.parquet")
    assert len(nb) == 6 * 3 and nb[nb.test_qid == "q2"].iloc[0].train_qid == "b"
    assert A.format_summary(figures).splitlines()[0] == "query_overlap: 3 of 6 test queries (50.0%) above 0.9"
    assert "label_overlap: 3 of 6 test queries (50.0%)" in A.format_summary(figures).splitlines()


def test_audit_is_deterministic(files, tmp_path):
    train, test = sides(files)
    a = A.audit(train, test, FakeEmbedder(VECTORS), tmp_path / "a", A.AuditOptions(k=2, threshold=0.9))
    b = A.audit(train, test, FakeEmbedder(VECTORS), tmp_path / "b", A.AuditOptions(k=2, threshold=0.9))
    assert a == b
    for name in ("per_query.csv", "summary.csv", "report.md", "similarity.png"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


@pytest.mark.slow  # loading torch and the model: ~15 s on 2 cores
def test_audit_with_bundled_sbert(tmp_path):
    """The real model: a paraphrase leaks, an unrelated query does not; embeddings are cached in the store."""
    from leakexp.runner.store import Store

    train = queries.QuerySide(pd.DataFrame([("tr", "1", "title", -1, "how do I bake sourdough bread at home"),
                                      ("tr", "2", "title", -1, "population of canada")], columns=queries.TEXT_COLUMNS))
    test = queries.QuerySide(pd.DataFrame([("dev", "a", "title", -1, "how to bake sourdough bread at home"),
                                     ("dev", "b", "title", -1, "symptoms of a broken wrist")], columns=queries.TEXT_COLUMNS))
    store = Store(tmp_path / "store")
    embed = A.SbertEmbedder(store, "bundled")
    figures = A.audit(train, test, embed, tmp_path / "out", A.AuditOptions(k=2, threshold=0.8))
    per = pd.read_csv(tmp_path / "out" / "per_query.csv", dtype=str).set_index("qid")
    assert float(per.loc["a", "best_similarity"]) > 0.9 and float(per.loc["b", "best_similarity"]) < 0.5
    assert figures["query_overlap"] == 1
    computed = len(store.computed())
    assert computed == 2  # train and test embeddings
    again = embed(["how to bake sourdough bread at home", "symptoms of a broken wrist"], "test")
    assert len(store.computed()) == computed  # cached
    assert again.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(again, axis=1), 1.0, rtol=1e-5)


# -- inputs ------------------------------------------------------------------------------------------------------
def test_load_side_topics_fields_variants_and_names(tmp_path):
    (tmp_path / "t.txt").write_text("<top>\n<num> Number: 301\n<title> oil spills\n<desc> Description:\nOil spill damage.\n"
                                    "<narr> Narrative:\nx\n</top>\n<top>\n<num> Number: 302\n<title> bees\n<desc>\n</top>\n")
    (tmp_path / "v.tsv").write_text("301\toil spill\n301\tspilled oil\n")
    side = queries.load_side([f"robust={tmp_path / 't.txt'}"], fields=["title", "description", "variant"],
                       variants=[str(tmp_path / "v.tsv")])
    assert side.sources == ["robust"]
    assert side.texts[["qid", "field", "variant_index", "text"]].values.tolist() == [
        ["301", "title", -1, "oil spills"], ["301", "description", -1, "Oil spill damage."],
        ["301", "variant", 0, "oil spill"], ["301", "variant", 1, "spilled oil"], ["302", "title", -1, "bees"]]
    assert side.queries.qid.tolist() == ["301", "302"]
    assert side.owner.tolist() == [0, 0, 0, 0, 1]
    assert queries.load_side([str(tmp_path / "t.txt")], fields=["description"]).texts.qid.tolist() == ["301"]


def test_load_side_pairs_qrels_and_rejects_bad_input(tmp_path, files):
    (tmp_path / "b.tsv").write_text("q1\tsame id, other source\n")
    (tmp_path / "b.qrels").write_text("q1 0 Z1 1\n")
    side = queries.load_side([str(files / "dev.tsv"), str(tmp_path / "b.tsv")],
                       [str(files / "dev.qrels"), str(tmp_path / "b.qrels")])
    assert side.sources == ["dev", "b"]
    assert side.qrels[side.qrels.source == "b"].docno.tolist() == ["Z1"]
    assert len(side.queries) == 7  # q1 twice, once per source
    with pytest.raises(ValueError, match="one qrels file per local query file"):
        queries.load_side([str(files / "dev.tsv"), str(tmp_path / "b.tsv")], [str(files / "dev.qrels")] * 3)
    (tmp_path / "dup.tsv").write_text("x\tone\nx\ttwo\n")
    with pytest.raises(ValueError, match="'x' appears twice"):
        queries.load_side([str(tmp_path / "dup.tsv")])
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        queries.load_side([str(tmp_path / "missing.tsv")])
    with pytest.raises(ValueError, match="fields"):
        queries.load_side([str(files / "dev.tsv")], fields=["body"])


def test_load_side_from_ir_datasets(files, tmp_path):
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TsvQueries
    from ir_datasets.util import LocalDownload

    from leakexp.stages.sources import DataUnavailable

    name = "leakexp-audit-test/dev"
    if name not in ir_datasets.registry:
        ir_datasets.registry.register(name, Dataset(
            TsvQueries(LocalDownload(files / "dev.tsv"), namespace="leakexp-audit-test", lang="en"),
            TrecQrels(LocalDownload(files / "dev.qrels"), {0: "no", 1: "yes", 2: "very"})))
    side = queries.load_side([name])
    assert side.sources == [name]
    assert side.queries.qid.tolist() == list(TEST)
    assert len(side.qrels) == 8 and set(side.qrels.source) == {name}
    with pytest.raises(DataUnavailable, match="no-such/dataset"):
        queries.load_side(["no-such/dataset"])


# -- leaked vs other -------------------------------------------------------------------------------------------
def test_split_eval_paired_tests_and_bonferroni():
    qids = [f"q{i}" for i in range(1, 7)]
    values = {"A": [0.5, 0.6, 0.2, 0.7, 0.3, 0.4], "B": [0.7, 0.9, 0.3, 0.7, 0.5, 0.3],
              "C": [0.4, 0.6, 0.35, 0.6, 0.1, 0.45]}
    perquery = pd.DataFrame([(q, "nDCG@10", v, s) for s, vs in values.items() for q, v in zip(qids, vs)],
                            columns=["qid", "measure", "value", "system"])
    leaked = {"q1", "q2", "q3"}
    t = split_eval.split_eval(perquery, leaked)
    t = t.set_index(["system", "group"])
    assert t.loc[("A", "leaked"), "mean"] == pytest.approx(np.mean([0.5, 0.6, 0.2]))
    assert t.loc[("B", "other"), "mean"] == pytest.approx(np.mean([0.7, 0.5, 0.3]))
    assert t.loc[("C", "all"), "queries"] == 6 and t.loc[("A", "leaked"), "queries"] == 3
    p_b = sps.ttest_rel([0.7, 0.9, 0.3], [0.5, 0.6, 0.2]).pvalue
    p_c = sps.ttest_rel([0.4, 0.6, 0.35], [0.5, 0.6, 0.2]).pvalue
    assert t.loc[("B", "leaked"), "p"] == pytest.approx(p_b)
    assert t.loc[("B", "leaked"), "p_bonferroni"] == pytest.approx(min(1.0, 2 * p_b))
    assert t.loc[("C", "leaked"), "p_bonferroni"] == pytest.approx(min(1.0, 2 * p_c))
    assert t.loc[("B", "leaked"), "delta"] == pytest.approx(0.2)
    assert math.isnan(t.loc[("A", "leaked"), "p"])  # the baseline


def test_split_eval_families_baseline_and_per_corpus_leaks():
    rows = []
    for corpus, leaks in (("robust", {"1", "2"}), ("core", {"3"})):
        for model in ("knrm", "duet"):
            for leakage, bump in (("msm", 0.1), ("none", 0.0)):
                for q, v in zip("1234", (0.2, 0.4, 0.6, 0.3)):
                    rows.append((q, "P@1", v + (bump if q in leaks else 0.0) + (0.01 * int(q) if leakage == "msm" else 0),
                                 corpus, model, leakage))
    df = pd.DataFrame(rows, columns=["qid", "measure", "value", "corpus", "model", "leakage"])
    t = split_eval.split_eval(df, {"robust": ["1", "2"], "core": ["3"]}, leaked_key="corpus", by=["corpus", "model"],
                     baseline={"leakage": "none"})
    row = t[(t.corpus == "robust") & (t.model == "knrm") & (t.leakage == "msm") & (t.group == "leaked")].iloc[0]
    assert row.queries == 2 and row.delta == pytest.approx(0.1 + 0.015)
    core = t[(t.corpus == "core") & (t.model == "duet") & (t.leakage == "msm") & (t.group == "leaked")].iloc[0]
    assert core.queries == 1
    assert t[(t.leakage == "none")].p.isna().all()
    with pytest.raises(ValueError, match="baseline"):
        split_eval.split_eval(df, {"1"}, by=["corpus", "model"], baseline={"leakage": "bm25"})


def write_run(path, ranking: dict[str, list[str]]):
    path.write_text("".join(f"{q} Q0 {d} {i + 1} {10 - i} tag\n" for q, docs in ranking.items() for i, d in enumerate(docs)))
    return path


def test_split_eval_command_rescores_runs_against_an_audit(files, tmp_path, capsys):
    train, test = sides(files)
    A.audit(train, test, FakeEmbedder(VECTORS), tmp_path / "audit", A.AuditOptions(k=2, threshold=0.9))
    # leaked (semantic): q1, q2, q6. run A finds their relevant documents first, run B only the others'
    a = write_run(tmp_path / "a.run", {"q1": ["D1", "X"], "q2": ["D3", "X"], "q3": ["X", "D4"], "q5": ["X", "D7"],
                                       "q6": ["D8", "X"]})
    b = write_run(tmp_path / "b.run", {"q1": ["X", "D1"], "q2": ["X", "D3"], "q3": ["D4", "X"], "q5": ["D7", "X"],
                                       "q6": ["X", "D8"]})
    table = split_eval.run_split_eval([f"A={a}", f"B={b}"], qrels=files / "dev.qrels", audit_dir=tmp_path / "audit",
                             measures=["P@1"])
    t = table.set_index(["run", "group"])
    assert t.loc[("A", "leaked"), "mean"] == 1.0 and t.loc[("B", "leaked"), "mean"] == 0.0
    # q4 has no relevant judgment: left out of every measure (evaluate.no_relevant=skip), so other = q3, q5
    assert t.loc[("A", "other"), "mean"] == 0.0
    assert t.loc[("B", "other"), "mean"] == 1.0
    assert t.loc[("A", "leaked"), "queries"] == 3 and t.loc[("B", "other"), "queries"] == 2
    assert (tmp_path / "audit" / "split-eval" / "split_eval.csv").exists()
    assert split_eval.read_leaked(tmp_path / "audit", rule="exact") == {"q1", "q3"}
    assert split_eval.read_leaked(tmp_path / "audit", rule="label") == {"q1", "q2", "q3"}
    assert split_eval.read_leaked(tmp_path / "audit", rule="any") == {"q1", "q2", "q3", "q6"}
    rc = main(["split-eval", str(a), str(b), "--qrels", str(files / "dev.qrels"), "--audit", str(tmp_path / "audit"),
               "--measures", "P@1", "--baseline", "b", "--out", str(tmp_path / "se")])
    capsys.readouterr()
    printed = pd.read_csv(tmp_path / "se" / "split_eval.csv").set_index(["run", "group"])
    assert rc == 0 and printed.loc[("b", "leaked"), "queries"] == 3
    (tmp_path / "bad.run").write_text("q1 Q0 D1 1\n")
    rc = main(["split-eval", str(tmp_path / "bad.run"), "--qrels", str(files / "dev.qrels"), "--audit",
               str(tmp_path / "audit")])
    assert rc == 2 and "bad.run:1: expected 6 fields 'qid Q0 docno rank score tag', got 4" in capsys.readouterr().err


def test_split_eval_baseline_is_the_run_named_none_else_the_first_given(files, tmp_path, capsys):
    """Runs given as None, MSM, Test: the baseline is None (not MSM, the alphabetically first), every other run is
    tested against it, and the output says which run is the baseline; without a None run, the first given."""
    train, test = sides(files)
    A.audit(train, test, FakeEmbedder(VECTORS), tmp_path / "audit", A.AuditOptions(k=2, threshold=0.9))
    # leaked (semantic): q1, q2, q6; first rank 1 for None on none of them, for MSM on q1, for Test on q1 and q2
    rel = {"q1": "D1", "q2": "D3", "q3": "D4", "q5": "D7", "q6": "D8"}
    hits = {"None": {"q5"}, "MSM": {"q1", "q3"}, "Test": {"q1", "q2", "q3", "q5"}}
    runs = {name: write_run(tmp_path / f"{name}.run", {q: [d, "X"] if q in hit else ["X", d] for q, d in rel.items()})
            for name, hit in hits.items()}
    specs = [f"{name}={path}" for name, path in runs.items()]
    table = split_eval.run_split_eval(specs, qrels=files / "dev.qrels", audit_dir=tmp_path / "audit",
                                      measures=["P@1"])
    t = table.set_index(["run", "group"])
    assert math.isnan(t.loc[("None", "leaked"), "p"]) and math.isnan(t.loc[("None", "leaked"), "delta"])
    assert t.loc[("Test", "leaked"), "delta"] == pytest.approx(2 / 3)  # Test vs None on the leaked topics
    assert t.loc[("Test", "leaked"), "p"] == pytest.approx(sps.ttest_rel([1, 1, 0], [0, 0, 0]).pvalue)
    assert t.loc[("MSM", "leaked"), "delta"] == pytest.approx(1 / 3)
    rc = main(["split-eval", *reversed(specs), "--qrels", str(files / "dev.qrels"), "--audit",
               str(tmp_path / "audit"), "--measures", "P@1", "--out", str(tmp_path / "se")])
    out = capsys.readouterr().out
    assert rc == 0 and "baseline: None (the run named None)" in out
    assert "against None" in (tmp_path / "se" / "split_eval.md").read_text()
    # no run named None: the first given, whatever its name's place in the alphabet
    table = split_eval.run_split_eval(specs[2:0:-1], qrels=files / "dev.qrels", audit_dir=tmp_path / "audit",
                                      measures=["P@1"])
    t = table.set_index(["run", "group"])
    assert math.isnan(t.loc[("Test", "leaked"), "delta"]) and t.loc[("MSM", "leaked"), "delta"] == pytest.approx(-1 / 3)
    rc = main(["split-eval", *specs[2:0:-1], "--qrels", str(files / "dev.qrels"), "--audit",
               str(tmp_path / "audit"), "--measures", "P@1", "--out", str(tmp_path / "se2")])
    assert rc == 0 and "baseline: Test (the first run given)" in capsys.readouterr().out
    rc = main(["split-eval", *specs, "--qrels", str(files / "dev.qrels"), "--audit", str(tmp_path / "audit"),
               "--measures", "P@1", "--baseline", "MSM", "--out", str(tmp_path / "se3")])
    assert rc == 0 and "baseline: MSM (--baseline)" in capsys.readouterr().out


# -- the command line --------------------------------------------------------------------------------------------
def test_cli_qrels_only_audit(files, tmp_path, capsys):
    rc = main(["audit", f"store={tmp_path / 'store'}", "--train-qrels", str(files / "train.qrels"),
               "--test-qrels", str(files / "dev.qrels"), "--test-rel", "2", "--out", str(tmp_path / "q")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "label_overlap: 2 of 6 test queries (33.3%)" in out.splitlines()
    assert (tmp_path / "q" / "per_query.csv").exists() and (tmp_path / "q" / "report.md").exists()
    assert not (tmp_path / "q" / "similarity.png").exists()


def test_cli_errors_name_the_input(files, tmp_path, capsys):
    (tmp_path / "bad.qrels").write_text("q1 0 D1\n")
    rc = main(["audit", "--train-qrels", str(tmp_path / "bad.qrels"), "--test-qrels", str(files / "dev.qrels"),
               "--out", str(tmp_path / "o")])
    assert rc == 2 and "bad.qrels:1: expected 'qid 0 docno label'" in capsys.readouterr().err
    rc = main(["audit", "--train", str(files / "train.tsv"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "both sides" in capsys.readouterr().err
    assert not (tmp_path / "o" / "report.md").exists()


def test_audit_help_names_the_stop_list_the_report_uses(capsys):
    """`leakexp audit --help` and the report name one stop list (it said scikit-learn's 318 words while the code and
    the report use NLTK's 179)."""
    from leakexp.cli.main import main
    from leakexp.toolkit.overlap import STOPLIST_NAME, stopwords

    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "NLTK's English stop list, 179 words" in text and "scikit-learn" not in text
    assert STOPLIST_NAME == "NLTK's English stop list (179 words)" and len(stopwords()) <= 179
