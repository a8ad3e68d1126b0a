"""Corpus statistics: the figures, the checks that stop a run on an implausible corpus, and ``leakexp corpus-stats``
on the toy world and on miniature raw corpora read through ir_datasets (experiment=paper)."""

from __future__ import annotations

import statistics

import pytest
from archive_text import ARCHIVES
from conftest import SMALL, paper_env

from leakexp.data.statistics import DocumentStats, check_documents, document_figures
from leakexp.data.files import DataFormatError
from leakexp.data.types import DictDocStore


def test_figures_count_documents_words_empty_documents_and_repeated_ids():
    docs = [("a", "one two three"), ("b", ""), ("c", "one two"), ("a", "another text of a"), ("d", "x y z w v")]
    stats = DocumentStats()
    assert list(stats.counted(docs)) == docs
    fig = stats.figures(iter(docs))
    assert fig == {"documents": 5, "median_words": 3.0, "empty_documents": 1, "duplicate_docnos": 1,
                   "duplicate_examples": ["a"]}
    assert document_figures(DictDocStore({"x": "a b", "y": "c d e f"}))["median_words"] == 3.0


def test_checks_name_the_corpus_the_figure_and_the_setting_that_accepts_it():
    dup = {"documents": 10, "median_words": 300.0, "empty_documents": 0, "duplicate_docnos": 2,
           "duplicate_examples": ["FT911-1", "FT911-2"]}
    with pytest.raises(DataFormatError, match=r"^robust04: 2 document id\(s\) occur more than once \(e\.g\. FT911-1, "
                                              r"FT911-2\) among 10 documents; .*corpus\.accept_duplicate_docnos=true$"):
        check_documents("robust04", dup, {"documents": "news"})
    check_documents("robust04", dup, {"documents": "news", "accept_duplicate_docnos": True})
    short = {"documents": 30, "median_words": 10.0, "empty_documents": 4, "duplicate_docnos": 0}
    with pytest.raises(DataFormatError, match=r"^core18: median document length 10 words, under 20 for news documents "
                                              r"\(4 of 30 empty\); the documents' text is probably not read"):
        check_documents("core18", short, {"documents": "news"})
    with pytest.raises(DataFormatError, match=r"data\.accept_short_documents=true$"):
        check_documents("train", short, {"documents": "web"})
    check_documents("core18", short, {"documents": "news", "accept_short_documents": True})
    check_documents("passages", short, {"documents": "passages"})  # 10 words is a plausible passage
    check_documents("empty", {**short, "documents": 0, "median_words": 0.0}, {})  # nothing to judge


def _lines(out: str) -> dict[str, float]:
    return {k: float(v) for k, v in (line.split(": ") for line in out.strip().splitlines())}


def test_corpus_stats_of_the_toy_world(small_store, capsys):
    from leakexp.cli.main import main

    assert main(["corpus-stats", f"store={small_store}", *SMALL]) == 0
    got = _lines(capsys.readouterr().out)
    names = ("documents", "median_words", "empty_documents", "duplicate_docnos", "topics", "judged_topics")
    assert all(f"{c}_{n}" in got for c in ("toy_robust", "toy_core17", "toy_core18", "train") for n in names)
    # the toy world's hazards are counted, not errors: an empty document in toy_robust and in the pool, Robust04's 672
    assert (got["toy_robust_empty_documents"], got["train_empty_documents"]) == (1, 1)
    assert got["toy_robust_topics"] == 30 and got["toy_robust_topics_with_relevant"] == 29
    assert got["train_topics"] == 1200 and got["train_duplicate_docnos"] == 0
    assert all(got[f"{c}_median_words"] > 80 for c in ("toy_robust", "toy_core17", "toy_core18", "train"))


def test_index_and_idf_manifests_record_the_corpus_figures(small_cfg):
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    r = runner(small_cfg)
    stats = r.store.marker(r.ensure(Ask.of("corpus-stats", name="toy_robust"))).figures
    assert stats["empty_documents"] == 1 and stats["duplicate_docnos"] == 0
    for stage in ("index", "df"):
        figures = r.store.marker(r.ensure(Ask.of(stage, name="toy_robust"))).figures
        assert {k: figures[f"corpus_{k}"] for k in stats} == stats


def test_corpus_stats_of_the_raw_corpora_through_ir_datasets(irds_corpora, tmp_path, monkeypatch, capsys):
    from leakexp.cli.main import main

    assert main(["corpus-stats", *paper_env(tmp_path, monkeypatch), f"store={tmp_path / 'store'}"]) == 0
    got = _lines(capsys.readouterr().out)
    assert {k: got[f"robust04_{k}"] for k in ("documents", "empty_documents", "duplicate_docnos", "topics",
                                              "judged_topics", "topics_with_relevant")} == {
        "documents": 28, "empty_documents": 1, "duplicate_docnos": 0, "topics": 4, "judged_topics": 4,
        "topics_with_relevant": 3}  # an FR94 document without any content element; topic 672 without a relevant one
    assert (got["core17_documents"], got["core18_documents"], got["train_documents"]) == (30, 30, 30)
    assert (got["train_topics"], got["train_judged_topics"]) == (45, 45)  # 30 MS MARCO + 15 ORCAS queries
    for corpus in ("robust04", "core17", "core18", "train"):  # the median of the words the archive holds
        archive = ARCHIVES[corpus](irds_corpora)
        assert got[f"{corpus}_median_words"] == statistics.median(len(t.split()) for t in archive.values())


def test_a_corpus_read_almost_empty_stops_the_run(irds_corpora, tmp_path, monkeypatch, capsys):
    """As WaPo through ir_datasets' default text: the corpus-stats stage, before any index, stops with one line."""
    from leakexp.cli.main import main
    from leakexp.runner.registry import compose
    from leakexp.data import irds
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    monkeypatch.setattr(irds, "document_text", lambda doc: getattr(doc, "title", ""))  # a reader that keeps titles
    overrides = [*paper_env(tmp_path, monkeypatch), f"store={tmp_path / 'store'}", "corpus=core18",
                 "grid.corpora=[core18]", "bm25.backend=pisa", "bm25.collection=json",  # no Java needed
                 "detect.sbert=bundled", "grid.models=[knrm]"]  # the documents check, not the paper's models' cache
    with pytest.raises(DataFormatError, match=r"^core18: median document length \d+(\.5)? words, under 20 for news "
                                              r"documents .*corpus\.accept_short_documents=true$"):
        runner(compose(overrides)).ensure(Ask.of("index", name="core18"))
    assert main(["corpus-stats", *overrides]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("leakexp: ")]
    assert [line.split(":")[1].strip() for line in err] == ["robust04", "core17", "core18", "train"]
    assert all("median document length" in line for line in err)
    r = runner(compose([*overrides, "corpus.accept_short_documents=true"]))
    assert r.store.marker(r.ensure(Ask.of("corpus-stats", name="core18"))).figures["median_words"] < 20
