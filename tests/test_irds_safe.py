"""ir_datasets data read safely: one docstore build under parallel workers, keys that name the files read, status
that says "data missing", run readers that refuse duplicate rows, and errors that name the exact files.

The corpus is a miniature of the Washington Post v2 collection in ir_datasets 0.6.3's own format
(``wapo/WashingtonPost.v2.tar.gz`` holding ``WashingtonPost.v2/data/TREC_Washington_Post_collection.v2.jl``,
ir_datasets/datasets/wapo.py:183; topics and qrels at the ``cache_path`` of etc/downloads.json, which
ir_datasets uses without a checksum when present: util/download.py:252-262), so ir_datasets itself parses it.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import tempfile
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from leakexp.data.files import DataFormatError, DataUnavailable

ROOT = Path(__file__).resolve().parents[1]
WAPO = "wapo/v2/trec-core-2018"
WAPO_MEMBER = "WashingtonPost.v2/data/TREC_Washington_Post_collection.v2.jl"
N_DOCS = 300


def write_wapo(home: Path, n: int = N_DOCS, *, title: str = "Title", docs: bool = True, topics: bool = True) -> Path:
    """The WaPo v2 files ir_datasets reads for trec-core-2018, under ``home`` (an IR_DATASETS_HOME)."""
    d = Path(home) / "wapo"
    (d / "trec-core-2018").mkdir(parents=True, exist_ok=True)
    if docs:
        lines = [json.dumps({"id": f"wp{i:05d}", "article_url": f"https://wp.example/{i}", "title": f"{title} {i}",
                             "author": "A. Writer", "published_date": 1500000000000 + i, "contents": [
                                 {"type": "kicker", "mime": "text/plain", "content": "World"},
                                 {"type": "sanitized_html", "mime": "text/plain", "content": f"body of article {i}: " + " ".join(f"w{(i * 7 + j) % 97}" for j in range(40))}]})
                 for i in range(n)]
        data = ("\n".join(lines) + "\n").encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo(WAPO_MEMBER)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        (d / "WashingtonPost.v2.tar.gz").write_bytes(buf.getvalue())
    if topics:
        (d / "trec-core-2018" / "queries.txt").write_text(
            "<top>\n<num> Number: 321 </num>\n<title>\nwomen in parliaments\n</title>\n<desc>\nDescription:\n"
            "Pass.\n</desc>\n<narr>\nNarrative\nAny.\n</narr>\n</top>\n")
        (d / "trec-core-2018" / "qrels").write_text("321 0 wp00001 2\n321 0 wp00002 0\n")
    return d


def docstore_counts(folder: Path) -> tuple[int, int]:
    """(entries, distinct ids) of an ir_datasets PickleLz4FullStore, read from its files."""
    entries = (folder / "bin.pos").stat().st_size // 8
    ids = int((folder / "idx.doc_id.meta").read_text().split()[1])
    return entries, ids


# -- 1. parallel workers ----------------------------------------------------------------------------------
WORKER = r"""
import glob, os, sys, time
home, barrier, workers, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.environ["IR_DATASETS_HOME"] = home
import ir_datasets
from ir_datasets.datasets import wapo
parse = wapo.WapoDocs._docs_iter
def slow(self):  # a large collection: the build takes a while, so both workers find the store unbuilt
    time.sleep(2.0)
    yield from parse(self)
wapo.WapoDocs._docs_iter = slow
from leakexp.data.irds import IrdsDocStore
open(f"{barrier}.{os.getpid()}", "w").close()
while len(glob.glob(barrier + ".*")) < workers:  # start together
    time.sleep(0.005)
if mode == "leakexp":
    store = IrdsDocStore("wapo/v2/trec-core-2018")
    print(len(store), store["wp00007"].split()[:2], flush=True)
else:  # ir_datasets alone, as leakexp opened it before: docs_store().get builds a store that is not built yet
    print(ir_datasets.load("wapo/v2/trec-core-2018").docs_store().get("wp00007").title, flush=True)
"""


def race(tmp_path: Path, mode: str, workers: int = 2) -> tuple[Path, list[str]]:
    """``workers`` processes open the docstore of a fresh IR_DATASETS_HOME at the same moment."""
    home = tmp_path / f"home-{mode}"
    write_wapo(home)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=str(ROOT), IR_DATASETS_HOME=str(home))
    procs = [subprocess.Popen([sys.executable, str(script), str(home), str(tmp_path / f"barrier-{mode}"),
                               str(workers), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(workers)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        outs.append(out.strip())
    return home / "wapo" / "WashingtonPost.v2.tar.gz.pklz4", outs


@pytest.mark.slow  # two processes importing leakexp (about 12 s); make test-slow and CI run it
def test_two_workers_opening_a_fresh_docstore_build_it_once(tmp_path):
    # ir_datasets alone (what leakexp did): both workers find the store unbuilt and each adds every document
    folder, _ = race(tmp_path, "irds")
    assert docstore_counts(folder) == (2 * N_DOCS, N_DOCS)
    # through leakexp: one builds under the lock, the other waits and reads the finished store
    folder, outs = race(tmp_path, "leakexp")
    assert docstore_counts(folder) == (N_DOCS, N_DOCS)
    assert outs == [f"{N_DOCS} ['Title', '7']"] * 2
    recorded = json.loads((folder / "leakexp.json").read_text())
    assert recorded["documents"] == N_DOCS and list(recorded["built_from"]) == ["wapo/WashingtonPost.v2.tar.gz"]


@pytest.fixture
def empty_home():
    """The session's IR_DATASETS_HOME emptied for one test (ir_datasets fixes each dataset's paths there when it is
    imported) and restored afterwards: the miniature corpora of tests/irds_corpora.py are moved aside, by renames
    within one file system, and back."""
    home = Path(os.environ["IR_DATASETS_HOME"])
    aside = Path(tempfile.mkdtemp(prefix="irds-aside-", dir=home.parent))
    for p in list(home.iterdir()):
        p.rename(aside / p.name)
    try:
        yield home
    finally:
        for p in list(home.iterdir()):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        for p in list(aside.iterdir()):
            p.rename(home / p.name)
        aside.rmdir()


@pytest.fixture
def wapo_home(empty_home):
    """The WaPo files at the paths ir_datasets reads in this test session's IR_DATASETS_HOME, alone there."""
    from leakexp.data.irds_files import dataset_files

    files = dataset_files(WAPO)
    folder = files["docs"][0].path.parent
    assert folder.name == "wapo" and files["queries"][0].path == folder / "trec-core-2018" / "queries.txt"
    yield write_wapo(folder.parent)


def test_a_damaged_docstore_is_refused_and_deleting_it_as_told_repairs_it(wapo_home):
    import ir_datasets

    from leakexp.data.irds import IrdsDocStore

    store = ir_datasets.load(WAPO).docs_store()
    for _ in range(2):  # what two racing workers leave behind
        with store.lookup.transaction() as t:
            for doc in store.init_iter_fn():
                t.add(doc)
    folder = wapo_home / "WashingtonPost.v2.tar.gz.pklz4"
    assert docstore_counts(folder) == (600, 300)
    with pytest.raises(DataUnavailable) as err:
        IrdsDocStore(WAPO)["wp00001"]
    message = str(err.value)
    assert "\n" not in message
    assert f"docstore {folder} of '{WAPO}' is damaged: it holds 600 entries for 300 distinct document ids" in message
    assert f"delete the folder (rm -r {folder})" in message
    shutil.rmtree(folder)
    docs = IrdsDocStore(WAPO)
    assert len(docs) == 300 and docs["wp00001"].split()[:2] == ["Title", "1"]
    assert docstore_counts(folder) == (300, 300)


def test_ids_repeated_by_the_collection_itself_are_kept_and_a_store_grown_since_is_refused(wapo_home):
    from leakexp.data.irds import IrdsDocStore

    write_wapo(wapo_home.parent, n=4)
    archive = wapo_home / "WashingtonPost.v2.tar.gz"
    with tarfile.open(archive) as tar:  # the collection repeats one id: a single build, not damage
        lines = tar.extractfile(WAPO_MEMBER).read().decode().splitlines()
    data = ("\n".join([*lines, lines[1]]) + "\n").encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(WAPO_MEMBER)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(buf.getvalue())
    docs = IrdsDocStore(WAPO)
    assert docs["wp00001"].split()[:2] == ["Title", "1"] and len(docs) == 5
    folder = wapo_home / "WashingtonPost.v2.tar.gz.pklz4"
    assert docstore_counts(folder) == (5, 4) and json.loads((folder / "leakexp.json").read_text())["entries"] == 5
    assert IrdsDocStore(WAPO)["wp00002"].split()[:2] == ["Title", "2"]  # opened again: the same store
    store = docs._store
    with store.lookup.transaction() as t:  # a process outside leakexp adds to it
        for doc in store.init_iter_fn():
            t.add(doc)
    with pytest.raises(DataUnavailable, match=r"is damaged: it holds 10 entries for 4 distinct document ids \(5 "
                                              r"entries when it was built\); delete the folder \(rm -r "):
        IrdsDocStore(WAPO)["wp00001"]


# -- 2. keys name the data --------------------------------------------------------------------------------
def _paper(tmp_path, monkeypatch, *extra):
    from conftest import paper_env

    from leakexp.runner.registry import compose

    return compose([*paper_env(tmp_path, monkeypatch), f"store={tmp_path / 'store'}", "grid.sizes=[1000]",
                    "grid.seeds=[1]", "grid.models=[knrm]", *extra])


def _runner(cfg):
    from leakexp.runner.registry import runner

    return runner(cfg, readonly=True)


def test_replacing_a_file_rekeys_what_reads_it(wapo_home, tmp_path, monkeypatch):
    from leakexp.runner.stage import Ask

    cfg = _paper(tmp_path, monkeypatch)
    index, robust, pool = (Ask.of("index", name=n) for n in ("core18", "robust04", "train"))
    before = {a: _runner(cfg).key(a) for a in (index, robust, pool)}
    assert _runner(cfg).key(index) == before[index]  # the same files, the same key
    record = _runner(cfg).record(Ask.of("collection", corpus="core18"))["external"]["irds"][0]
    assert record["irds"] == WAPO and record["ir_datasets"] == "0.6.3"
    archive = record["files"]["docs"]["wapo/WashingtonPost.v2.tar.gz"]
    assert archive["size"] == (wapo_home / "WashingtonPost.v2.tar.gz").stat().st_size and "blake2b" in archive
    write_wapo(wapo_home.parent, title="Headline")  # another archive (and the same topics and qrels again)
    after = _runner(cfg).key(index)
    assert after != before[index]
    assert _runner(cfg).key(robust) == before[robust] and _runner(cfg).key(pool) == before[pool]
    qrels = wapo_home / "trec-core-2018" / "qrels"
    qrels.write_text(qrels.read_text().replace("wp00002 0", "wp00002 1"))  # same size: its content names it
    assert _runner(cfg).key(index) not in (before[index], after)


def test_a_docstore_built_from_another_archive_is_refused(wapo_home):
    from leakexp.data.irds import IrdsDocStore

    assert IrdsDocStore(WAPO)["wp00003"].split()[:2] == ["Title", "3"]
    write_wapo(wapo_home.parent, title="Headline")  # ir_datasets would go on serving the old documents
    with pytest.raises(DataUnavailable, match=r"was built from another version of .*WashingtonPost\.v2\.tar\.gz .*"
                                              r"rm -r .*WashingtonPost\.v2\.tar\.gz\.pklz4"):
        IrdsDocStore(WAPO)["wp00003"]
    shutil.rmtree(wapo_home / "WashingtonPost.v2.tar.gz.pklz4")
    assert IrdsDocStore(WAPO)["wp00003"].split()[:2] == ["Headline", "3"]


def test_status_says_data_missing_with_the_paths_never_done(wapo_home, tmp_path, monkeypatch):
    from leakexp.grid.work import grid_status, render_status
    from leakexp.runner.stage import Ask, InputsMissing
    from leakexp.runner.registry import runner

    cfg = _paper(tmp_path, monkeypatch, "bm25.backend=pisa", "bm25.collection=json")
    index = Ask.of("index", name="core18")
    r = runner(cfg, files=False)
    r.ensure(index)
    assert _runner(cfg).state(index)[0] == "done"
    archive = wapo_home / "WashingtonPost.v2.tar.gz"
    archive.rename(tmp_path / "aside.tar.gz")
    state, path, detail = _runner(cfg).state(index)
    assert state == "data missing" and path != r.path(index)  # without the archive its identity is unknown
    assert f"as {archive} (a symlink will do)" in detail and "licensed: the Washington Post" in detail
    with pytest.raises(InputsMissing, match=re.escape(str(archive))):
        runner(cfg, files=False).ensure(index)
    from leakexp.runner.lineage import why

    assert any(line.startswith("  data missing: ir_datasets 'wapo/v2/trec-core-2018'") for line in
               why(_runner(cfg), index))
    status = grid_status(cfg)
    assert all(st.done == 0 and st.data_missing == st.total > 0 for row, st in status.items() if row != "verify")
    text = render_status(status)
    assert "data missing" in text.splitlines()[0]
    for f in ("disks45/corpus", "disks45/04.testset.gz", "nyt/nyt.tgz", str(archive),
              "msmarco-document/collection.tsv.gz", "msmarco-document/orcas/qrels.gz"):
        assert f in text, f
    (tmp_path / "aside.tar.gz").rename(archive)  # back: the same file, the same key, done again
    assert _runner(cfg).state(index)[0] == "done"


# -- 3. messages -----------------------------------------------------------------------------------------
def _message(fn) -> str:
    with pytest.raises(DataUnavailable) as err:
        fn()
    assert "\n" not in str(err.value)
    return str(err.value)


def test_errors_name_the_exact_files_of_each_dataset_and_what_to_do(empty_home):
    from leakexp.data.irds import load_irds_collection, load_irds_train_pool
    from leakexp.data.irds_files import home

    h = home()
    robust = _message(lambda: load_irds_collection("robust04", "disks45/nocr/trec-robust-2004"))
    assert "licensed: TREC Disks 4 & 5" in robust and f"in the folder {h}/disks45/corpus" in robust
    assert "**/FBIS/FB*" in robust and "unlzw3" in robust
    assert f"public: topics {h}/disks45/04.testset.gz, qrels {h}/disks45/qrels.robust2004.txt" in robust
    assert "`ir_datasets export disks45/nocr/trec-robust-2004 queries >/dev/null; ir_datasets export " \
           "disks45/nocr/trec-robust-2004 qrels >/dev/null`" in robust

    nyt = _message(lambda: load_irds_collection("core17", "nyt/trec-core-2017"))
    assert f"put its archive nyt_corpus_LDC2008T19.tgz as {h}/nyt/nyt.tgz (the name ir_datasets reads" in nyt
    assert f"public: topics {h}/nyt/trec-core-2017/queries.txt, qrels {h}/nyt/trec-core-2017/qrels" in nyt

    wapo = _message(lambda: load_irds_collection("core18", WAPO))
    assert f"WashingtonPost.v2.tar.gz (holding {WAPO_MEMBER}) as {h}/wapo/WashingtonPost.v2.tar.gz" in wapo
    assert f"public: topics {h}/wapo/trec-core-2018/queries.txt, qrels {h}/wapo/trec-core-2018/qrels" in wapo

    pool = _message(lambda: load_irds_train_pool("msmarco-document/train", "msmarco-document/orcas"))
    assert "licensed" not in pool and "5 file(s)" in pool
    for part, f in (("documents", "collection.tsv.gz"), ("queries", "train/queries.tsv.gz"),
                    ("qrels", "train/qrels.gz"), ("queries", "orcas/queries.tsv.gz"), ("qrels", "orcas/qrels.gz")):
        assert f"{part} {h}/msmarco-document/{f}" in pool
    for command in ("msmarco-document/train docs", "msmarco-document/train queries", "msmarco-document/train qrels",
                    "msmarco-document/orcas queries", "msmarco-document/orcas qrels"):
        assert f"ir_datasets export {command} >/dev/null" in pool
    assert "msmarco-document/orcas docs" not in pool  # ORCAS's documents are MS MARCO's


def test_missing_public_topics_are_not_blamed_on_the_licensed_corpus(wapo_home):
    from leakexp.data.irds import load_irds_collection

    (wapo_home / "trec-core-2018" / "queries.txt").unlink()
    message = _message(lambda: load_irds_collection("core18", WAPO))
    assert "1 file(s)" in message and "licensed" not in message and "WashingtonPost.v2.tar.gz" not in message
    assert f"public: topics {wapo_home}/trec-core-2018/queries.txt" in message
    assert f"ir_datasets export {WAPO} queries >/dev/null" in message


def test_a_missing_package_is_named_with_how_to_install_it(empty_home, monkeypatch):
    """Disks 4 & 5 ship .Z files that ir_datasets decompresses with unlzw3 (formats/trec.py:161-165)."""
    import ir_datasets

    from leakexp.data.irds import IrdsDocStore
    from leakexp.data.irds_files import dataset_files

    corpus = dataset_files("disks45/nocr/trec-robust-2004")["docs"][0].path
    (corpus / "NEWS_data" / "FT" / "FT911").mkdir(parents=True)
    (corpus / "NEWS_data" / "FT" / "FT911" / "FT911_1.Z").write_bytes(b"\x1f\x9d\x90")
    monkeypatch.setitem(sys.modules, "unlzw3", None)  # as if it were not installed
    monkeypatch.delitem(ir_datasets.lazy_libs._cache, "unlzw3", raising=False)
    try:
        message = _message(lambda: list(IrdsDocStore("disks45/nocr/trec-robust-2004")))
    finally:
        shutil.rmtree(corpus)
        shutil.rmtree(corpus.parent / "corpus.nocr.pklz4", ignore_errors=True)
    assert message.startswith("reading the documents of ir_datasets 'disks45/nocr/trec-robust-2004' needs the Python "
                              "package unlzw3, which is not installed: pip install unlzw3")
    assert "licensed" not in message


# -- run readers ------------------------------------------------------------------------------------------
def test_every_run_reader_refuses_a_document_twice_for_a_topic(tmp_path):
    from leakexp.lib.trec import read_run, refuse_duplicates

    lines = "321 Q0 wp1 1 9.0 a\n321 Q0 wp2 2 8.0 a\n321 Q0 wp1 3 7.0 a\n322 Q0 wp1 1 5.0 a\n"
    anserini = tmp_path / "anserini.run"
    anserini.write_text(lines)
    with pytest.raises(DataFormatError, match=rf"^{anserini}:3: document wp1 appears twice for topic 321 \(first at "
                                              r"line 1; 1 duplicate \(topic, document\) rows in the file\)"):
        read_run(anserini, ranks="file")
    bundled = tmp_path / "core18.bm25.top100.run.gz"  # the shipped runs' format (gzipped TREC)
    bundled.write_bytes(gzip.compress(lines.encode()))
    with pytest.raises(DataFormatError, match=rf"{bundled}:3: document wp1 appears twice for topic 321"):
        read_run(bundled)
    with pytest.raises(DataFormatError, match=rf"{bundled}:3: document wp1 appears twice for topic 321"):
        read_run(bundled)
    msmarco = tmp_path / "msmarco.tsv"
    msmarco.write_text("1\tD1\t1\n1\tD1\t2\n")
    with pytest.raises(DataFormatError, match=rf"{msmarco}:2: document D1 appears twice for query 1"):
        read_run(msmarco)
    assert read_run(_write(tmp_path / "ok.run", lines.replace("wp1 3", "wp3 3")), ranks="file").shape == (4, 4)
    pisa = pd.DataFrame({"qid": ["321", "321", "321"], "docno": ["wp1", "wp2", "wp1"], "score": [3.0, 2.0, 1.0]})
    with pytest.raises(DataFormatError, match=r"^the PISA index x: document wp1 appears twice for topic 321 \(1 "
                                              r"duplicate \(topic, document\) rows of 3\)"):
        refuse_duplicates(pisa, "the PISA index x")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
