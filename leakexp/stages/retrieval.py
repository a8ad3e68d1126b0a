"""BM25 first stage via PyTerrier + PISA (k1 = 0.9, b = 0.4 as Anserini's default; no Java).

One PISA index per document collection lives in the store. Runs are cached as Parquet artifacts: the
top-100 of every test topic (what the re-rankers re-rank) and of every training query (where negatives
are sampled from).

The analysis is config (``bm25.stemmer``, ``bm25.stopwords``). The paper re-ranks Capreolus' default BM25,
i.e. Anserini's ``DefaultEnglishAnalyzer``: Lucene's StandardTokenizer, EnglishPossessiveFilter, lower case,
Lucene's 33-word English stop list removed from documents and queries, and the original Porter stemmer
(capreolus-ir/capreolus, capreolus/index/anserini.py: ``AnseriniIndex`` ``stemmer="porter"``,
``indexstops=False``; capreolus/searcher/anserini.py: ``BM25`` k1 0.9, b 0.4, ``fields="title"``;
castorini/anserini, src/main/java/io/anserini/analysis/DefaultEnglishAnalyzer.java, ``newDefaultInstance``).
PISA has porter2 and Krovetz but no original Porter, so ``stemmer=porter`` analyses text here
(:func:`analyze`) and hands PISA the analysed terms with its own stemmer and stop list off. The other
stemmers are PISA's own; their stop list is then applied to queries only (PISA indexes every word).
An external first-stage run (e.g. the authors' Anserini BM25 runs of the Core tracks) is read with
:func:`read_trec_run`.
"""

from __future__ import annotations

from typing import Literal
import contextlib
import gzip
import json
import logging
import math
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pandas as pd

from leakexp.data.files import DataFormatError
from leakexp.stages.docstats import docstats_input, stats_figures
from leakexp.stages.sources import file_fingerprint
from leakexp.runner.stage import Ask, Config, Context, Stage
from leakexp.runner.schema import Fraction, NonNegativeFloat, PositiveInt, Section

log = logging.getLogger(__name__)

# PISA's query parser chokes on some punctuation; BM25 ignores it anyway.
_UNSAFE = re.compile(r"[^\w\s]", re.UNICODE)


def clean_query(text: str) -> str:
    return " ".join(_UNSAFE.sub(" ", text).split())


# -- analysis ------------------------------------------------------------------------------------------
STEMMERS = ("porter2", "porter", "krovetz", "none")
STOPWORDS = ("terrier", "lucene", "none")
DEFAULT_ANALYSIS = {"stemmer": "porter2", "stopwords": "terrier"}  # pyterrier-pisa's defaults
ANSERINI_ANALYSIS = {"stemmer": "porter", "stopwords": "lucene"}  # Anserini's / Capreolus' default (the paper)

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (apache/lucene, lucene/analysis/common/src/java/org/apache/
# lucene/analysis/en/EnglishAnalyzer.java), Anserini's default stop list; pyterrier-pisa's 'lucene' list is the same.
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)

# Lucene's StandardTokenizer (Unicode UAX #29 word boundaries), approximated: runs of letters, digits and
# underscores, joined by an apostrophe, a full stop or a colon between them ("U.S.", "don't") and by a
# comma between digits ("3,000"); hyphens and other punctuation separate words.
_TOKEN = re.compile(r"\w+(?:(?:['\u2019\uff07.:]|(?<=\d),(?=\d))\w+)*")
_POSSESSIVE = re.compile(r"['\u2019\uff07][sS]$")  # Lucene's EnglishPossessiveFilter
_PISA_SAFE = re.compile(r"[a-z0-9]+")


def check_analysis(stemmer: str, stopwords: str) -> None:
    """Fail early, naming the key, on an analysis leakexp does not offer."""
    if stemmer not in STEMMERS:
        raise ValueError(f"bm25.stemmer={stemmer!r} is unknown; use one of {', '.join(STEMMERS)}")
    if stopwords not in STOPWORDS:
        raise ValueError(f"bm25.stopwords={stopwords!r} is unknown; use one of {', '.join(STOPWORDS)}")


def _stop_set(stopwords: str) -> frozenset[str]:
    if stopwords == "lucene":
        return LUCENE_STOPWORDS
    if stopwords == "terrier":
        from pyterrier_pisa.stopwords import _STOPWORDS  # the list PISA itself uses for stops='terrier'

        return frozenset(_STOPWORDS["terrier"])
    return frozenset()


@lru_cache(maxsize=None)
def _stemmer(name: str):
    import snowballstemmer

    return snowballstemmer.stemmer({"porter2": "english"}[name])


@lru_cache(maxsize=1 << 20)
def _stem(word: str, stemmer: str) -> str:
    # Lucene's PorterStemmer leaves words of one or two characters alone (stem(): "if (k > k0 + 1)")
    if len(word) <= 2:
        return word
    return lucene_porter(word) if stemmer == "porter" else _stemmer(stemmer).stemWord(word)


def lucene_porter(word: str) -> str:
    """The original Porter stemmer as Lucene's ``PorterStemmer`` has it: Martin Porter's reference C code
    (tartarus.org/martin/PorterStemmer), whose two departures from the published algorithm Lucene keeps:
    step 2 maps ``bli``->``ble`` (not ``abli``->``able``) and ``logi``->``log`` (apache/lucene,
    lucene/analysis/common/src/java/org/apache/lucene/analysis/en/PorterStemmer.java). Snowball's ``porter``
    is the published algorithm and differs on these words (``possibly``: Lucene ``possibl``, Snowball
    ``possibli``; ``ecology``: ``ecolog`` / ``ecologi``). Checked against Lucene on 21,358 English words."""
    b = list(word)
    k = len(b) - 1
    if k <= 1:
        return word
    j = 0

    def cons(i: int) -> bool:
        c = b[i]
        if c in "aeiou":
            return False
        if c == "y":
            return i == 0 or not cons(i - 1)
        return True

    def m() -> int:  # consonant sequences between vowel sequences in b[0..j]
        n, i = 0, 0
        while True:
            if i > j:
                return n
            if not cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > j:
                    return n
                if cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > j:
                    return n
                if not cons(i):
                    break
                i += 1
            i += 1

    def vowel_in_stem() -> bool:
        return any(not cons(i) for i in range(j + 1))

    def doublec(i: int) -> bool:
        return i >= 1 and b[i] == b[i - 1] and cons(i)

    def cvc(i: int) -> bool:
        return i >= 2 and cons(i) and not cons(i - 1) and cons(i - 2) and b[i] not in "wxy"

    def ends(s: str) -> bool:
        nonlocal j
        if len(s) > k + 1 or "".join(b[k - len(s) + 1:k + 1]) != s:
            return False
        j = k - len(s)
        return True

    def setto(s: str) -> None:
        nonlocal k
        b[j + 1:] = list(s)
        k = j + len(s)

    def r(s: str) -> None:
        if m() > 0:
            setto(s)

    # step 1ab: plurals, -ed, -ing
    if b[k] == "s":
        if ends("sses"):
            k -= 2
        elif ends("ies"):
            setto("i")
        elif b[k - 1] != "s":
            k -= 1
    if ends("eed"):
        if m() > 0:
            k -= 1
    elif (ends("ed") or ends("ing")) and vowel_in_stem():
        k = j
        if ends("at"):
            setto("ate")
        elif ends("bl"):
            setto("ble")
        elif ends("iz"):
            setto("ize")
        elif doublec(k):
            k -= 1
            if b[k] in "lsz":
                k += 1
        else:
            j = k
            if m() == 1 and cvc(k):
                j = k
                setto("e")
    # step 1c: y -> i when there is another vowel in the stem
    if ends("y") and vowel_in_stem():
        b[k] = "i"
    # step 2: double suffixes; the first suffix that matches decides (C: break after ends())
    if k >= 1:
        for suffix, repl in _PORTER_STEP2.get(b[k - 1], ()):
            if ends(suffix):
                r(repl)
                break
    # step 3
    for suffix, repl in _PORTER_STEP3.get(b[k], ()):
        if ends(suffix):
            r(repl)
            break
    # step 4: drop a suffix when m() > 1
    if k >= 1:
        for suffix in _PORTER_STEP4.get(b[k - 1], ()):
            if ends(suffix):
                if suffix == "ion" and not (j >= 0 and b[j] in "st"):
                    continue
                if m() > 1:
                    k = j
                break
    # step 5: final -e and -ll
    j = k
    if b[k] == "e":
        a = m()
        if a > 1 or (a == 1 and not cvc(k - 1)):
            k -= 1
    if b[k] == "l" and doublec(k):
        if m() > 1:  # measured up to the k before step 5, as in the C code
            k -= 1
    return "".join(b[:k + 1])


_PORTER_STEP2 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),  # bli: departure
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),  # departure
}
_PORTER_STEP3 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
_PORTER_STEP4 = {
    "a": ("al",), "c": ("ance", "ence"), "e": ("er",), "i": ("ic",), "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"), "o": ("ion", "ou"), "s": ("ism",), "t": ("ate", "iti"), "u": ("ous",),
    "v": ("ive",), "z": ("ize",),
}


def analyze(text: str, stemmer: str = "porter", stopwords: str = "lucene") -> list[str]:
    """Terms of ``text`` under Anserini's analysis chain: tokenise (StandardTokenizer, approximated), drop
    a trailing possessive 's, lower-case, drop stop words, stem (``porter``: the original Porter stemmer,
    Lucene's PorterStemmer, :func:`lucene_porter`; ``porter2``: Snowball English; ``none``)."""
    check_analysis(stemmer, stopwords)
    if stemmer == "krovetz":
        raise ValueError("bm25.stemmer=krovetz is PISA's own; leakexp analyses text itself only for porter")
    stops = _stop_set(stopwords)
    out = []
    for token in _TOKEN.findall(text):
        word = _POSSESSIVE.sub("", token).lower()
        if not word or word in stops:
            continue
        out.append(word if stemmer == "none" else _stem(word, stemmer))
    return out


def pisa_term(term: str) -> str:
    """A term PISA's tokenizer keeps whole: ASCII letters and digits stay; anything else ("u.s", "café") is
    written as 'zzq' + its UTF-8 bytes in hex, the same way in documents and queries."""
    return term if _PISA_SAFE.fullmatch(term) else "zzq" + term.encode("utf-8").hex()


def analyzed_text(text: str, stemmer: str = "porter", stopwords: str = "lucene") -> str:
    """``text`` as the space-separated PISA terms of :func:`analyze`."""
    return " ".join(pisa_term(t) for t in analyze(text, stemmer, stopwords))


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


def _java(main: str, args: list[str], *, verbose: bool, what: str) -> None:
    """Run one of Anserini's tools; its log goes to the terminal when ``verbose``, else into the error."""
    import subprocess

    java = check_java()
    cmd = [java, "-cp", str(anserini_jar()), main, *args]
    log.debug("running %s", " ".join(cmd))
    out = subprocess.run(cmd, stdout=None if verbose else subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        tail = "\n".join((out.stdout or "").splitlines()[-15:])
        raise RuntimeError(f"Anserini's {main.rsplit('.', 1)[-1]} failed ({what}), exit code {out.returncode}:\n{tail}")


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


def _topic_text(text: str) -> str:
    return " ".join(str(text).split())  # one TSV line: no tab or newline


def anserini_search(index_path: Path, queries: pd.DataFrame, *, depth: int = 100, k1: float = 0.9, b: float = 0.4,
                    threads: int = 2, verbose: bool = False, stemmer: str = "porter", stopwords: str = "lucene",
                    batch: int = SEARCH_BATCH) -> pd.DataFrame:
    """Top-``depth`` BM25 of Anserini's ``SearchCollection`` (qid, docno, score, rank[0-based]) in Anserini's
    order (its own tie-breaking), topics in batches of ``batch`` queries, ``threads`` in parallel."""
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
            frames.append(read_anserini_run(run))
            if len(q) > batch:
                log.info("Anserini BM25: %d of %d queries", min(start + batch, len(q)), len(q))
    return (pd.concat(frames, ignore_index=True) if frames
            else pd.DataFrame({"qid": [], "docno": [], "score": [], "rank": []}).astype({"rank": "int64"}))


def read_anserini_run(path: Path) -> pd.DataFrame:
    """A run as SearchCollection writes it (``qid Q0 docno rank score tag``), in its order, rank 0-based. A document
    twice for one topic is an error naming the file and line (its index holds the document twice)."""
    rows, first_line = [], {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        r = line.split()
        if not r:
            continue
        if (r[0], r[2]) in first_line:
            dups = _duplicate_rows(path)
            raise DataFormatError(f"{path}:{n}: document {r[2]} appears twice for topic {r[0]} (first at line "
                                  f"{first_line[(r[0], r[2])]}; {dups:,} duplicate (topic, document) rows in the "
                                  f"file): the index holds that document twice; rebuild it from a collection whose "
                                  f"document ids are unique")
        first_line[(r[0], r[2])] = n
        rows.append((r[0], r[2], float(r[4]), int(r[3]) - 1))
    run = pd.DataFrame(rows, columns=["qid", "docno", "score", "rank"])
    return run.astype({"rank": "int64"})


def _duplicate_rows(path: Path) -> int:
    """Rows of a TREC run whose (topic, document) occurred on an earlier line (for the error's count)."""
    seen, dups = set(), 0
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        r = line.split()
        if len(r) >= 3:
            dups += (r[0], r[2]) in seen
            seen.add((r[0], r[2]))
    return dups


def refuse_duplicates(run: pd.DataFrame, source: str) -> pd.DataFrame:
    """``run`` unchanged if it holds each (topic, document) once; else an error naming ``source`` (where the run
    came from) and the first duplicate."""
    dup = run.duplicated(["qid", "docno"])
    if dup.any():
        first = run[dup].iloc[0]
        raise DataFormatError(f"{source}: document {first.docno} appears twice for topic {first.qid} "
                              f"({int(dup.sum()):,} duplicate (topic, document) rows of {len(run):,}): the index holds "
                              f"that document twice; rebuild it from a collection whose document ids are unique")
    return run


# -- stages ----------------------------------------------------------------------------------------------
BM25 = ("bm25.k1", "bm25.b", "bm25.stemmer", "bm25.stopwords", "bm25.backend")


def bm25_options(ctx: Context) -> dict:
    """BM25's parameters, analysis and backend (from the stage's config) and the runtime's threads and verbosity."""
    b = ctx.config["bm25"]
    return dict(k1=float(b["k1"]), b=float(b["b"]), stemmer=str(b["stemmer"]), stopwords=str(b["stopwords"]),
                backend=str(b.get("backend") or "pisa"),
                threads=int(ctx.runtime.get("threads", 2)), verbose=bool(ctx.runtime.get("verbose", False)))


def backend_identity(p: dict, c: Config):
    """What a stage's key records of the tool beside its settings: Anserini's release (None for PISA, whose
    version the environment pins)."""
    return {"anserini": ANSERINI_VERSION} if c.at("bm25.backend") == "anserini" else None


def _docs_input(name: str) -> Ask:
    return Ask.of("pool") if name == "train" else Ask.of("collection", corpus=name)


def _index(ctx: Context, tmp: Path) -> dict:
    docs = ctx.inputs["docs"].docs
    return {**write_index(tmp, iter(docs), **bm25_options(ctx)), **stats_figures(ctx.inputs["stats"])}


def check(cfg) -> None:
    """The BM25 analysis (``bm25.stemmer``, ``bm25.stopwords``), before any work."""
    from leakexp.runner.stage import ConfigError

    try:
        check_analysis(str(cfg.bm25.stemmer), str(cfg.bm25.stopwords))
        if str(cfg.bm25.get("backend", "pisa")) == "anserini":
            check_anserini(str(cfg.bm25.stemmer), str(cfg.bm25.stopwords))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


INDEX = Stage(
    # 2: leakexp's own analysis (analyze(), for stemmer=porter); 3: Lucene's Porter (bli->ble, logi->log), backend
    "index", version=3,
    reads=BM25, inputs=lambda p, c: {"docs": _docs_input(p["name"]), "stats": docstats_input(p["name"])},
    compute=_index, check=check,
    external=backend_identity,
    describe="BM25 index (PISA or Anserini, bm25.backend) of a test collection or of the training pool (name=train)",
)


BUNDLED_RUNS = Path(__file__).parents[1] / "data" / "runs"  # runs shipped with leakexp (see its README.md)
BUNDLED = "bundled:"


def _run_path(value: str) -> Path:
    """A run's path: ``bundled:<file>`` is a file of ``leakexp/data/runs/``, anything else a path."""
    value = str(value)
    return BUNDLED_RUNS / value.removeprefix(BUNDLED) if value.startswith(BUNDLED) else Path(value)


def first_stage_file(spec: str | Mapping | None, corpus: str) -> Path | None:
    """The external first-stage run that ``rerank.first_stage`` names for ``corpus`` (None: leakexp's BM25).

    A mapping names one run per corpus (``{core17: bundled:core17…gz}``); a corpus it lacks, or maps to null,
    gets leakexp's BM25. A value with ``{corpus}`` names one run per corpus; a plain path is one run, of the one
    corpus the grid re-ranks (``check_first_stage`` refuses it for a grid of several corpora).
    """
    if isinstance(spec, Mapping):
        spec = spec.get(corpus)
        return None if not spec else _run_path(spec)
    if not spec:
        return None
    return _run_path(str(spec).format(corpus=corpus)) if "{corpus}" in str(spec) else _run_path(spec)


def first_stage_caption(cfg, corpus: str) -> str:
    """What the models of ``corpus`` re-ranked, for a table's caption."""
    depth = int(cfg.rerank.depth)
    spec = cfg.rerank.get("first_stage")
    external = first_stage_file(dict(spec) if isinstance(spec, Mapping) else spec, corpus)
    if external is not None:
        who = ("the SPIRE-22 authors' Anserini BM25 run" if external.parent == BUNDLED_RUNS
               else "the external run")
        return f"First stage: the top-{depth} of {who} {external.name}"
    b = cfg.bm25
    tool = (f"Anserini {ANSERINI_VERSION}" if str(b.get("backend", "pisa")) == "anserini" else "PISA")
    return (f"First stage: the BM25 top-{depth} of {tool} (k1 {b.k1}, b {b.b}, stemmer {b.stemmer}, "
            f"stop words {b.stopwords})")


def check_first_stage(cfg) -> None:
    """A plain ``rerank.first_stage`` path is one corpus's run: the grid and the cell must re-rank that corpus
    alone (Core 2017's topics are a subset of Robust04's, so a wrong run would not be noticed by its topics)."""
    from leakexp.runner.stage import ConfigError

    spec = cfg.rerank.get("first_stage")
    if isinstance(spec, Mapping):  # a corpus it does not know would silently re-rank BM25: name it
        from leakexp.runner.config import corpus_names, options

        known = list(dict.fromkeys([*options("corpus"), *corpus_names(cfg)]))
        unknown = [str(k) for k in spec if str(k) not in known]
        if unknown:
            raise ConfigError(f"rerank.first_stage.{unknown[0]} names no corpus; the mapping's keys are corpora "
                              f"({', '.join(known)})")
        return
    if not spec or "{corpus}" in str(spec):
        return
    corpora = list(dict.fromkeys([*cfg.grid.corpora, cfg.corpus.name]))
    if corpora != [cfg.corpus.name]:
        raise ConfigError(f"rerank.first_stage={spec} is one run, for corpus={cfg.corpus.name}, but the grid also "
                          f"re-ranks {', '.join(c for c in corpora if c != cfg.corpus.name)}; name one run per "
                          f"corpus with a template such as 'runs/{{corpus}}.bm25.gz' or a mapping such as "
                          f"{{{cfg.corpus.name}: {spec}}}, or re-rank this corpus alone "
                          f"with grid.corpora=[{cfg.corpus.name}]")


def _first_stage_inputs(p: dict, c: Config) -> dict:
    inputs = {"topics": Ask.of("collection", corpus=p["corpus"])}
    if first_stage_file(c.at("rerank.first_stage"), p["corpus"]) is None:
        inputs["index"] = Ask.of("index", name=p["corpus"])
    return inputs


def _first_stage(ctx: Context, tmp: Path) -> dict:
    r = ctx.config["rerank"]
    topics = ctx.inputs["topics"].topics_frame(r["query_field"])
    external = first_stage_file(r.get("first_stage"), ctx.params["corpus"])
    if external is not None:
        run = read_trec_run(external, topics, depth=int(r["depth"]))
    else:
        opts = {k: v for k, v in bm25_options(ctx).items()}
        run = bm25_search(ctx.inputs["index"], topics, depth=int(r["depth"]), **opts)
    run.to_parquet(tmp / "run.parquet", index=False)
    return {"queries": int(run.qid.nunique()), "rows": len(run)}


def _first_stage_reads(p: dict, cuda: bool) -> tuple[str, ...]:
    return ("rerank.query_field", "rerank.depth", "rerank.first_stage", *BM25)


FIRST_STAGE = Stage(
    "firststage", version=1, reads=_first_stage_reads, inputs=_first_stage_inputs, compute=_first_stage,
    external=lambda p, c: (lambda f: None if f is None else file_fingerprint(f))(
        first_stage_file(c.at("rerank.first_stage"), p["corpus"])),
    opener=lambda path: pd.read_parquet(path / "run.parquet"), check=check_first_stage,
    describe="the first-stage top-k of every topic of a corpus that the models re-rank",
)


def _run_lines(path: Path) -> list[str]:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run file")
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); a TREC "
                              f"run has lines 'qid Q0 docno rank score tag'") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise DataFormatError(f"{path}: the run is empty; pass a TREC run file (qid Q0 docno rank score tag)")
    return lines


def read_trec_run(path: Path, topics: pd.DataFrame | list[str] | None = None, *,
                  depth: int | None = None) -> pd.DataFrame:
    """A first-stage run in TREC format (``qid Q0 docno rank score tag``, plain or gzipped) as the frame
    :func:`bm25_run` returns: qid, query (when ``topics`` is a (qid, query) frame), docno, score, rank (0-based).

    Each topic's documents are ranked by score, ties by ascending docno (the file's own rank column is
    not used), and cut to ``depth``. A topic id that is not one of ``topics`` is an error (the run of
    another corpus?); topics the run lacks are logged and get no documents.
    """
    path = Path(path)
    rows, first_line = [], {}
    for n, line in enumerate(_run_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6:
            raise DataFormatError(f"{path}:{n}: expected 6 fields 'qid Q0 docno rank score tag', got {len(fields)}")
        qid, _, docno, _, score, _ = fields
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise DataFormatError(f"{path}:{n}: score {score!r} is not a finite number")
        if (qid, docno) in first_line:
            raise DataFormatError(f"{path}:{n}: document {docno} appears twice for topic {qid} "
                                  f"(first at line {first_line[(qid, docno)]})")
        first_line[(qid, docno)] = n
        rows.append((qid, docno, value))
    run = pd.DataFrame(rows, columns=["qid", "docno", "score"])
    order = list(dict.fromkeys(run.qid))
    frame = None
    if topics is not None:
        frame = topics if isinstance(topics, pd.DataFrame) else pd.DataFrame({"qid": list(topics)})
        frame = frame.assign(qid=frame.qid.astype(str))
        known = list(dict.fromkeys(frame.qid))
        unknown = [q for q in order if q not in set(known)]
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise DataFormatError(f"{path}: {len(unknown)} topic id(s) of the run are not topics of this corpus "
                                  f"({shown}); is it the run of another corpus?")
        missing = [q for q in known if q not in set(order)]
        if missing:
            log.warning("%s: no documents for %d topic(s) (%s)", path, len(missing), ", ".join(missing[:10]))
        order = known
    run = run.assign(_pos=run.qid.map({q: i for i, q in enumerate(order)}))
    run = run.sort_values(["_pos", "score", "docno"], ascending=[True, False, True], kind="mergesort")
    run["rank"] = run.groupby("qid", sort=False).cumcount().astype("int64")
    if depth is not None:
        run = run[run["rank"] < int(depth)]
    run = run.drop(columns="_pos").reset_index(drop=True)
    if frame is not None and "query" in frame.columns:
        run = run.merge(frame[["qid", "query"]].drop_duplicates("qid"), on="qid", how="left")
        return run[["qid", "query", "docno", "score", "rank"]]
    return run[["qid", "docno", "score", "rank"]]


class BM25Settings(Section):
    """``bm25``: the first stage's BM25 and its analysis (one per store: indexes, runs and negatives read it)."""

    k1: NonNegativeFloat
    b: Fraction
    stemmer: Literal["porter2", "porter", "krovetz", "none"]
    stopwords: Literal["terrier", "lucene", "none"]
    depth: PositiveInt
    threads: PositiveInt
    backend: Literal["pisa", "anserini"]

    def files(self) -> list[tuple[str, Path]]:
        """Anserini's jar, and a Java that runs it, before a run that computes (one error naming the fix)."""
        if self.backend != "anserini":
            return []
        from leakexp.runner.stage import ConfigError

        try:
            check_java()
            return [("bm25.backend=anserini (Anserini's jar)", anserini_jar())]
        except (JavaMissing, FileNotFoundError) as exc:
            raise ConfigError(str(exc)) from None


class RerankSettings(Section):
    """``rerank``: which first stage the models re-rank, how deep, with which topic field."""

    query_field: Literal["title", "description", "narrative"]
    depth: PositiveInt
    first_stage: dict[str, str | None] | str | None  # corpus -> run (null: BM25), one run, or a '{corpus}' template

    def files_for(self, corpora: list[str]) -> list[tuple[str, Path]]:
        return [("rerank.first_stage", f) for f in dict.fromkeys(first_stage_file(self.first_stage, c) for c in corpora)
                if f is not None]


def run_overlap(a: pd.DataFrame, b: pd.DataFrame, depth: int = 100) -> pd.DataFrame:
    """Per topic of either run, how far two first-stage runs (qid, docno, rank 0-based) agree in their top
    ``depth``: the share of shared documents (|A ∩ B| / depth-or-fewer), the top-10 overlap, and the share of
    ranks holding the same document. What a re-ranker sees differs exactly where these fall below 1."""
    rows = []
    for qid in sorted(set(a.qid.astype(str)) | set(b.qid.astype(str))):
        x = a[a.qid.astype(str) == qid].sort_values("rank").docno.astype(str).tolist()[:depth]
        y = b[b.qid.astype(str) == qid].sort_values("rank").docno.astype(str).tolist()[:depth]
        n = max(len(x), len(y), 1)
        top = max(min(10, n), 1)
        rows.append({"qid": qid, "a": len(x), "b": len(y), "shared": len(set(x) & set(y)) / n,
                     "top10_shared": len(set(x[:10]) & set(y[:10])) / top,
                     "same_rank": sum(1 for i, d in enumerate(x) if i < len(y) and y[i] == d) / n})
    return pd.DataFrame(rows, columns=["qid", "a", "b", "shared", "top10_shared", "same_rank"])
