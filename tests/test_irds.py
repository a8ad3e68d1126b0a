import pytest

from leakexp.data.irds import IrdsDocStore, load_irds_collection, load_irds_train_pool
from leakexp.stages.sources import DataUnavailable


@pytest.fixture(scope="module")
def local_irds(tmp_path_factory):
    """A small dataset registered with ir_datasets from local files, as a user would for their own data."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TrecQueries, TsvDocs, TsvQueries
    from ir_datasets.util import LocalDownload

    d = tmp_path_factory.mktemp("irds-local")
    (d / "docs.tsv").write_text("d1\tlyme disease is spread by ticks\nd2\tthe hubble telescope orbits\nd3\tferry sank\n")
    (d / "topics.txt").write_text(
        "<top>\n<num> Number: 441\n<title> lyme disease\n<desc> Description:\nHow to treat lyme disease?\n"
        "<narr> Narrative:\nRelevant: treatments.\n</top>\n"
    )
    (d / "qrels.txt").write_text("441 0 d1 2\n441 0 d2 0\n")
    (d / "train.tsv").write_text("1\tlyme disease symptoms\n2\thubble images\n")
    (d / "train-qrels.txt").write_text("1 0 d1 1\n2 0 d2 1\n")
    test = Dataset(TsvDocs(LocalDownload(d / "docs.tsv"), namespace="lx", lang="en"),
                   TrecQueries(LocalDownload(d / "topics.txt"), namespace="lx", lang="en"),
                   TrecQrels(LocalDownload(d / "qrels.txt"), {0: "no", 1: "yes", 2: "very"}))
    train = Dataset(TsvDocs(LocalDownload(d / "docs.tsv"), namespace="lx", lang="en"),
                    TsvQueries(LocalDownload(d / "train.tsv"), namespace="lx", lang="en"),
                    TrecQrels(LocalDownload(d / "train-qrels.txt"), {1: "click"}))
    missing = Dataset(TsvDocs(LocalDownload(d / "absent.tsv"), namespace="lx", lang="en"),
                      TsvQueries(LocalDownload(d / "train.tsv"), namespace="lx", lang="en"))
    # hazards of real files: a topic without a title, a query id given twice with different texts
    (d / "untitled.txt").write_text(
        "<top>\n<num> Number: 441\n<title> lyme disease\n<desc> Description:\nLyme?\n<narr> Narrative:\nAny.\n</top>\n"
        "<top>\n<num> Number: 442\n<title>\n<desc> Description:\nNo title.\n<narr> Narrative:\nAny.\n</top>\n"
    )
    untitled = Dataset(TsvDocs(LocalDownload(d / "docs.tsv"), namespace="lx", lang="en"),
                       TrecQueries(LocalDownload(d / "untitled.txt"), namespace="lx", lang="en"),
                       TrecQrels(LocalDownload(d / "qrels.txt"), {0: "no", 1: "yes", 2: "very"}))
    (d / "dup.tsv").write_text("1\tlyme disease symptoms\n2\thubble images\n1\tferry sinkings\n")
    dup = Dataset(TsvDocs(LocalDownload(d / "docs.tsv"), namespace="lx", lang="en"),
                  TsvQueries(LocalDownload(d / "dup.tsv"), namespace="lx", lang="en"),
                  TrecQrels(LocalDownload(d / "train-qrels.txt"), {1: "click"}))
    for name, ds in (("leakexp-test/core", test), ("leakexp-test/train", train), ("leakexp-test/missing", missing),
                     ("leakexp-test/untitled", untitled), ("leakexp-test/dup", dup)):
        if name not in ir_datasets.registry:
            ir_datasets.registry.register(name, ds)
    variants = d / "variants.tsv"
    variants.write_text("441\tlyme disease treatment\n441\ttick illness\n")
    return variants


def test_collection_from_a_registered_dataset(local_irds):
    c = load_irds_collection("core", "leakexp-test/core", variants=str(local_irds))
    t = c.topics["441"]
    assert (t.title, t.description, t.variants) == ("lyme disease", "How to treat lyme disease?",
                                                    ("lyme disease treatment", "tick illness"))
    assert c.qrels.values.tolist() == [["441", "d1", 2], ["441", "d2", 0]]
    assert c.docs["d2"].strip() == "the hubble telescope orbits"
    assert len(c.docs) == 3 and [d for d, _ in c.docs] == ["d1", "d2", "d3"]


def test_train_pool_from_registered_datasets(local_irds):
    pool = load_irds_train_pool("leakexp-test/train", "leakexp-test/train")
    assert pool.queries.groupby("source").size().to_dict() == {"msmarco": 2, "orcas": 2}
    # judgments are keyed by (source, qid): the same id in the two sources names two queries
    assert sorted(map(tuple, pool.qrels[["source", "qid", "docno"]].values.tolist())) == [
        ("msmarco", "1", "d1"), ("msmarco", "2", "d2"), ("orcas", "1", "d1"), ("orcas", "2", "d2")]


def test_topic_without_title_and_duplicate_query_ids_are_errors(local_irds):
    from leakexp.data.files import DataFormatError

    with pytest.raises(DataFormatError, match=r"'leakexp-test/untitled': topic 442 has an empty title"):
        load_irds_collection("x", "leakexp-test/untitled")
    with pytest.raises(DataFormatError, match=r"'leakexp-test/dup': query id '1' occurs with different texts"):
        load_irds_train_pool("leakexp-test/train", "leakexp-test/dup")


def test_unknown_and_missing_datasets_say_what_to_do(local_irds):
    with pytest.raises(DataUnavailable, match="no dataset 'nope/x'"):
        load_irds_collection("x", "nope/x")
    with pytest.raises(DataUnavailable, match="cannot read the documents of ir_datasets 'leakexp-test/missing'"):
        list(IrdsDocStore("leakexp-test/missing"))
