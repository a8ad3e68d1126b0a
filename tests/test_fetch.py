"""``leakexp fetch`` and the downloads under it: files come over real HTTP from a server the tests start on 127.0.0.1
(tests/http_files.py), resumed with a Range request, kept only when their sha256 is the pinned one, and nothing is
half-written when the server is down; the paper's configuration fetches GloVe, the SPIRE-22 annotations and runs to
where its runs read them and lists what cannot be fetched. No test reaches the internet."""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import re
import zipfile
from pathlib import Path

import pytest
from http_files import FileServer, folder_files, free_port_url, hub_route, no_internet

from leakexp.cli.main import main
from leakexp.data.judgments import BUNDLED_RUNS
from leakexp.lib.download import DownloadError, fetch_file

COMMIT = "f3ab03077aa732a82fa52e0c0f6ecd12f5c29212"
ANNOTATION_NAMES = ("query-reformulation-classification-iteration-01-annotated-by-maik-and-cakiki.jsonl",
                    "query-reformulation-classification-iteration-02-annotated-by-chris.jsonl",
                    "query-reformulation-classification-iteration-03-annotated-by-maik.jsonl",
                    "query-reformulation-classification-iteration-04-annotated-by-maik.jsonl")
RUNS = {"nyt-common-core-2017-bm25-anserini.run": "core17.bm25-anserini.top100.run.gz",
        "wapo-v2-common-core-2018-bm25-anserini.run": "core18.bm25-anserini.top100.run.gz"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def _local_only(monkeypatch):
    no_internet(monkeypatch)


@pytest.fixture
def served():
    server = FileServer()
    yield server
    server.close()


def _bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


# -- one file ---------------------------------------------------------------------------------------------------
def test_an_interrupted_download_is_resumed_with_a_range_request(served, tmp_path):
    data = _bytes(300_000)
    served.files["/f.bin"] = data
    served.cut["/f.bin"] = 100_000  # the first response stops after 100,000 of 300,000 bytes
    dest = tmp_path / "f.bin"
    with pytest.raises(DownloadError) as err:
        fetch_file(f"{served.url}/f.bin", dest, sha256=sha(data))
    message = str(err.value)
    kept = int(re.search(r"stopped after ([\d,]+) of 300,000 bytes", message).group(1).replace(",", ""))
    assert "\n" not in message and message.endswith(f"they are kept in {dest}.part: run again to resume")
    part = Path(f"{dest}.part")
    assert not dest.exists() and 0 < kept <= 100_000 and part.read_bytes() == data[:kept]
    assert fetch_file(f"{served.url}/f.bin", dest, sha256=sha(data)) == dest
    assert dest.read_bytes() == data and not part.exists()
    assert [s.headers.get("Range") for s in served.seen] == [None, f"bytes={kept}-"]  # the rest, not the whole again
    assert fetch_file(f"{served.url}/f.bin", dest, sha256=sha(data)) == dest and len(served.seen) == 2  # kept as is


def test_a_checksum_mismatch_is_refused_and_nothing_is_kept(served, tmp_path):
    data = _bytes(50_000, seed=1)
    served.files["/f.bin"] = data
    wrong = sha(b"another file")
    with pytest.raises(DownloadError) as err:
        fetch_file(f"{served.url}/f.bin", tmp_path / "f.bin", sha256=wrong)
    assert str(err.value) == (f"f.bin: the 50,000 bytes from {served.url}/f.bin have sha256 {sha(data)}, not the "
                              f"pinned {wrong}; nothing was kept")
    assert list(tmp_path.iterdir()) == []
    served.cut["/f.bin"] = 10_000  # a resumed download that ends wrong: its part goes too
    with pytest.raises(DownloadError, match="run again to resume"):
        fetch_file(f"{served.url}/f.bin", tmp_path / "f.bin", sha256=wrong)
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin.part"]
    with pytest.raises(DownloadError, match="nothing was kept"):
        fetch_file(f"{served.url}/f.bin", tmp_path / "f.bin", sha256=wrong)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DownloadError, match=r"^f.bin: 'abc' is not a sha256 \(64 hex digits\); nothing downloaded$"):
        fetch_file(f"{served.url}/f.bin", tmp_path / "f.bin", sha256="abc")
    (tmp_path / "f.bin").write_bytes(b"someone's own file")  # a file in the way is never replaced
    with pytest.raises(DownloadError, match="exists and its sha256 is not the pinned"):
        fetch_file(f"{served.url}/f.bin", tmp_path / "f.bin", sha256=sha(data))
    assert (tmp_path / "f.bin").read_bytes() == b"someone's own file"


def test_a_server_that_is_down_is_one_line_and_nothing_is_written(tmp_path):
    url = free_port_url()
    dest = tmp_path / "sub" / "f.bin"
    with pytest.raises(DownloadError) as err:
        fetch_file(f"{url}/f.bin", dest, sha256=sha(b"x"))
    host = url.removeprefix("http://")
    assert str(err.value) == f"f.bin: cannot reach {host} (connection refused) for {url}/f.bin; nothing was written"
    assert list(tmp_path.iterdir()) == []


def test_a_file_the_server_does_not_have_is_one_line(served, tmp_path):
    with pytest.raises(DownloadError, match=r"^f.bin: http://127.0.0.1:\d+/f.bin answered HTTP 404 Not Found; "
                                            r"nothing was written$"):
        fetch_file(f"{served.url}/f.bin", tmp_path / "f.bin", sha256=sha(b"x"))
    assert list(tmp_path.iterdir()) == []


# -- leakexp fetch ------------------------------------------------------------------------------------------------
def test_the_demo_has_nothing_to_fetch(capsys):
    from leakexp.cli.main import FETCH_KINDS
    from leakexp.grid.fetch import KINDS

    assert FETCH_KINDS == KINDS  # --only offers every kind of download
    assert main(["fetch"]) == 0
    assert capsys.readouterr().out.startswith("nothing to fetch: every input of this configuration ships with leakexp")


def _glove_zip() -> tuple[bytes, bytes]:
    vectors = b"the 0.418 0.24968 -0.41242\nof 0.70853 0.57088 -0.4716\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("glove.6B.50d.txt", b"the 0.1\n")
        z.writestr("glove.6B.300d.txt", vectors)
    return buf.getvalue(), vectors


def _source_run(bundled: str) -> bytes:
    """A source run whose lines of rank <= 100 are the bundled top-100 file: that file, a rank-101 line per topic."""
    top = gzip.decompress((BUNDLED_RUNS / bundled).read_bytes()).decode()
    topics = dict.fromkeys(line.split()[0] for line in top.splitlines())
    return (top + "".join(f"{t} Q0 DEEPER-{t} 101 0.5 Anserini\n" for t in topics)).encode()


@pytest.fixture
def spire(served, tmp_path, monkeypatch):
    """The paper's configuration with fetch.* pointed at the local server, which holds GloVe's archive and the
    SPIRE-22 files at the pinned commit (stand-ins with their own sha256); the working directory is tmp_path (GloVe's
    default path is relative), no variants or GloVe given."""
    archive, vectors = _glove_zip()
    served.files["/glove/glove.6B.zip"] = archive
    annotations = {n: f'{{"id": {i}}}\n'.encode() for i, n in enumerate(ANNOTATION_NAMES)}
    runs = {name: _source_run(bundled) for name, bundled in RUNS.items()}
    for name, data in annotations.items():
        served.files[f"/spire/{COMMIT}/src/main/resources/manual-annotations/{name}"] = data
    for name, data in runs.items():
        served.files[f"/spire/{COMMIT}/src/main/resources/run-files/{name}"] = data
    for corpus in ("ROBUST04", "CORE17", "CORE18"):
        monkeypatch.delenv(f"LEAKEXP_VARIANTS_{corpus}", raising=False)
    monkeypatch.delenv("LEAKEXP_GLOVE", raising=False)
    monkeypatch.chdir(tmp_path)
    overrides = [
        "experiment=paper", f"fetch.dir={tmp_path / 'dl'}", f"fetch.glove.url={served.url}/glove/glove.6B.zip",
        f"fetch.glove.sha256={sha(archive)}", f"fetch.spire22.url={served.url}/spire",
        "fetch.spire22.annotations=[" + ",".join(f"{{name: {n}, sha256: {sha(d)}}}" for n, d in annotations.items())
        + "]",
        "fetch.spire22.runs=[" + ",".join(f"{{name: {n}, bundled: {RUNS[n]}, sha256: {sha(d)}}}"
                                          for n, d in runs.items()) + "]"]
    return overrides, {"vectors": vectors, "annotations": annotations, "runs": runs}


LICENSED_FILES = ("disks45/corpus", "nyt/nyt.tgz", "wapo/WashingtonPost.v2.tar.gz")


def test_fetch_puts_glove_the_annotations_and_the_runs_where_the_paper_reads_them(spire, served, tmp_path, capsys):
    from leakexp.data.irds_files import home
    from leakexp.runner.registry import compose
    from leakexp.runner.registry import runner

    overrides, content = spire
    dl = tmp_path / "dl" / "SPIRE-22@f3ab030"
    assert main(["fetch", *overrides, "--list"]) == 0
    listed = capsys.readouterr().out
    for what, n in (("Hugging Face model", 3), ("word vectors", 1), ("SPIRE-22 annotations", 4), ("SPIRE-22 run", 2)):
        assert listed.count(f"to fetch {what} ") == n, what
    # ir_datasets' files, here or to fetch; the licensed ones are listed as here where another test of this process
    # wrote the miniature corpora into the session's ir_datasets home (its dataset modules fix the home on import)
    files = [(m.group(1), m.group(2)) for m in re.finditer(r"^(to fetch|here    ) ir_datasets '[^']+' \S+: (.*)$",
                                                              listed, re.M)]
    public = [(state, path) for state, path in files if not path.endswith(LICENSED_FILES)]
    assert len(public) == 11  # MS MARCO's and ORCAS's files, the collections' topics and qrels
    assert all((state == "here    ") == Path(path).exists() for state, path in files)
    assert not (tmp_path / "dl").exists() and not served.seen  # a listing fetches nothing
    assert main(["fetch", *overrides, "--only", "glove", "annotations", "runs"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "glove.6B.300d.txt").read_bytes() == content["vectors"]
    assert f"fetched  word vectors glove.6B.300d.txt (embeddings of knrm, duet, pacrr): extracted from {served.url}" \
           f"/glove/glove.6B.zip (sha256 checked) to glove.6B.300d.txt" in out
    assert not list((tmp_path / "dl").glob("glove*"))  # the archive is gone once its member is in place
    for name, data in content["annotations"].items():
        assert (dl / "manual-annotations" / name).read_bytes() == data
    for name, data in content["runs"].items():
        assert (dl / "run-files" / name).read_bytes() == data
        assert f"the bundled {RUNS[name]} is its top-100" in out
    assert not list(tmp_path.rglob("*.part"))
    override = re.search(r"^the annotation files are found there by verify.annotations: null, the paper's setting "
                         r"\(the same as (verify\.annotations=\[.*\])\)$", out, re.M).group(1)
    assert override == f"verify.annotations=[{','.join(str(dl / 'manual-annotations' / n) for n in ANNOTATION_NAMES)}]"
    # what cannot be fetched: the query variants (and the licensed documents not in ir_datasets' home), with where
    manual = out.split("cannot be fetched (")[1]
    for corpus in ("robust04", "core17", "core18"):
        assert f"  - query variants of {corpus}: corpus {corpus} has no query variants" in manual
        assert f"LEAKEXP_VARIANTS_{corpus.upper()}=/path/to/variants.tsv" in manual
    licensed = {"disks45/corpus": "TREC Disks 4 & 5 are licensed by NIST", "nyt/nyt.tgz": "LDC2008T19",
                "wapo/WashingtonPost.v2.tar.gz": "the Washington Post collection v2 is licensed by NIST"}
    for path, text in licensed.items():
        if not (home() / path).exists():  # another test of this process may have written the miniature corpora
            assert text in manual and str(home() / path) in manual
    assert re.search(r"^fetch: 7 fetched, 0 already here, 0 failed, \d+ to place by hand", out, re.M), out
    # the annotations as fetched pass a computing command's checks; a second fetch finds everything here
    runner(compose([*overrides, override, f"store={tmp_path / 'store'}", "detect.fields=[title,description]",
                    "grid.models=[knrm]", f"model_overrides.knrm.embeddings={tmp_path / 'glove.6B.300d.txt'}"]),
           needs=("verify",))
    # ... and without that override: a null verify.annotations reads the fetched files, under the same key
    from leakexp.runner.stage import Ask

    plain = [*overrides, f"store={tmp_path / 'store'}", "detect.fields=[title,description]", "grid.models=[knrm]"]
    s = compose(plain)
    assert s.verify.annotations == [str(dl / "manual-annotations" / n) for n in ANNOTATION_NAMES]
    named = runner(compose([*plain, override]), readonly=True)
    assert runner(s, readonly=True).key(Ask.of("verify")) == named.key(Ask.of("verify"))
    requests = len(served.seen)
    assert main(["fetch", *overrides, "--only", "glove", "annotations", "runs"]) == 0
    assert "fetch: 0 fetched, 7 already here, 0 failed" in capsys.readouterr().out and len(served.seen) == requests


def test_fetch_says_each_failure_in_one_line_keeps_nothing_of_it_and_exits_1(spire, served, tmp_path, capsys):
    overrides, content = spire
    name = ANNOTATION_NAMES[1]
    served.files[f"/spire/{COMMIT}/src/main/resources/manual-annotations/{name}"] = b"tampered\n"
    run = next(iter(RUNS))
    lines = content["runs"][run].decode().splitlines(keepends=True)
    tampered = "".join([lines[1], lines[0], *lines[2:]]).encode()  # two top-100 lines swapped
    served.files[f"/spire/{COMMIT}/src/main/resources/run-files/{run}"] = tampered
    overrides = [o for o in overrides if not o.startswith(("fetch.glove.url", "fetch.spire22.runs"))]
    overrides += [f"fetch.glove.url={free_port_url()}/glove.6B.zip",
                  "fetch.spire22.runs=[" + ",".join(f"{{name: {n}, bundled: {b}, sha256: "
                                                    f"{sha(tampered if n == run else content['runs'][n])}}}"
                                                    for n, b in RUNS.items()) + "]"]
    assert main(["fetch", *overrides, "--only", "glove", "annotations", "runs"]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 3, out
    assert re.search(r"^FAILED   word vectors glove.6B.300d.txt .*: GloVe 6B archive: cannot reach 127.0.0.1:\d+ "
                     r"\(connection refused\) .*; nothing was written$", out, re.M), out
    assert f"FAILED   SPIRE-22 annotations {name} (verify.annotations): {name}: the 9 bytes from " in out
    assert re.search(rf"^FAILED   SPIRE-22 run {run} .*: {run}: its lines of rank <= 100 are not the bundled ", out,
                     re.M), out
    dl = tmp_path / "dl" / "SPIRE-22@f3ab030"
    assert not (dl / "manual-annotations" / name).exists() and not (tmp_path / "glove.6B.300d.txt").exists()
    assert (dl / "manual-annotations" / ANNOTATION_NAMES[0]).is_file()  # the others are fetched all the same
    assert "fetch: 4 fetched, 0 already here, 3 failed" in out
    assert not list(tmp_path.rglob("*.part"))


@pytest.fixture
def hub_online(tmp_path, monkeypatch, tiny_bert):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    server = FileServer(route=hub_route({("leakexp-test/tiny-bert", "5" * 40): folder_files(tiny_bert)}))
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    yield server
    server.close()


def test_fetch_brings_the_models_at_their_commits_and_respects_offline(hub_online, tmp_path, monkeypatch, capsys):
    from leakexp.lib import hub

    name = f"leakexp-test/tiny-bert@{'5' * 40}"
    assert main(["fetch", f"detect.sbert={name}"]) == 0
    out = capsys.readouterr().out
    assert f"fetched  Hugging Face model leakexp-test/tiny-bert at {'5' * 40} (detect.sbert): fetched into " \
           f"{tmp_path / 'hub' / 'models--leakexp-test--tiny-bert' / 'snapshots' / ('5' * 40)}" in out
    assert hub.cached(name) and "fetch: 1 fetched, 0 already here, 0 failed, 0 to place by hand" in out
    assert main(["fetch", f"detect.sbert={name}"]) == 0
    assert "fetch: 0 fetched, 1 already here" in capsys.readouterr().out
    # a name without a commit cannot be fetched as it is: the pinned spelling is asked for
    assert main(["fetch", "detect.sbert=leakexp-test/tiny-bert"]) == 0
    out = capsys.readouterr().out
    assert "  - Hugging Face model leakexp-test/tiny-bert (detect.sbert): detect.sbert=leakexp-test/tiny-bert: the " \
           "Hugging Face model leakexp-test/tiny-bert is named without a revision" in out
    # HF_HUB_OFFLINE=1 forbids the download: today's line, exit 1
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    assert main(["fetch", f"detect.sbert={name}"]) == 1
    out = capsys.readouterr().out
    assert re.search(rf"^FAILED   Hugging Face model leakexp-test/tiny-bert at 5{{40}} \(detect.sbert\): detect.sbert="
                     rf"{name}: the Hugging Face model leakexp-test/tiny-bert at revision 5{{40}} is not in the local "
                     rf"cache \(.*empty-hub\) and HF_HUB_OFFLINE=1 forbids downloads;", out, re.M), out
    assert not (tmp_path / "empty-hub").exists()


def test_ir_datasets_public_files_are_fetched_by_ir_datasets_and_licensed_ones_listed(served, tmp_path):
    """A public file comes through ir_datasets' own download (its md5 checked: a wrong one keeps nothing); a file
    without a URL is listed with ir_datasets' instructions."""
    import ir_datasets
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries
    from ir_datasets.util import Download, LocalDownload, RequestsDownload

    from leakexp.grid.fetch import irds_file_needs

    queries, qrels = b"1\tlyme disease\n2\thubble\n", b"1 0 d1 1\n"
    served.files["/q.tsv"], served.files["/qrels"] = queries, qrels
    name = f"leakexp-fetch-test/{tmp_path.name}"
    ir_datasets.registry.register(name, Dataset(
        TsvDocs(Download([LocalDownload(tmp_path / "absent.tsv", message="licensed: order it from its owner")],
                         cache_path=str(tmp_path / "irds" / "docs.tsv")), namespace="lx", lang="en"),
        TsvQueries(Download([RequestsDownload(f"{served.url}/q.tsv")], cache_path=str(tmp_path / "irds" / "q.tsv"),
                            expected_md5=hashlib.md5(queries).hexdigest()), namespace="lx", lang="en"),
        TrecQrels(Download([RequestsDownload(f"{served.url}/qrels")], cache_path=str(tmp_path / "irds" / "qrels"),
                           expected_md5=hashlib.md5(b"other").hexdigest()), {1: "relevant"})))
    needs = {n.where: n for n in irds_file_needs([(name, ("docs", "queries", "qrels"))])}
    docs, q, r = (needs[str(tmp_path / "irds" / f)] for f in ("docs.tsv", "q.tsv", "qrels"))
    assert (docs.kind, docs.get) == ("manual", None) and "licensed: order it from its owner" in docs.how
    assert (q.kind, r.kind) == ("irds", "irds") and not q.here and not r.here
    assert q.get() == f"fetched by ir_datasets to {tmp_path / 'irds' / 'q.tsv'}"
    assert (tmp_path / "irds" / "q.tsv").read_bytes() == queries
    with pytest.raises(DownloadError, match=rf"^qrels: ir_datasets could not fetch it from {served.url}/qrels "):
        r.get()
    assert sorted(p.name for p in (tmp_path / "irds").iterdir()) == ["q.tsv"]  # the wrong file was not kept


def test_an_unreachable_server_is_asked_once_and_each_file_fails_in_one_line_at_once(tmp_path, monkeypatch):
    """Offline: the first file finds the server down (one connection); the next ones from it fail at once with the
    same reason, without a request or a library's retries."""
    import socket

    url = free_port_url()
    tried = []
    connect = socket.create_connection
    monkeypatch.setattr(socket, "create_connection", lambda addr, *a, **k: (tried.append(addr), connect(addr, *a, **k))[1])
    monkeypatch.setattr("requests.get", lambda *a, **k: pytest.fail("a request to a server known to be down"))
    messages = []
    for n in range(3):
        with pytest.raises(DownloadError) as err:
            fetch_file(f"{url}/f{n}.bin", tmp_path / f"f{n}.bin", sha256=sha(b"x"))
        messages.append(str(err.value))
    assert len(tried) == 1 and all("(connection refused)" in m and "\n" not in m for m in messages)
    assert list(tmp_path.iterdir()) == []


def test_a_hub_that_cannot_be_reached_is_not_asked_again_nor_retried(tmp_path, monkeypatch, caplog):
    from leakexp.lib import hub

    monkeypatch.setenv("HF_ENDPOINT", free_port_url())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("huggingface_hub.HfApi.list_repo_files",
                        lambda *a, **k: pytest.fail("huggingface_hub asked a hub known to be down"))
    with caplog.at_level("WARNING"):
        for pin in ("1" * 40, "2" * 40):
            with pytest.raises(hub.HubError, match=r"from http://127.0.0.1:\d+ \(connection refused\)$"):
                hub.download(f"leakexp-test/tiny-bert@{pin}")
    assert caplog.records == []  # no retry warnings


def test_an_ir_datasets_file_whose_mirrors_are_all_down_fails_in_one_line_without_asking_ir_datasets(tmp_path):
    from types import SimpleNamespace

    from leakexp.grid.fetch import _irds

    down = [free_port_url() + "/a.gz", free_port_url() + "/mirror/a.gz"]
    source = SimpleNamespace(mirrors=[SimpleNamespace(url=u) for u in down],
                             path=lambda: pytest.fail("ir_datasets asked to download from servers known to be down"))
    f = SimpleNamespace(path=tmp_path / "a.gz", url=down[0], source=source)
    with pytest.raises(DownloadError, match=r"^a.gz: cannot reach 127.0.0.1:\d+ \(connection refused\) for "
                                            r"http://127.0.0.1:\d+/a.gz nor its 1 mirror\(s\); nothing was written$"):
        _irds(f)
