"""Every document reaches the models with the text its archive holds (ir_datasets' raw corpora, miniature copies)."""

from __future__ import annotations

import hashlib
import socket
import statistics
import time
from collections import Counter

import pytest
from archive_text import ARCHIVES
from irds_corpora import write_corpora

from leakexp.data.doctext import html_text
from leakexp.data.irds import IrdsDocStore, load_irds_collection, load_irds_train_pool

IDS = {"robust04": "disks45/nocr/trec-robust-2004", "core17": "nyt/trec-core-2017",
       "core18": "wapo/v2/trec-core-2018", "train": "msmarco-document/train"}


@pytest.fixture
def offline(monkeypatch):
    """No connection can be opened: ir_datasets must read the files in place, never download."""
    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_generator_is_seeded_small_and_fast(tmp_path):
    t = time.perf_counter()
    a = write_corpora(tmp_path / "a", seed=3)
    seconds = time.perf_counter() - t
    b = write_corpora(tmp_path / "b", seed=3)

    def digest(root):
        return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}

    assert a == b and digest(tmp_path / "a") == digest(tmp_path / "b")
    assert {k: len(v) for k, v in a.items()} == {"wapo": 30, "nyt": 30, "disks45": 28, "msmarco": 30}
    assert len(list((tmp_path / "a" / "disks45" / "corpus").rglob("*"))) > 2295  # the globs' 2,295 files, and more
    assert seconds < 2.0


def test_ir_datasets_reads_every_generated_dataset_offline(irds_corpora, offline):
    import ir_datasets

    robust = ir_datasets.load(IDS["robust04"])
    docnos = [d.doc_id for d in robust.docs_iter()]
    assert len(docnos) == 28 and not any(d.startswith("CR") for d in docnos)  # nocr: no Congressional Record
    robust04 = load_irds_collection("robust04", IDS["robust04"])
    assert sorted(robust04.topics) == ["301", "302", "303", "672"]
    judged = robust04.qrels.groupby("qid").label.max().to_dict()
    assert judged["672"] == 0 and len(robust04.qrels[robust04.qrels.qid == "672"]) == 6  # judged, none relevant
    core17 = load_irds_collection("core17", IDS["core17"])
    core18 = load_irds_collection("core18", IDS["core18"])
    assert (len(core17.topics), len(list(core17.docs)), len(core18.topics), len(list(core18.docs))) == (3, 30, 3, 30)
    # topics2018.txt's title on its own line between <title> and </title>
    assert all(t.title and "<" not in t.title for t in core18.topics.values())
    pool = load_irds_train_pool(IDS["train"], "msmarco-document/orcas")
    q = pool.queries.set_index(["source", "qid"]).text
    shared = sorted(set(q["msmarco"].index) & set(q["orcas"].index))
    assert len(shared) == 15 and all(q["msmarco"][i] != q["orcas"][i] for i in shared)
    assert len(list(pool.docs)) == 30


def _words(text: str) -> Counter:
    return Counter(text.split())


@pytest.mark.parametrize("corpus", list(IDS))
def test_every_document_holds_the_words_of_its_archive(irds_corpora, offline, corpus):
    archive = ARCHIVES[corpus](irds_corpora)
    docs = IrdsDocStore(IDS[corpus])
    read = dict(iter(docs))
    assert sorted(read) == sorted(archive)
    assert {d for d in read if _words(read[d]) != _words(archive[d])} == set()
    assert all(docs[d] == read[d] for d in list(read)[:5])  # look-up and iteration give the same text
    median = statistics.median(len(t.split()) for t in read.values())
    assert median == statistics.median(len(t.split()) for t in archive.values())
    assert median > 80


def test_default_text_loses_most_of_a_wapo_article(irds_corpora):
    """The regression: ir_datasets' WaPo body parses HTML paragraphs as XML (wapo.py lines 96-101)."""
    import ir_datasets

    archive = ARCHIVES["core18"](irds_corpora)
    docs = list(ir_datasets.load(IDS["core18"]).docs_iter())
    default = statistics.median(len(d.default_text().split()) for d in docs)
    truth = statistics.median(len(archive[d.doc_id].split()) for d in docs)
    assert default < 0.3 * truth
    assert sum(_words(d.default_text()) == _words(archive[d.doc_id]) for d in docs) == 0


def test_nyt_paragraphs_without_white_space_between_them_stay_apart(irds_corpora):
    """ir_datasets' ``get_text()`` of the full_text block glues ``<p>a</p><p>b</p>`` into one word."""
    import ir_datasets

    archive = ARCHIVES["core17"](irds_corpora)
    compact = [d for d in ir_datasets.load(IDS["core17"]).docs_iter()
               if _words(d.default_text()) != _words(archive[d.doc_id])]
    assert [d.doc_id for d in compact] == ["1600014"]
    assert _words(IrdsDocStore(IDS["core17"])["1600014"]) == _words(archive["1600014"])


@pytest.mark.parametrize("fragment, text", [
    ("<span>NEW ORLEANS —</span> Whenever a storm", "NEW ORLEANS — Whenever a storm"),
    ("no markup at all", "no markup at all"),
    ("<b>Wash</b>ington &amp; <a href='x'>Oregon</a>", "Washington & Oregon"),
    ("one<br>two<p>three</p>four", "one two three four"),
    ("<!-- a comment only -->", ""),
])
def test_html_text_keeps_every_word(fragment, text):
    assert " ".join(html_text(fragment).split()) == text
