"""Robust04's first stage as the SPIRE-22 authors ran it (bm25.collection=trec): Anserini's own TrecCollection over
the raw TREC Disks 4 & 5 files, checked on the miniature raw corpora (tests/irds_corpora.py) against leakexp's text
of the same documents (ir_datasets' title and body, leakexp/data/doctext.py) analysed by leakexp (Lucene's Porter
stemmer and stop list, leakexp/lib/analysis.py).

Anserini's tests need Java 11+ and Anserini 0.22.1's jar, as tests/test_anserini.py: skipped without Java. Reading an
index's document vectors runs tests/java/DumpDocVectors.java through Java's source launcher, which needs a JDK
(javac's module); without one that test is skipped. Each indexes 2,295 files (about 10 s): marked slow.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from irds_corpora import copy_disks45_compressed

DISKS45 = "disks45/nocr/trec-robust-2004"
COPY = "leakexp-test/disks45-compressed"
DUMP = Path(__file__).resolve().parent / "java" / "DumpDocVectors.java"
GLOBS = ["**/FBIS/FB*", "**/FR94/??/FR*", "**/FT/*/FT*", "**/LATIMES/LA*"]  # ir_datasets/datasets/disks45.py:42


def _paper(tmp_path, monkeypatch, *extra):
    from conftest import paper_env

    from leakexp.runner.registry import compose

    return compose([*paper_env(tmp_path, monkeypatch), f"store={tmp_path / 'store'}", "grid.sizes=[1000]",
                    "grid.seeds=[1]", "grid.models=[knrm]", *extra])


def _java_or_skip() -> None:
    if not shutil.which("java"):
        pytest.skip("no Java here: Anserini's tests need it (apt-get install openjdk-17-jre-headless)")


@pytest.fixture(scope="module")
def compressed(irds_corpora, tmp_path_factory):
    """The miniature Disks 4 & 5 with a .Z, a .0Z and a .gz file, registered with ir_datasets as ``COPY`` (the same
    globs, file count and SAX parser as disks45/nocr): (the folder, the compressed files)."""
    import ir_datasets
    from ir_datasets.formats import TrecDocs
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.util import LocalDownload

    from leakexp.data.irds_files import trec_files

    original = trec_files(DISKS45)
    root = tmp_path_factory.mktemp("disks45-compressed") / "corpus"
    files = copy_disks45_compressed(irds_corpora, root)
    docs = TrecDocs(LocalDownload(root), path_globs=list(original.globs), namespace="disks45", lang="en",
                    expected_file_count=original.expected, parser="sax", docstore_path=root.parent / "corpus.pklz4")
    if COPY in ir_datasets.registry:  # one registration per process: point it at this folder
        ir_datasets.registry._registered.pop(COPY)
    ir_datasets.registry.register(COPY, Dataset(docs))
    return root, files


# -- the setting and the keys (no Java) ---------------------------------------------------------------------------
@pytest.mark.slow  # experiment=paper composed twice and six keys over the miniature's files: ~10 s on 2 cores
def test_paper_indexes_robust04_through_trec_collection_over_its_raw_files(irds_corpora, tmp_path, monkeypatch):
    from leakexp.runner.stage import Ask
    from leakexp.stages.firststage import first_stage_caption
    from leakexp.runner.registry import runner

    cfg = _paper(tmp_path, monkeypatch)
    assert cfg.bm25.collection == "trec"
    r = runner(cfg, readonly=True)
    robust = r.record(Ask.of("index", name="robust04"))["external"]
    assert robust["collection"] == "TrecCollection" and robust["anserini"] == "0.22.1"
    assert robust["files"]["folder"] == "disks45/corpus" and robust["files"]["globs"] == GLOBS
    assert robust["files"]["identity"]["files"] > 2295  # the folder's listing: the read-me, DTD and CR files too
    for name in ("core18", "train"):  # WaPo's archive and the pool are not TREC SGML
        assert r.record(Ask.of("index", name=name))["external"] == {"anserini": "0.22.1"}, name
    json_cfg = _paper(tmp_path, monkeypatch, "bm25.collection=json")
    json_ = runner(json_cfg, readonly=True)
    assert "collection" not in json_.record(Ask.of("index", name="robust04"))["external"]
    assert json_.key(Ask.of("index", name="robust04")) != r.key(Ask.of("index", name="robust04"))
    # the training pool's index reads no bm25.collection: its negatives, training sets and models keep their keys
    assert json_.key(Ask.of("index", name="train")) == r.key(Ask.of("index", name="train"))
    # the tables' captions say which index ran
    assert "Anserini 0.22.1's TrecCollection index of the raw TREC files" in first_stage_caption(cfg, "robust04")
    assert "TrecCollection" not in first_stage_caption(json_cfg, "robust04")


def test_trec_collection_needs_anserini(tmp_path, monkeypatch):
    from conftest import paper_env

    from leakexp.runner.registry import compose
    from leakexp.runner.stage import ConfigError
    from leakexp.runner.registry import compose as checked

    assert compose([]).bm25.collection == "json"
    with pytest.raises(ConfigError, match=r"^bm25\.collection=trec .*TrecCollection, which bm25\.backend=pisa does "
                                          r"not have; add bm25\.collection=json \(leakexp's text\) or use "
                                          r"bm25\.backend=anserini$"):
        checked([*paper_env(tmp_path, monkeypatch), "bm25.backend=pisa"])


def test_the_key_names_the_raw_files(compressed, tmp_path, monkeypatch):
    """A TrecCollection index reads the raw files, not leakexp's documents: a changed file re-keys it."""
    from leakexp.data.irds_files import trec_files
    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    root, files = compressed
    cfg = _paper(tmp_path, monkeypatch, f"corpus.irds_id={COPY}")
    index = Ask.of("index", name="robust04")
    before = runner(cfg, readonly=True).key(index)
    found = trec_files(COPY).files()
    assert len(found) == 2295 and set(files) <= set(found)  # the compressed files under their new names
    assert {f.name for f in files} == {"FB396001.Z", "FR940101.0Z", "FT911_1.gz"}
    extra = root / "NEWS_data" / "LATIMES" / "LA123189"
    extra.write_text("<DOC>\n<DOCNO> LA123189-0001 </DOCNO>\n<TEXT>\nferry\n</TEXT>\n</DOC>\n")
    try:
        assert runner(cfg, readonly=True).key(index) != before
    finally:
        extra.unlink()
    assert runner(cfg, readonly=True).key(index) == before


# -- Anserini itself ------------------------------------------------------------------------------------------------
def _dump(jar: Path, index: Path, out: Path) -> dict[str, list[str]]:
    """docno -> the analysed tokens of its ``contents`` field in position order, from the index's document vectors."""
    if not shutil.which("javac"):
        pytest.skip("reading document vectors compiles tests/java/DumpDocVectors.java: it needs a JDK (javac)")
    subprocess.run(["java", "-cp", str(jar), str(DUMP), str(index), str(out)], check=True, capture_output=True)
    return {docno: tokens.split() for docno, tokens in
            (line.split("\t", 1) for line in out.read_text(encoding="utf-8").splitlines())}


@pytest.mark.slow  # 2,295 files through IndexCollection and the dump: ~15 s on 2 cores
def test_trec_collection_and_leakexps_text_agree_on_documents_and_tokens(compressed, tmp_path):
    """The same documents (docnos), and per document the same analysed tokens as a bag, but for FBIS's titles: the
    ``<H3>`` of FBIS's header is no content tag of TrecCollection (TrecCollection.java lines 223-228), and ir_datasets
    reads it as the title (formats/trec.py line 241). Order differs where ir_datasets puts the title first."""
    import ir_datasets

    from leakexp.data.irds import IrdsDocStore
    from leakexp.data.irds_files import trec_files
    from leakexp.lib.analysis import analyze
    from leakexp.lib.bm25 import anserini_jar, write_trec_index

    _java_or_skip()
    root, _ = compressed
    figures = write_trec_index(tmp_path / "index", root, trec_files(COPY).files(), threads=2)
    assert figures == {"documents": 28, "documents_indexed": 27, "files": 2295, "anserini_unindexable": 0,
                       "anserini_empty": 1, "anserini_skipped": 0, "anserini_errors": 0}
    assert not (tmp_path / "index" / "input").exists()  # the links are gone
    anserini = _dump(anserini_jar(), tmp_path / "index" / "lucene", tmp_path / "dump.tsv")
    ours = {docno: analyze(text, "porter", "lucene") for docno, text in IrdsDocStore(COPY)}
    records = {d.doc_id: d for d in ir_datasets.load(COPY).docs_iter()}
    # documents: the same docnos, less the one without content (FR94's, no <TEXT>): Anserini does not index it
    assert len(ours) == 28 and set(anserini) == {d for d, t in ours.items() if t}
    assert [d for d, t in ours.items() if not t] == ["FR940104-0-00003"]
    # the compressed files were read: a document of each (FBIS .Z, FR94 .0Z, FT .gz) is there
    assert {"FBIS3-100", "FR940104-0-00000", "FT911-1"} <= set(anserini)
    same_bag = same_order = 0
    for docno, tokens in anserini.items():
        title = analyze(records[docno].title, "porter", "lucene")
        if docno.startswith("FBIS"):  # the H3 title only in leakexp's text
            assert title and Counter(ours[docno]) - Counter(tokens) == Counter(title), docno
            assert not Counter(tokens) - Counter(ours[docno]), docno
            continue
        assert Counter(tokens) == Counter(ours[docno]), docno
        same_bag += 1
        same_order += tokens == ours[docno]
    assert same_bag == 20 and sum(d.startswith("FBIS") for d in anserini) == 7
    assert same_order == 6  # FR94's six (no title); FT's and LA's headlines come after the date in the file


@pytest.mark.slow  # the paper's Robust04 index and first stage through the runner, twice: ~30 s on 2 cores
def test_papers_robust04_first_stage_searches_the_trec_collection_index(irds_corpora, tmp_path, monkeypatch):
    import pandas as pd

    from leakexp.runner.stage import Ask
    from leakexp.runner.registry import runner

    _java_or_skip()
    runs, figures = {}, {}
    for collection in ("trec", "json"):
        (tmp_path / collection).mkdir()
        r = runner(_paper(tmp_path / collection, monkeypatch, f"bm25.collection={collection}", "rerank.depth=100"),
                   files=False)
        runs[collection] = r.get(Ask.of("firststage", corpus="robust04"))
        index = r.ensure(Ask.of("index", name="robust04"))
        figures[collection] = r.store.marker(index).figures
        assert (index / "lucene").is_dir()
    assert figures["trec"]["collection"] == "TrecCollection" and "collection" not in figures["json"]
    assert figures["trec"]["documents"] == figures["json"]["documents"] == figures["trec"]["corpus_documents"] == 28
    assert figures["trec"]["documents_indexed"] == 27
    trec, json_ = runs["trec"], runs["json"]
    assert isinstance(trec, pd.DataFrame) and set(trec.qid) == set(json_.qid) == {"301", "302", "303", "672"}
    # the same documents match each topic (one bag of words but FBIS's titles); scores differ with the FBIS titles
    assert {q: set(g.docno) for q, g in trec.groupby("qid")} == {q: set(g.docno) for q, g in json_.groupby("qid")}
