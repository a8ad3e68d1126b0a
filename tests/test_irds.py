import pytest

from leakexp.data.irds import IrdsDocStore, load_irds_collection, load_irds_train_pool
from leakexp.data.sources import DataUnavailable


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
    for name, ds in (("leakexp-test/core", test), ("leakexp-test/train", train), ("leakexp-test/missing", missing)):
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
    assert sorted(map(tuple, pool.qrels.values.tolist())) == [("1", "d1"), ("2", "d2")]


def test_unknown_and_missing_datasets_say_what_to_do(local_irds):
    with pytest.raises(DataUnavailable, match="no dataset 'nope/x'"):
        load_irds_collection("x", "nope/x")
    with pytest.raises(DataUnavailable, match="cannot read the documents of ir_datasets 'leakexp-test/missing'"):
        list(IrdsDocStore("leakexp-test/missing"))
