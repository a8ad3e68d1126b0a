"""BM25 backends: PyTerrier + PISA (k1 = 0.9, b = 0.4 as Anserini's default; no Java) and Anserini itself (its
command-line tools in a subprocess). One index per document collection; a run is (qid, docno, score, rank
0-based), best first. The other stemmers than ``porter`` are PISA's own; their stop list is then applied to
queries only (PISA indexes every word).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Iterator, TYPE_CHECKING

from leakexp.data.files import DataFormatError
from leakexp.lib.analysis import (DEFAULT_ANALYSIS, _stop_set, analyzed_text, check_analysis, clean_query)
from leakexp.lib.trec import read_run, refuse_duplicates

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)

log = logging.getLogger(__name__)


def _self_analysed(stemmer: str) -> bool:
    return stemmer == "porter"


def _pisa_options(stemmer: str, stopwords: str) -> dict:
    if _self_analysed(stemmer):
        return {"stemmer": "none", "stops": "none"}
    return {"stemmer": stemmer, "stops": stopwords}


def index_analysis(index_path: Path) -> dict:
    """The analysis an index was built with (``analysis.json``; indexes without one used PISA's defaults)."""
    f = Path(index_path) / "analysis.json"
    return json.loads(f.read_text()) if f.exists() else dict(DEFAULT_ANALYSIS)


@contextlib.contextmanager
def quiet_native(enabled: bool = True):
    """Silence PISA's C++ logs (fd 1) and progress bars (fd 2), which Python cannot redirect."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def _pisa():
    os.environ.setdefault("IR_DATASETS_HOME", str(Path.home() / ".ir_datasets"))
    from pyterrier_pisa import PisaIndex

    return PisaIndex


def write_index(out: Path, docs: Iterable[tuple[str, str]], *, k1: float = 0.9, b: float = 0.4, threads: int = 2,
                verbose: bool = False, stemmer: str = DEFAULT_ANALYSIS["stemmer"],
                stopwords: str = DEFAULT_ANALYSIS["stopwords"], backend: str = "pisa") -> dict:
    """PISA (or, ``backend="anserini"``, Anserini) index of ``docs`` (docno, text) in ``out``; the analysis is
    recorded in ``analysis.json`` for :func:`bm25_search`. Returns the index's key figures."""
    check_analysis(stemmer, stopwords)
    if backend == "anserini":
        return write_anserini_index(out, docs, threads=threads, verbose=verbose, stemmer=stemmer, stopwords=stopwords)
    if backend != "pisa":
        raise ValueError(f"bm25.backend={backend!r} is unknown; use one of {', '.join(BACKENDS)}")
    PisaIndex = _pisa()
    count = 0

    def records() -> Iterator[dict]:
        nonlocal count
        for docno, text in docs:
            count += 1
            if _self_analysed(stemmer):
                text = analyzed_text(text, stemmer, stopwords)
            yield {"docno": docno, "text": text}

    with quiet_native(not verbose):
        index = PisaIndex(str(Path(out) / "pisa"), text_field="text", threads=threads,
                          **_pisa_options(stemmer, stopwords))
        index.index(records())
        index.bm25(k1=k1, b=b)  # builds the BM25 score file now, so the index stays read-only later
    (Path(out) / "analysis.json").write_text(json.dumps({"stemmer": stemmer, "stopwords": stopwords}))
    log.info("indexed %d documents (stemmer %s, stop words %s)", count, stemmer, stopwords)
    return {"documents": count}


def _check_index_analysis(index_path: Path, stemmer: str | None, stopwords: str | None,
                          backend: str | None = None) -> dict:
    built = index_analysis(index_path)
    built.setdefault("backend", "pisa")
    if backend is not None and backend != built["backend"]:
        raise ValueError(f"{index_path}: a {built['backend']} index, but bm25.backend={backend} was asked for")
    wanted = {"stemmer": stemmer or built["stemmer"], "stopwords": stopwords or built["stopwords"]}
    if wanted != {k: built[k] for k in wanted}:
        raise ValueError(f"{index_path}: index built with stemmer={built['stemmer']} stopwords={built['stopwords']}, "
                         f"but bm25.stemmer={wanted['stemmer']} bm25.stopwords={wanted['stopwords']} was asked for; "
                         f"build the index with the same analysis")
    return built


def bm25_search(
    index_path: Path,
    queries: pd.DataFrame,
    *,
    depth: int = 100,
    k1: float = 0.9,
    b: float = 0.4,
    threads: int = 2,
    verbose: bool = False,
    stemmer: str | None = None,
    stopwords: str | None = None,
    backend: str | None = None,
) -> pd.DataFrame:
    """Top-``depth`` BM25 results (qid, query, docno, score, rank[0-based]) for a (qid, query) frame.

    Queries get the index's analysis and backend (``stemmer`` / ``stopwords`` / ``backend``, when given, must
    match it): PISA's, or Anserini's ``SearchCollection`` (:func:`anserini_search`, in Anserini's order)."""
    import pandas as pd

    repeated = queries.qid.astype(str).value_counts()
    repeated = repeated[repeated > 1]
    if len(repeated):  # results are matched to queries by id: one id per query (MS MARCO and ORCAS may share one)
        raise DataFormatError(f"BM25 queries: query id {repeated.index[0]} is given {int(repeated.iloc[0])} times "
                              f"({len(repeated)} repeated id(s) among {len(queries):,} queries); give each query its "
                              f"own id (e.g. its source and id)")
    analysis = _check_index_analysis(index_path, stemmer, stopwords, backend)
    if analysis["backend"] == "anserini":
        res = anserini_search(index_path, queries, depth=depth, k1=k1, b=b, threads=threads, verbose=verbose,
                              stemmer=analysis["stemmer"], stopwords=analysis["stopwords"])
        res = res.merge(queries[["qid", "query"]].assign(qid=queries.qid.astype(str)), on="qid")
        position = {str(qid): i for i, qid in enumerate(queries.qid)}
        res = res.assign(_pos=res.qid.map(position)).sort_values(["_pos", "rank"], kind="mergesort")
        return res[["qid", "query", "docno", "score", "rank"]].reset_index(drop=True)
    PisaIndex = _pisa()
    q = queries[["qid", "query"]].copy()
    if _self_analysed(analysis["stemmer"]):
        q["query"] = q["query"].map(lambda t: analyzed_text(t, analysis["stemmer"], analysis["stopwords"]))
    else:
        q["query"] = q["query"].map(clean_query)
    with quiet_native(not verbose):
        index = PisaIndex(str(Path(index_path) / "pisa"), threads=threads,
                          stops=_pisa_options(analysis["stemmer"], analysis["stopwords"])["stops"])
        retriever = index.bm25(k1=k1, b=b, num_results=depth, threads=threads)
    res = retriever(q) if len(q) else pd.DataFrame(columns=["qid", "query", "docno", "score", "rank"])
    res = res.merge(queries[["qid", "query"]], on="qid", suffixes=("_clean", ""))
    # PISA's threads may return queries out of order: fix the input order, then rank
    position = {qid: i for i, qid in enumerate(queries.qid)}
    res = res.assign(_pos=res.qid.map(position)).sort_values(["_pos", "rank"], kind="mergesort")
    refuse_duplicates(res, f"the PISA index {Path(index_path) / 'pisa'}")
    return res[["qid", "query", "docno", "score", "rank"]].reset_index(drop=True)


# -- Anserini (Lucene) backend -----------------------------------------------------------------------------
# Anserini itself, driven through its command-line tools in a subprocess: IndexCollection (multi-threaded over
# the input files) and SearchCollection (-bm25, multi-threaded, one JVM per batch of queries). Anserini 0.22.1 is
# the last line built for Java 11/17; its fat jar ships inside the pyserini 0.22.1 wheel (`make setup` installs
# the wheel with --no-deps; pyserini's Python dependencies are not needed).
BACKENDS = ("pisa", "anserini")
ANSERINI_VERSION = "0.22.1"
ANSERINI_STEMMERS = ("porter", "krovetz", "none")  # IndexCollection / SearchCollection -stemmer
JAVA_FIX = "apt-get install openjdk-17-jre-headless"
INDEX_TWICE = "the index holds that document twice; rebuild it from a collection whose document ids are unique"
SEARCH_BATCH = 20_000  # queries per SearchCollection call (one JVM each; progress is logged per batch)


class JavaMissing(RuntimeError):
    """No usable Java for Anserini; the message names the fix."""


def java_version(java: str | None = None) -> int | None:
    """The major version of ``java`` (default: the one on PATH), or None when there is none that runs."""
    import shutil
    import subprocess

    java = java or shutil.which("java")
    if not java:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if out.returncode != 0 or not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def check_java() -> str:
    """The path of a Java (11 or newer) that runs Anserini 0.22.1, or :class:`JavaMissing` naming the fix."""
    import shutil

    java = shutil.which("java")
    version = java_version(java) if java else None
    if version is None:
        raise JavaMissing(f"bm25.backend=anserini runs Anserini {ANSERINI_VERSION}, which needs Java 11 or 17, and "
                          f"there is no java on PATH; install it with `{JAVA_FIX}` (Debian/Ubuntu), or use "
                          "bm25.backend=pisa (no Java)")
    if version < 11:
        raise JavaMissing(f"bm25.backend=anserini runs Anserini {ANSERINI_VERSION}, which needs Java 11 or 17, but "
                          f"{java} is Java {version}; install a newer one with `{JAVA_FIX}`")
    return java


def anserini_jar() -> Path:
    """Anserini's fat jar: ``$LEAKEXP_ANSERINI_JAR``, else the one inside the installed pyserini package
    (``pip install --no-deps pyserini==0.22.1``, which `make setup` runs); found without importing pyserini."""
    import importlib.util

    env = os.environ.get("LEAKEXP_ANSERINI_JAR")
    if env:
        if not Path(env).is_file():
            raise FileNotFoundError(f"LEAKEXP_ANSERINI_JAR={env} is not a file; point it at "
                                    f"anserini-{ANSERINI_VERSION}-fatjar.jar or unset it")
        return Path(env)
    spec = importlib.util.find_spec("pyserini")
    jars = sorted(Path(spec.origin).parent.glob("resources/jars/anserini-*-fatjar.jar")) if spec and spec.origin else []
    if not jars:
        raise FileNotFoundError(f"bm25.backend=anserini needs Anserini {ANSERINI_VERSION}'s jar, which is not "
                                f"installed; run `make setup` (or `pip install --no-deps pyserini=={ANSERINI_VERSION}`"
                                ", a 140 MB wheel), or set LEAKEXP_ANSERINI_JAR to the jar")
    jar = jars[-1]
    if f"anserini-{ANSERINI_VERSION}-" not in jar.name:
        raise FileNotFoundError(f"{jar}: leakexp drives Anserini {ANSERINI_VERSION} (the last release for Java 11/17), "
                                f"not this one; `pip install --no-deps pyserini=={ANSERINI_VERSION}`")
    return jar


def check_anserini(stemmer: str, stopwords: str) -> None:
    """The analysis Anserini offers (``bm25.stemmer`` porter | krovetz | none; any ``bm25.stopwords``)."""
    if stemmer not in ANSERINI_STEMMERS:
        raise ValueError(f"bm25.stemmer={stemmer} is not one of Anserini's stemmers ({', '.join(ANSERINI_STEMMERS)}); "
                         "use bm25.stemmer=porter (Anserini's default) or bm25.backend=pisa")


def _anserini_analysis_args(stemmer: str, stopwords: str, folder: Path, *, search: bool) -> list[str]:
    """-stemmer and the stop list: lucene is Anserini's default, none keeps every word, terrier is a file."""
    args = ["-stemmer", stemmer]
    if stopwords == "none":
        args.append("-keepstopwords" if search else "-keepStopwords")
    elif stopwords == "terrier":
        f = Path(folder) / "stopwords.txt"
        if not f.exists():
            f.write_text("\n".join(sorted(_stop_set("terrier"))) + "\n")
        args += ["-stopwords", str(f)]
    return args


def _java(main: str, args: list[str], *, verbose: bool, what: str, jvm: tuple[str, ...] = ()) -> str:
    """Run one of Anserini's tools (``jvm``: options of the JVM); returns its log, which also goes to the terminal
    when ``verbose`` and into the error when it fails."""
    import subprocess

    java = check_java()
    cmd = [java, *jvm, "-cp", str(anserini_jar()), main, *args]
    log.debug("running %s", " ".join(cmd))
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            lines.append(line)
            if verbose:
                sys.stderr.write(line)
    if proc.returncode != 0:
        tail = "".join(lines[-15:]).rstrip("\n")
        raise RuntimeError(f"Anserini's {main.rsplit('.', 1)[-1]} failed ({what}), exit code {proc.returncode}:\n{tail}")
    return "".join(lines)


def write_anserini_index(out: Path, docs: Iterable[tuple[str, str]], *, threads: int = 2, verbose: bool = False,
                         stemmer: str = "porter", stopwords: str = "lucene", **_: object) -> dict:
    """Anserini (Lucene) index of ``docs`` (docno, text) in ``out/lucene``: JsonCollection files, one per thread,
    indexed by ``IndexCollection`` with the DefaultEnglishAnalyzer's stemmer and stop list."""
    check_analysis(stemmer, stopwords)
    check_anserini(stemmer, stopwords)
    check_java()
    out = Path(out)
    folder = out / "input"
    folder.mkdir(parents=True, exist_ok=True)
    parts = max(1, int(threads))
    files = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8") for i in range(parts)]
    count = 0
    try:
        for docno, text in docs:
            files[count % parts].write(json.dumps({"id": str(docno), "contents": text}, ensure_ascii=False) + "\n")
            count += 1
    finally:
        for f in files:
            f.close()
    log.info("indexing %d documents with Anserini %s (%d threads)", count, ANSERINI_VERSION, parts)
    _java("io.anserini.index.IndexCollection",
          ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator", "-input", str(folder),
           "-index", str(out / "lucene"), "-threads", str(parts),
           *_anserini_analysis_args(stemmer, stopwords, out, search=False)],
          verbose=verbose, what=f"indexing {count} documents")
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    (out / "analysis.json").write_text(json.dumps({"stemmer": stemmer, "stopwords": stopwords, "backend": "anserini",
                                                   "anserini": ANSERINI_VERSION}))
    return {"documents": count}


# The standard index of TREC Disks 4 & 5 (Robust04), as Anserini's regression builds it (castorini/anserini @
# anserini-0.22.1, docs/regressions/regressions-disk45.md lines 19-27: IndexCollection -collection TrecCollection
# -generator DefaultLuceneDocumentGenerator -threads 16 -storePositions -storeDocvectors -storeRaw; 528,030 documents,
# src/main/resources/regression/disk45.yaml lines 1-12). The SPIRE-22 authors searched such an index
# (webis-de/SPIRE-22 @ f3ab030, src/main/bash/run-baseline-retrieval.sh lines 5-14: /anserini-indexes/robust04,
# SearchCollection -bm25 -topicreader Trec -topics topics.robust04.txt).
TREC_INDEX_OPTIONS = ("-storePositions", "-storeDocvectors", "-storeRaw")
# TrecCollection reads a plain file with FileReader, i.e. the JVM's default charset (TrecCollection.java line 110;
# .z/.0z and .gz files as UTF-8, lines 100-108): UTF-8 whatever the machine's locale, as ir_datasets reads them.
TREC_JVM = ("-Dfile.encoding=UTF-8",)
_COUNTER = re.compile(r"^.*\b(indexed|unindexable|empty|skipped|errors):\s+([\d,]+)\s*$")


def index_counters(log_text: str) -> dict[str, int]:
    """IndexCollection's final counters (indexed, unindexable, empty, skipped, errors) from its log
    (IndexCollection.java lines 579-584); documents without content are ``empty`` and not indexed
    (DefaultLuceneDocumentGenerator.java lines 69-71)."""
    out = {}
    for line in log_text.splitlines():
        m = _COUNTER.match(line)
        if m:
            out[m.group(1)] = int(m.group(2).replace(",", ""))
    return out


def write_trec_index(out: Path, root: Path, files: list[Path], *, threads: int = 2, verbose: bool = False,
                     stemmer: str = "porter", stopwords: str = "lucene", **_: object) -> dict:
    """Anserini (Lucene) index in ``out/lucene`` of raw TREC SGML ``files`` (below ``root``) read by Anserini's own
    ``TrecCollection`` (its content tags, Jsoup's text; compressed .z/.0z/.gz files read as they are), the standard
    way (:data:`TREC_INDEX_OPTIONS`). Anserini is handed exactly ``files``, linked under their paths relative to
    ``root`` in a scratch folder: the files ir_datasets reads, so CR, read-me and DTD files stay out by the same rule.
    Returns the documents read and indexed, and IndexCollection's other counters."""
    check_analysis(stemmer, stopwords)
    check_anserini(stemmer, stopwords)
    check_java()
    out, root = Path(out), Path(root)
    folder = out / "input"
    for f in files:
        link = folder / Path(f).relative_to(root)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(f).resolve())
    log.info("indexing %d raw TREC files with Anserini %s's TrecCollection (%d threads)", len(files),
             ANSERINI_VERSION, threads)
    text = _java("io.anserini.index.IndexCollection",
                 ["-collection", "TrecCollection", "-generator", "DefaultLuceneDocumentGenerator", "-input",
                  str(folder), "-index", str(out / "lucene"), "-threads", str(max(1, int(threads))),
                  *TREC_INDEX_OPTIONS, *_anserini_analysis_args(stemmer, stopwords, out, search=False)],
                 verbose=verbose, what=f"indexing {len(files)} TREC files", jvm=TREC_JVM)
    import shutil

    shutil.rmtree(folder)
    counters = index_counters(text)
    if "indexed" not in counters:
        raise RuntimeError(f"Anserini's IndexCollection reported no document count for {root}; its log ends:\n"
                           + "\n".join(text.splitlines()[-10:]))
    (out / "analysis.json").write_text(json.dumps({"stemmer": stemmer, "stopwords": stopwords, "backend": "anserini",
                                                   "anserini": ANSERINI_VERSION, "collection": "TrecCollection"}))
    # documents: those read (as write_anserini_index counts those it hands over); an empty one is not indexed
    return {"documents": sum(counters.values()), "documents_indexed": counters["indexed"], "files": len(files),
            **{f"anserini_{k}": v for k, v in counters.items() if k != "indexed"}}


def _topic_text(text: str) -> str:
    return " ".join(str(text).split())  # one TSV line: no tab or newline


def anserini_search(index_path: Path, queries: pd.DataFrame, *, depth: int = 100, k1: float = 0.9, b: float = 0.4,
                    threads: int = 2, verbose: bool = False, stemmer: str = "porter", stopwords: str = "lucene",
                    batch: int = SEARCH_BATCH) -> pd.DataFrame:
    """Top-``depth`` BM25 of Anserini's ``SearchCollection`` (qid, docno, score, rank[0-based]) in Anserini's
    order (its own tie-breaking), topics in batches of ``batch`` queries, ``threads`` in parallel."""
    import pandas as pd

    import tempfile

    index_path = Path(index_path)
    q = queries[["qid", "query"]].assign(qid=queries.qid.astype(str), query=queries["query"].map(_topic_text))
    bad = [x for x in q.qid if not x or any(c.isspace() for c in x)]
    if bad:
        raise ValueError(f"query id {bad[0]!r} is empty or holds white space; Anserini's topic files cannot carry it")
    q = q[q["query"] != ""].drop_duplicates("qid")
    frames = []
    with tempfile.TemporaryDirectory(prefix="leakexp-anserini-") as tmp:
        tmp = Path(tmp)
        for start in range(0, len(q), batch):
            part = q.iloc[start:start + batch]
            topics, run = tmp / f"topics-{start}.tsv", tmp / f"run-{start}.txt"
            topics.write_text("".join(f"{a}\t{t}\n" for a, t in zip(part.qid, part["query"])), encoding="utf-8")
            _java("io.anserini.search.SearchCollection",
                  ["-index", str(index_path / "lucene"), "-topics", str(topics), "-topicreader", "TsvString",
                   "-output", str(run), "-bm25", "-bm25.k1", repr(float(k1)), "-bm25.b", repr(float(b)),
                   "-hits", str(int(depth)), "-parallelism", str(max(1, int(threads))), "-runtag", "leakexp",
                   *_anserini_analysis_args(stemmer, stopwords, tmp, search=True)],
                  verbose=verbose, what=f"searching {len(part)} queries")
            frames.append(read_run(run, ranks="file", duplicate_hint=INDEX_TWICE, empty_ok=True))
            if len(q) > batch:
                log.info("Anserini BM25: %d of %d queries", min(start + batch, len(q)), len(q))
    return (pd.concat(frames, ignore_index=True) if frames
            else pd.DataFrame({"qid": [], "docno": [], "score": [], "rank": []}).astype({"rank": "int64"}))


