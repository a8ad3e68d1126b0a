"""The shipped TREC Core 2017 / 2018 topics and qrels, and the authors' Core runs evaluated on them
(leakexp/data/trec/README.md, leakexp/data/runs/README.md, experiments/README.md "Which MFR did the paper compute?")."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from leakexp.data.judgments import FOLDER, shipped_qrels, shipped_topics
from leakexp.lib.measures import average, per_query
from leakexp.lib.trec import read_run

RUNS = Path(__file__).resolve().parents[1] / "leakexp" / "data" / "runs"
# sha256 and md5 of the files as anserini-tools and NIST publish them (md5: ir_datasets' expected_md5)
SOURCE = {
    "topics.core17.txt": ("060aef987f75a29f892fb2cf9ebd78e4c138098c482688ca9bec321b75bd17ae",
                          "821f8eaaf11ae3ce9657d1442749480a", ("nyt", "trec-core-2017/queries")),
    "topics.core18.txt": ("2d88af482f5ff6616ed863be59b1f1664115c04cd4cd67a57ef0e5ce434ef8f9",
                          "1b11276f0e1badd68347884664816654", ("wapo", "trec-core-2018/queries")),
    "qrels.core17.txt": ("982a2f9e9df075deddfd36ca47c46902f098d4f5c6fb8ce438124a0b7cf83b7d",
                         "8cf8dcafba6557e5ee62a28a44b0314d", ("nyt", "trec-core-2017/qrels")),
    "qrels.core18.txt": ("ebe3b6c278adbb81d6b911e9869705828f90b6deb15c9399ae9437b5be67575e",
                         "7a982cd110f8bb30da4141f0f639f2e1", ("wapo", "trec-core-2018/qrels")),
}
# leakexp's evaluation of the authors' top-100 runs (leakexp/data/runs/README.md); MAP = AP over the top-100
MEASURED = {"core17": {"nDCG@10": 0.409503, "P@1": 0.60, "AP": 0.140987, "P@30": 0.429333},
            "core18": {"nDCG@10": 0.399657, "P@1": 0.58, "AP": 0.167038, "P@30": 0.336667}}
# Anserini's BM25 regression P30 (docs/regressions-core17.md, -core18.md at anserini-0.13.3, line 93)
ANSERINI_P30 = {"core17": 0.4293, "core18": 0.3567}


@pytest.mark.parametrize("name", sorted(SOURCE))
def test_shipped_files_are_nists_files_as_ir_datasets_downloads_them(name):
    import ir_datasets

    sha, md5, (dataset, key) = SOURCE[name]
    raw = gzip.decompress((FOLDER / f"{name}.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == sha
    assert hashlib.md5(raw).hexdigest() == md5
    downloads = json.loads((Path(ir_datasets.__file__).parent / "etc" / "downloads.json").read_text())
    assert downloads[dataset][key]["expected_md5"] == md5


@pytest.fixture(scope="module", params=["core17", "core18"])
def corpus(request):
    c = request.param
    topics = shipped_topics(c)
    run = read_run(RUNS / f"{c}.bm25-anserini.top100.run.gz", [t.qid for t in topics])
    return c, topics, shipped_qrels(c), run


def test_topics_and_qrels_cover_the_authors_runs(corpus):
    c, topics, qrels, run = corpus
    assert len(topics) == 50 and all(t.title for t in topics)
    assert len(qrels) == {"core17": 30030, "core18": 26233}[c]
    assert set(qrels.qid) == {t.qid for t in topics} == set(run.qid)
    assert set(qrels.qid[qrels.label >= 1]) == set(qrels.qid)  # every topic has a relevant judgment
    assert run.groupby("qid").size().eq(100).all()


def test_the_authors_runs_scored_by_leakexps_evaluation(corpus):
    c, topics, qrels, run = corpus
    means = per_query(run, qrels, ["nDCG@10", "P@1", "MAP", "P@30"]).groupby("measure").value.mean()
    assert means.to_dict() == pytest.approx(MEASURED[c], abs=5e-7)
    # P@30 only reads the top-30: Core 2017's equals Anserini's BM25 regression, Core 2018's does not
    assert (round(means["P@30"], 4) == ANSERINI_P30[c]) == (c == "core17")


def test_topics_without_a_relevant_document_in_the_authors_top_100(corpus):
    """m of experiments/README.md: Core 2017 none, Core 2018 one (topic 350); the BM25 run's MFR."""
    c, topics, qrels, run = corpus
    rel = set(zip(qrels.qid[qrels.label >= 1], qrels.docno[qrels.label >= 1]))
    hit = run.assign(rel=[(q, d) in rel for q, d in zip(run.qid, run.docno)]).groupby("qid").rel.any()
    assert sorted(hit.index[~hit]) == {"core17": [], "core18": ["350"]}[c]
    relevant = qrels[qrels.label >= 1]  # all MFR reads (every topic has one)
    ranks = {miss: per_query(run, relevant, ["MFR"], mfr_missing=miss).value for miss in ("skip", "depth", "infinite")}
    arithmetic = {miss: average(ranks[miss], "MFR", "arithmetic") for miss in ("skip", "depth")}
    # Fuhr's arithmetic MFR; a topic without a relevant document in the top-100 adds 101 / 50 when misses count
    assert arithmetic == pytest.approx({"core17": {"skip": 4.66, "depth": 4.66},
                                        "core18": {"skip": 215 / 49, "depth": (215 + 101) / 50}}[c])
    # the paper's: 1 / MRR, a miss at reciprocal rank 0 (experiment=paper), left out, or at rank 101
    reciprocal = {miss: average(ranks[miss], "MFR", "reciprocal_of_mrr") for miss in ranks}
    assert reciprocal == pytest.approx({"core17": {"skip": 1.42488, "depth": 1.42488, "infinite": 1.42488},
                                        "core18": {"skip": 1.40366, "depth": 1.43190, "infinite": 1.43231}}[c], abs=5e-6)


def test_the_plans_topic_counts_are_the_shipped_topics(corpus, tmp_path):
    """``plan`` (which reads no data) assumes 50 topics per Core corpus: the shipped files say so."""
    from leakexp.runner.registry import compose

    c, topics, _, _ = corpus
    assert int(compose([f"store={tmp_path}"]).plan.topics[c]) == len(topics) == 50
