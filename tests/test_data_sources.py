"""A data source is an object per kind (leakexp.data.sources): the stages load, identify and check their data
through it instead of branching on the kind."""

from __future__ import annotations

import pytest

from leakexp.data.sources import DATA_SOURCES, IrdsSource, LocalSource, ToySource, source_of


def _local_corpus(tmp_path):
    (tmp_path / "topics.txt").write_text("<top>\n<num> Number: 301\n<title> lyme disease\n<desc> Description:\nd\n"
                                         "<narr> Narrative:\nn\n</top>\n")
    (tmp_path / "qrels.txt").write_text("301 0 d1 1\n301 0 d2 0\n")
    (tmp_path / "docs.tsv").write_text("d1\ttick bites spread lyme disease\nd2\tferries\n")
    return {"name": "mine", "kind": "local", "topics": str(tmp_path / "topics.txt"),
            "qrels": str(tmp_path / "qrels.txt"), "docs": str(tmp_path / "docs.tsv")}


def test_every_kind_has_its_source_and_an_unknown_kind_names_the_setting():
    assert {k: type(s) for k, s in DATA_SOURCES.items()} == {"toy": ToySource, "irds": IrdsSource,
                                                               "local": LocalSource}
    with pytest.raises(ValueError, match="corpus.kind='hub' is unknown; use toy, irds or local"):
        source_of("hub", "corpus.kind")


def test_a_local_corpus_loads_lists_its_files_and_its_identity_follows_their_content(tmp_path):
    corpus = _local_corpus(tmp_path)
    source = source_of("local")
    c = source.collection(corpus, {"kind": "local", "name": "d"})
    assert list(c.topics) == ["301"] and c.topics["301"].title == "lyme disease"
    assert c.qrels.label.tolist() == [1, 0] and c.docs["d1"] == "tick bites spread lyme disease"
    assert source.corpus_files(corpus) == [tmp_path / "topics.txt", tmp_path / "qrels.txt", tmp_path / "docs.tsv"]
    assert source.corpus_missing(corpus) is None and source.corpus_datasets(corpus) == []
    before = source.corpus_identity(corpus)
    (tmp_path / "qrels.txt").write_text("301 0 d1 2\n301 0 d2 0\n")
    assert source.corpus_identity(corpus) != before  # another judgment, another key for what reads it


def test_the_toy_world_needs_no_file_identity_and_refuses_another_datas_corpus(tmp_path):
    toy = source_of("toy")
    assert toy.corpus_identity({"kind": "toy"}) is None and toy.pool_files({"kind": "toy"}) == []
    with pytest.raises(ValueError, match="is a toy-world corpus but data=real; use data=toy"):
        toy.collection({"name": "toy_robust", "kind": "toy", "collection": "robust"}, {"kind": "irds", "name": "real"},
                       tmp_path)


def test_an_ir_datasets_corpus_names_the_datasets_it_is_read_through():
    irds = source_of("irds")
    corpus = {"name": "core17", "kind": "irds", "irds_id": "nyt/trec-core-2017"}
    assert irds.corpus_datasets(corpus) == [("nyt/trec-core-2017", ("docs", "queries", "qrels"))]
    assert [str(f).split("/nyt/")[1] for f in irds.corpus_files(corpus)] == \
        ["nyt.tgz", "trec-core-2017/queries.txt", "trec-core-2017/qrels"]  # the archive, the topics, the judgments
    data = {"kind": "irds", "msmarco": "msmarco-document/train", "orcas": "msmarco-document/orcas"}
    assert irds.pool_datasets(data) == [("msmarco-document/train", ("docs", "queries", "qrels")),
                                        ("msmarco-document/orcas", ("queries", "qrels"))]
