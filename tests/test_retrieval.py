import pandas as pd

from leakexp.lib.analysis import clean_query
from leakexp.lib.bm25 import bm25_search, write_index
from leakexp.runner.stage import Ask
from leakexp.runner.store import Store

DOCS = [("d1", "lyme disease ticks lyme"), ("d2", "hubble telescope images"), ("d3", "lyme regis beach"),
        ("d4", "ticks on deer")]


# -- the first stage through the runner: local test collections, the index and firststage stages ------------
def _corpus(tmp_path, name: str, docs, topics: dict[str, str]) -> dict:
    """A local test collection (TREC topics whose titles are ``topics``, one judgment, ``docs``) as its config."""
    from leakexp.data.files import write_docs_jsonl, write_qrels, write_trec_topics
    from leakexp.data.types import Topic

    d = tmp_path / "data" / name
    d.mkdir(parents=True, exist_ok=True)
    write_trec_topics(d / "topics.txt", [Topic(qid, title) for qid, title in topics.items()])
    write_qrels(d / "qrels.txt", pd.DataFrame({"qid": [next(iter(topics))], "docno": [docs[0][0]], "label": [1]}))
    write_docs_jsonl(d / "docs.jsonl", docs)
    return {"kind": "local", "name": name, "topics": str(d / "topics.txt"), "qrels": str(d / "qrels.txt"),
            "docs": str(d / "docs.jsonl"), "accept_short_documents": True,  # documents of a few words, on purpose
            "fixed_leak_queries": 0, "test_leak_queries": 0}


def _runner(tmp_path, corpora: dict, *, depth: int = 100, stemmer: str = "porter2", stopwords: str = "terrier"):
    """A runner of every stage over ``corpora`` (name -> config) with the given first-stage settings."""
    from leakexp.runner.config import RunSettings
    from leakexp.runner.pipeline import Runner
    from leakexp.runner.registry import schema_of
    from leakexp.runner.schema import Settings
    from leakexp.runner.stage import stages

    settings = {"data": {"kind": "local", "name": "tiny", "corpora": list(corpora)}, "corpora": corpora,
                "bm25": {"k1": 0.9, "b": 0.4, "stemmer": stemmer, "stopwords": stopwords, "depth": 100, "threads": 1,
                         "backend": "pisa", "collection": "json"},
                "rerank": {"query_field": "title", "depth": depth, "first_stage": None}}
    return Runner(Settings(settings, schema_of, RunSettings), stages(), Store(tmp_path / "store"))


def test_bm25_ranks_and_caches(tmp_path):
    corpora = {"tiny": _corpus(tmp_path, "tiny", DOCS, {"1": "lyme disease?", "2": "telescope"})}
    r = _runner(tmp_path, corpora, depth=2)
    ask = Ask.of("firststage", corpus="tiny")
    run = r.get(ask)
    assert run.columns.tolist() == ["qid", "query", "docno", "score", "rank"]
    assert run[run.qid == "1"].docno.tolist() == ["d1", "d3"]  # both match 'lyme'; d1 also 'disease'
    assert run[run.qid == "1"]["rank"].tolist() == [0, 1]
    assert run[run.qid == "2"].docno.tolist() == ["d2"]
    assert run.loc[0, "query"] == "lyme disease?"  # the original text is kept
    store = r.store
    computed = store.computed()
    assert [c.rsplit("/", 1)[0] for c in computed] == ["corpus-stats/tiny", "index/tiny", "firststage/tiny"]
    _runner(tmp_path, corpora, depth=2).ensure(ask)  # a fresh runner of the same settings finds both
    assert store.computed() == computed  # cached
    other = _runner(tmp_path, corpora, depth=1)  # another depth is another artifact, beside the first
    assert len(other.get(ask)) == 2
    assert len(store.computed()) == 4 and len(store.others(store.path(store.computed()[-1]))) == 1
    assert other.path(Ask.of("index", name="tiny")) == r.path(Ask.of("index", name="tiny"))  # one index


def test_clean_query_drops_punctuation():
    assert clean_query("what's (lyme) disease?") == "what s lyme disease"


# -- analysis -------------------------------------------------------------------------------------------
TITLES = {"t1": "three gorges dam", "t2": "most dangerous", "t3": "U.S. investment"}
TITLE_DOCS = [("a1", "the three gorges dam on the yangtze"), ("a2", "the most dangerous roads"),
              ("a3", "U.S. investment abroad"), ("a4", "hubble telescope images"), ("a5", "weather report")]


def test_anserini_analysis_keeps_title_terms_that_terriers_list_drops():
    from pyterrier_pisa import tokenize
    from pyterrier_pisa.stopwords import _STOPWORDS

    from leakexp.lib.analysis import LUCENE_STOPWORDS, analyze

    assert len(LUCENE_STOPWORDS) == 33 and LUCENE_STOPWORDS == set(_STOPWORDS["lucene"])
    # Anserini's chain (StandardTokenizer, possessive, lower case, Lucene's stop list, original Porter)
    assert analyze("three gorges dam") == ["three", "gorg", "dam"]
    assert analyze("most dangerous") == ["most", "danger"]
    assert analyze("U.S. investment") == ["u.", "invest"]  # Lucene: "U.S" -> "u.s" -> Porter "u."
    assert analyze("The children's toys are on it") == ["children", "toi"]
    assert analyze("as us is") == ["us"]  # Lucene's Porter leaves two-letter words alone
    # PISA's own analysis with Terrier's 733 words (pyterrier-pisa's default) loses them
    terrier = set(_STOPWORDS["terrier"])
    kept = {q: [t for t in tokenize(text, "porter2") if t not in terrier] for q, text in TITLES.items()}
    assert kept == {"t1": ["gorg", "dam"], "t2": ["danger"], "t3": ["invest"]}


def test_first_stage_retrieves_title_terms_under_anserinis_analysis_only(tmp_path):
    corpora = {"words": _corpus(tmp_path, "words", TITLE_DOCS, {"t1": "three", "t2": "most", "t3": "U.S."}),
               "titles": _corpus(tmp_path, "titles", TITLE_DOCS, TITLES)}
    words = Ask.of("firststage", corpus="words")
    anserini = _runner(tmp_path, corpora, depth=3, stemmer="porter", stopwords="lucene")
    run = anserini.get(words)
    assert run.groupby("qid").docno.apply(list).to_dict() == {"t1": ["a1"], "t2": ["a2"], "t3": ["a3"]}
    terrier = _runner(tmp_path, corpora, depth=3, stemmer="porter2", stopwords="terrier")
    assert len(terrier.get(words)) == 0
    # whole titles: the same top document, found through every title term
    top = _runner(tmp_path, corpora, depth=1, stemmer="porter", stopwords="lucene").get(
        Ask.of("firststage", corpus="titles"))
    assert top.docno.tolist() == ["a1", "a2", "a3"] and top["rank"].tolist() == [0, 0, 0]


def test_the_analysis_is_part_of_the_index_config(tmp_path):
    import pytest

    from leakexp.runner.config import ConfigError
    from leakexp.runner.registry import compose
    from leakexp.lib.bm25 import index_analysis

    corpora = {"tiny": _corpus(tmp_path, "tiny", DOCS, {"1": "lyme"})}
    index = Ask.of("index", name="tiny")
    first_runner = _runner(tmp_path, corpora)
    porter2 = first_runner.ensure(index)
    store = first_runner.store
    first = store.marker(porter2).config_hash
    assert index_analysis(porter2) == {"stemmer": "porter2", "stopwords": "terrier"}
    porter = _runner(tmp_path, corpora, stemmer="porter", stopwords="lucene").ensure(index)
    assert store.marker(porter).config_hash != first and porter != porter2  # re-indexed, beside the first
    assert index_analysis(porter) == {"stemmer": "porter", "stopwords": "lucene"}
    q = pd.DataFrame({"qid": ["1"], "query": ["Lyme's disease"]})
    assert bm25_search(porter, q, depth=2).docno.tolist() == ["d1", "d3"]
    with pytest.raises(ValueError, match=r"index built with stemmer=porter stopwords=lucene, but bm25.stemmer=porter2"):
        bm25_search(porter, q, stemmer="porter2")
    with pytest.raises(ValueError, match=r"bm25.stemmer='lovins' is unknown"):
        write_index(tmp_path / "bad", iter(DOCS), stemmer="lovins")
    with pytest.raises(ValueError, match=r"bm25.stopwords='smart' is unknown"):
        write_index(tmp_path / "bad", iter(DOCS), stopwords="smart")
    # and before any work: the index stage's own config check
    with pytest.raises(ConfigError, match=r"bm25.stemmer: input should be 'porter2', 'porter', 'krovetz' or 'none' \(got 'lovins'\)"):
        compose([f"store={tmp_path / 'store'}", "bm25.stemmer=lovins"])


# -- external first-stage runs ---------------------------------------------------------------------------
def _run_file(tmp_path, text, name="bm25.run"):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_read_run_ranks_by_score_with_docno_ties_and_cuts_to_depth(tmp_path):
    from leakexp.lib.trec import read_run

    f = _run_file(tmp_path, "302 Q0 z 1 9.0 Anserini\n302 Q0 b 2 7.5 Anserini\n302 Q0 a 3 7.5 Anserini\n"
                            "302 Q0 c 4 1.0 Anserini\n\n301 Q0 d 1 2.0 Anserini\n")
    topics = pd.DataFrame({"qid": ["301", "302", "303"], "query": ["lyme", "hubble", "weather"]})
    run = read_run(f, topics, depth=3)
    assert run.columns.tolist() == ["qid", "query", "docno", "score", "rank"]
    assert list(zip(run.qid, run.docno, run["rank"])) == [("301", "d", 0), ("302", "z", 0), ("302", "a", 1),
                                                          ("302", "b", 2)]  # tie 7.5: a before b; c cut
    assert run.loc[1, "query"] == "hubble" and run.score.tolist() == [2.0, 9.0, 7.5, 7.5]
    plain = read_run(f)
    assert plain.columns.tolist() == ["qid", "docno", "score", "rank"] and len(plain) == 5


def test_read_run_errors_name_the_file_and_line(tmp_path):
    import gzip

    import pytest

    from leakexp.data.files import DataFormatError
    from leakexp.lib.trec import read_run

    bad = _run_file(tmp_path, "301 Q0 a 1 2.0 x\n301 Q0 b 2.0 x\n", "short.run")
    with pytest.raises(DataFormatError, match=r"short.run:2: expected 6 fields 'qid Q0 docno rank score tag', got 5"):
        read_run(bad)
    nan = _run_file(tmp_path, "301 Q0 a 1 high x\n", "score.run")
    with pytest.raises(DataFormatError, match=r"score.run:1: score 'high' is not a finite number"):
        read_run(nan)
    twice = _run_file(tmp_path, "301 Q0 a 1 2.0 x\n301 Q0 a 2 1.0 x\n", "twice.run")
    with pytest.raises(DataFormatError, match=r"twice.run:2: document a appears twice for topic 301 \(first at line 1; 1 duplicate"):
        read_run(twice)
    other = _run_file(tmp_path, "301 Q0 a 1 2.0 x\n9001 Q0 a 1 2.0 x\n", "other.run")
    with pytest.raises(DataFormatError, match=r"other.run: 1 topic id\(s\) of the run are not topics of this corpus "
                                              r"\(9001\)"):
        read_run(other, ["301", "302"])
    with pytest.raises(DataFormatError, match=r"empty.run: the run is empty"):
        read_run(_run_file(tmp_path, "\n", "empty.run"))
    with pytest.raises(FileNotFoundError, match="missing.run: no such run file"):
        read_run(tmp_path / "missing.run")
    gz = tmp_path / "run.gz"
    gz.write_bytes(gzip.compress(b"301 Q0 a 1 2.0 x\n"))
    assert read_run(gz, ["301"]).docno.tolist() == ["a"]


def test_experiment_paper_uses_anserinis_analysis_and_the_demo_keeps_pisas():
    from leakexp.runner.registry import compose

    paper, demo = compose(["experiment=paper"]), compose([])
    assert (paper.bm25.stemmer, paper.bm25.stopwords) == ("porter", "lucene")
    assert (demo.bm25.stemmer, demo.bm25.stopwords) == ("porter2", "terrier")


def test_the_authors_core_runs_are_shipped_50_topics_by_100():
    import gzip
    import hashlib

    from leakexp.lib.trec import read_run
    from leakexp.stages.firststage import BUNDLED_RUNS

    core18_new = {str(q) for q in range(801, 826)}  # Core 2018's 25 new topics; the other 25 are older ones
    for corpus, first, tag_topics in (("core17", "307", {"307", "690"}), ("core18", "321", core18_new)):
        path = BUNDLED_RUNS / f"{corpus}.bm25-anserini.top100.run.gz"
        lines = gzip.decompress(path.read_bytes()).decode().splitlines()
        assert len(lines) == 50 * 100 and lines[0].split()[0] == first
        rows = [line.split() for line in lines]
        assert {len(r) for r in rows} == {6} and {r[5] for r in rows} == {"Anserini"}
        per_topic: dict[str, list[int]] = {}
        for r in rows:
            per_topic.setdefault(r[0], []).append(int(r[3]))
        assert len(per_topic) == 50 and all(ranks == list(range(1, 101)) for ranks in per_topic.values())
        assert tag_topics <= set(per_topic)
        run = read_run(path, sorted(per_topic), depth=100)
        assert len(run) == 5000 and run.groupby("qid").size().eq(100).all()
    digest = {c: hashlib.sha256(gzip.decompress((BUNDLED_RUNS / f"{c}.bm25-anserini.top100.run.gz").read_bytes()))
              .hexdigest()[:12] for c in ("core17", "core18")}
    assert digest == {"core17": "3949a1ff0867", "core18": "82dd8ce8394d"}  # the source's top-100 lines


def test_experiment_paper_re_ranks_the_authors_core_runs_and_anserini_for_robust04():
    from leakexp.runner.registry import compose
    from leakexp.stages.firststage import BUNDLED_RUNS, first_stage_file
    from leakexp.stages.rerank import Rerank

    paper = compose(["experiment=paper"])
    spec = paper.rerank.first_stage
    assert first_stage_file(spec, "core17") == BUNDLED_RUNS / "core17.bm25-anserini.top100.run.gz"
    assert first_stage_file(spec, "core18") == BUNDLED_RUNS / "core18.bm25-anserini.top100.run.gz"
    assert first_stage_file(spec, "robust04") is None and paper.bm25.backend == "anserini"
    files = Rerank.Settings(query_field="title", depth=100, first_stage=dict(spec)).files_for(
        ["robust04", "core17", "core18"])
    assert [f.name for _, f in files] == ["core17.bm25-anserini.top100.run.gz", "core18.bm25-anserini.top100.run.gz"]
    assert all(f.is_file() for _, f in files)
    assert compose([]).rerank.first_stage is None  # the demo re-ranks leakexp's BM25


def test_a_per_corpus_mapping_of_first_stages(tmp_path):
    corpora = {"tiny": _corpus(tmp_path, "tiny", DOCS, {"1": "lyme disease?", "2": "telescope"}),
               "other": _corpus(tmp_path, "other", DOCS, {"7": "deer"})}
    run = _run_file(tmp_path, "1 Q0 d4 1 3.0 x\n1 Q0 d2 2 1.0 x\n2 Q0 d3 1 2.0 x\n")
    r = _runner(tmp_path, corpora)
    r.values["rerank"]["first_stage"] = {"tiny": str(run), "other": None}
    tiny = r.get(Ask.of("firststage", corpus="tiny"))
    assert tiny.docno.tolist() == ["d4", "d2", "d3"]  # the external run, not BM25
    other = r.get(Ask.of("firststage", corpus="other"))
    assert other.docno.tolist() == ["d4"]  # leakexp's BM25 ('deer')
    assert Ask.of("index", name="tiny") not in r.upstream(Ask.of("firststage", corpus="tiny"))


def test_compare_runs_reports_the_overlap_of_two_first_stages(tmp_path, capsys):
    import gzip

    from leakexp.cli.main import main
    from leakexp.lib.trec import read_run, run_overlap

    lines = [f"{q} Q0 D{q}-{i} {i + 1} {100 - i} a\n" for q in (1, 2) for i in range(20)]
    a = tmp_path / "a.run"
    a.write_text("".join(lines))
    # b: topic 1 the same, topic 2 its top-10 reversed and its last 10 documents replaced
    b_lines = lines[:20] + [f"2 Q0 D2-{9 - i} {i + 1} {100 - i} b\n" for i in range(10)] + \
        [f"2 Q0 X{i} {11 + i} {50 - i} b\n" for i in range(10)]
    b = tmp_path / "b.run.gz"
    with gzip.open(b, "wt") as f:
        f.write("".join(b_lines))
    t = run_overlap(read_run(a), read_run(b), depth=20).set_index("qid")
    assert t.loc["1", "shared"] == 1.0 and t.loc["1", "same_rank"] == 1.0
    assert t.loc["2", "shared"] == 0.5 and t.loc["2", "top10_shared"] == 1.0 and t.loc["2", "same_rank"] == 0.0
    out = tmp_path / "out"
    out.mkdir()
    import os
    cwd = os.getcwd()
    os.chdir(out)
    try:
        assert main(["compare-runs", "--run", str(a), "--run", str(b), "--depth", "20"]) == 0
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr().out
    assert "2 topics; top-20 documents shared: 0.750; top-10 shared: 1.000; same document at the same rank: 0.500" \
        in printed
    assert (out / "overlap.csv").exists()
    assert main(["compare-runs", "--run", str(a)]) == 2
    assert "compare-runs compares two runs" in capsys.readouterr().err


def test_a_query_id_given_twice_is_the_queries_error_not_the_index(tmp_path):
    """The pool's MS MARCO and ORCAS queries may share an id: searched under one id, their results hold a document
    twice for that id, which is not a document the index holds twice. The search refuses the queries first."""
    import pytest

    from leakexp.data.files import DataFormatError

    write_index(tmp_path / "index", iter(DOCS), threads=1)
    twice = pd.DataFrame({"qid": ["7", "8", "7"], "query": ["lyme", "telescope", "lyme ticks"]})
    with pytest.raises(DataFormatError, match=r"^BM25 queries: query id 7 is given 2 times \(1 repeated id\(s\) "
                                              r"among 3 queries\); give each query its own id"):
        bm25_search(tmp_path / "index", twice, depth=2, threads=1)
    assert len(bm25_search(tmp_path / "index", twice.drop_duplicates("qid"), depth=2, threads=1)) == 3
