"""Miniature raw corpora in the very files and formats ir_datasets 0.6.3 reads, for tests without the licensed data.

``write_corpora(home, seed)`` writes, under an ``IR_DATASETS_HOME``, what ir_datasets' dataset modules expect at the
paths their ``etc/downloads.json`` entries name (``cache_path``): a file that exists there is used as is, without a
download or an md5 check (``ir_datasets/util/download.py``, ``Download.path``, lines 252-263). Each corpus holds tens
of documents and the hazards of the real archives:

- WaPo v2 (``wapo/WashingtonPost.v2.tar.gz``, JSON lines in ``WashingtonPost.v2/data/TREC_Washington_Post_collection
  .v2.jl``, ``datasets/wapo.py`` lines 161-171): ``sanitized_html`` paragraphs of mime text/html with and without
  markup, mixed content (``<span>NEW ORLEANS —</span> Whenever a …``), entities, a text/plain paragraph, ``null``
  entries and ``null`` contents, kicker, title, byline and date entries, images, tweets and videos.
- NYT (``nyt/nyt.tgz``: a tgz of monthly ``.tgz`` files of NITF XML articles, ``datasets/nyt.py`` lines 70-90):
  headline, lead paragraph, full text; articles without a full text; one with its paragraphs on one line.
- TREC Disks 4 & 5 (``disks45/corpus/NEWS_data/…``, ``datasets/disks45.py`` lines 44-52): FBIS, FR94, FT and LATIMES
  SGML in 2,295 files as the globs expect (``expected_file_count=2295``; most are empty here), plus files the globs
  skip (read-me and DTD files, the Congressional Record that ``nocr`` leaves out).
- MS MARCO documents (``msmarco-document/collection.tsv.gz``: the TREC-format ``msmarco-docs.trec.gz`` despite its
  name, ``datasets/msmarco_document.py`` lines 43-58), train and ORCAS queries and qrels; ids shared by the two
  sources with different texts.
- Robust04, Core 2017 and Core 2018 topics and qrels, a Robust04 topic without a relevant judgment (as 672).

``ARCHIVE`` (filled by ``write_corpora``) is not needed by the tests: they recompute each document's text from the
raw files with their own parser, independent of ir_datasets and of leakexp.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import tarfile
from pathlib import Path

import pytest

WORDS = ("river council budget school storm vaccine election court harbor museum railway drought senator tariff "
         "bridge hospital orchestra festival satellite wildfire pension reactor treaty glacier airport factory "
         "library protest merger mayor strike virus ferry tunnel refinery embassy stadium bakery vineyard monsoon "
         "inflation border customs cathedral ministry harvest tanker quarry canal highway telescope").split()
STOP = "the a of to in and on for with by at from".split()

WAPO_FILE = "WashingtonPost.v2/data/TREC_Washington_Post_collection.v2.jl"


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) if rng.random() < 0.7 else rng.choice(STOP) for _ in range(n))


def _add_tar(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 1_500_000_000
    tar.addfile(info, io.BytesIO(data))


def _tgz(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data in members:
            _add_tar(tar, name, data)
    return buf.getvalue()


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


# -- Washington Post v2 ------------------------------------------------------------------------------------------
def _wapo_doc(rng: random.Random, i: int, doc_id: str | None = None) -> dict:
    """One article of the WaPo v2 JSON-lines format (the fields ir_datasets' WapoDocs reads, and some it skips)."""
    title = _sentence(rng, rng.randint(4, 9))
    contents: list = [{"content": title, "mime": "text/plain", "type": "title"},
                      {"content": "By " + _sentence(rng, 2), "mime": "text/plain", "type": "byline"},
                      {"content": 1483228800000 + i, "mime": "text/plain", "type": "date"}]
    if i % 3 == 0:
        contents.insert(0, {"content": rng.choice(["Politics", "Local", "World"]), "mime": "text/plain",
                            "type": "kicker"})
    for k in range(rng.randint(3, 14)):
        words = _sentence(rng, rng.randint(15, 45))
        kind = (i + k) % 7
        if kind == 0:  # mixed content: lxml-xml keeps only the first element's text
            html = f'<span class="dateline">NEW ORLEANS —</span> {words}'
        elif kind == 1:  # links and emphasis inside a paragraph, an entity
            a, b = words.split(" ", 1)
            html = f'{a} <a href="https://www.washingtonpost.com/x">{b}</a> &amp; <em>more</em> news'
        elif kind == 2:  # a word split by inline markup
            html = f"<b>Wash</b>ington {words}"
        elif kind == 3:
            html = f"<p>{words}</p>"
        else:  # a paragraph without markup: lxml-xml returns ''
            html = words
        contents.append({"content": html, "mime": "text/html", "type": "sanitized_html", "subtype": "paragraph"})
        if k == 1 and i % 4 == 0:
            contents.append(None)
            contents.append({"content": None, "mime": "text/html", "type": "sanitized_html"})
        if k == 2 and i % 5 == 0:
            contents.append({"type": "image", "imageURL": f"https://img.wapo/{i}.jpg",
                             "fullcaption": "caption " + _sentence(rng, 6), "imageHeight": 300, "imageWidth": 400})
        if k == 2 and i % 6 == 1:
            contents.append({"type": "tweet", "content": {"id_str": str(900 + i), "user": {"screen_name": "wapo"},
                                                          "text": "tweet " + _sentence(rng, 8)}})
        if k == 3 and i % 7 == 2:
            contents.append({"type": "video", "contenturl": f"https://video.wapo/{i}", "blurb": "blurb words"})
    if i % 8 == 5:
        contents.append({"content": "plain text paragraph " + _sentence(rng, 10), "mime": "text/plain",
                         "type": "sanitized_html", "subtype": "paragraph"})
    ident = f"wapo-{i:04d}-{rng.randrange(16 ** 6):06x}" if doc_id is None else doc_id
    return {"id": ident, "article_url": f"https://www.washingtonpost.com/{i}",
            "title": title, "author": "Staff", "published_date": 1483228800000 + i, "type": "article",
            "source": "The Washington Post", "contents": contents}


def _write_wapo(home: Path, rng: random.Random, n: int, extra_ids: tuple[str, ...] = ()) -> list[str]:
    docs = [_wapo_doc(rng, i) for i in range(n)]
    docs += [_wapo_doc(rng, n + k, doc_id) for k, doc_id in enumerate(extra_ids)]
    lines = "".join(json.dumps(d) + "\n" for d in docs).encode()
    (home / "wapo").mkdir(parents=True, exist_ok=True)
    (home / "wapo" / "WashingtonPost.v2.tar.gz").write_bytes(
        _tgz([("WashingtonPost.v2/README.txt", b"readme\n"), (WAPO_FILE, lines)]))
    return [d["id"] for d in docs]


# -- New York Times ----------------------------------------------------------------------------------------------
def _nyt_xml(rng: random.Random, guid: int, *, body: bool, compact: bool) -> bytes:
    headline = _sentence(rng, rng.randint(4, 10)).upper()
    paras = [_sentence(rng, rng.randint(20, 60)) for _ in range(rng.randint(3, 9))]
    sep = "" if compact else "\n        "
    full = ('      <block class="full_text">\n        ' + sep.join(f"<p>{p}</p>" for p in paras)
            + "\n      </block>\n") if body else ""
    lead = f'      <block class="lead_paragraph">\n        <p>{paras[0]}</p>\n      </block>\n' if body else ""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE nitf SYSTEM "http://www.nitf.org/IPTC/NITF/3.3/specification/dtd/nitf-3-3.dtd">
<nitf change.date="June 10, 2005" change.time="19:30" version="-//IPTC//DTD NITF 3.3//EN">
  <head>
    <title>{headline.title()}</title>
    <meta content="1" name="publication_day_of_month"/>
    <docdata>
      <doc-id id-string="{guid}"/>
      <doc.copyright holder="The New York Times" year="2005"/>
    </docdata>
    <pubdata date.publication="20050101T000000" ex-ref="http://query.nytimes.com/{guid}" item-length="500"/>
  </head>
  <body>
    <body.head>
      <hedline>
        <hl1>{headline}</hl1>
        <hl2 class="online_headline">{headline.title()} Online</hl2>
      </hedline>
      <byline class="print_byline">By A. Reporter</byline>
      <abstract>
        <p>abstract {_sentence(rng, 8)}</p>
      </abstract>
    </body.head>
    <body.content>
{lead}{full}    </body.content>
    <body.end>
      <tagline class="author_info">tagline words</tagline>
    </body.end>
  </body>
</nitf>
""".encode()


def _write_nyt(home: Path, rng: random.Random, n: int, extra_ids: tuple[str, ...] = ()) -> list[str]:
    months: dict[str, list[tuple[str, bytes]]] = {}
    ids = []
    for i in range(n + len(extra_ids)):
        guid = 1_600_000 + i * 7 if i < n else int(extra_ids[i - n])
        month = f"{1 + i % 3:02d}"
        xml = _nyt_xml(rng, guid, body=i % 9 != 4, compact=i == 2)
        months.setdefault(month, []).append((f"{month}/{1 + i % 28:02d}/{guid}.xml", xml))
        ids.append(str(guid))
    outer = [("nyt_corpus/docs/README.txt", b"the NYT annotated corpus\n")]
    outer += [(f"nyt_corpus/data/2005/{m}.tgz", _tgz(files)) for m, files in sorted(months.items())]
    (home / "nyt").mkdir(parents=True, exist_ok=True)
    (home / "nyt" / "nyt.tgz").write_bytes(_tgz(outer))
    return ids


# -- TREC Disks 4 & 5 (no CR) ------------------------------------------------------------------------------------
def _fbis(rng: random.Random, docno: str) -> str:
    return (f"<DOC>\n<DOCNO> {docno} </DOCNO>\n<HT>  \"cr00000011094001\" </HT>\n<HEADER>\n<H2>   March Reports </H2>\n"
            f"<DATE1>  1 March 1994 </DATE1>\nArticle Type:FBIS\n<H3> <TI>      {_sentence(rng, 6).upper()} </TI></H3>\n"
            f"</HEADER>\n<TEXT>\nLanguage: <F P=105>Macedonian </F>\nArticle Type:BFN\n\n"
            f"[Text] {_sentence(rng, 40)}\n{_sentence(rng, 50)}\n</TEXT>\n</DOC>\n")


def _fr94(rng: random.Random, docno: str, empty: bool = False) -> str:
    if empty:  # no content element at all: an empty document
        return f"<DOC>\n<DOCNO> {docno} </DOCNO>\n<PARENT> {docno} </PARENT>\n</DOC>\n"
    return (f"<DOC>\n<DOCNO> {docno} </DOCNO>\n<PARENT> {docno} </PARENT>\n<TEXT>\n \n<!-- PJG FTAG 4700 -->\n \n"
            f"<!-- PJG STAG 4700 -->\n\n<!-- PJG ITAG l=90 g=1 f=1 -->\n<USDEPT>Department of Agriculture</USDEPT>\n"
            f"<!-- PJG /ITAG -->\n\n{_sentence(rng, 60)} &amp; {_sentence(rng, 30)}\n\n<!-- PJG 0012 frnewline -->\n"
            f"{_sentence(rng, 40)}\n</TEXT>\n</DOC>\n")


def _ft(rng: random.Random, docno: str) -> str:
    return (f"<DOC>\n<DOCNO>{docno}</DOCNO>\n<PROFILE>AN-BEOA7AAIFT</PROFILE>\n<DATE>910514\n</DATE>\n<HEADLINE>\n"
            f"FT  14 MAY 91 / {_sentence(rng, 8)}\n</HEADLINE>\n<BYLINE>\nBy DAVID GOODHART\n</BYLINE>\n<TEXT>\n"
            f"{_sentence(rng, 45)}\n{_sentence(rng, 45)}\n</TEXT>\n<PUB>The Financial Times\n</PUB>\n<PAGE>\n"
            f"International Page 21\n</PAGE>\n</DOC>\n")


def _latimes(rng: random.Random, docno: str, n: int) -> str:
    return (f"<DOC>\n<DOCNO> {docno} </DOCNO>\n<DOCID> {n} </DOCID>\n<DATE>\n<P>\nJanuary 1, 1989, Sunday, Home Edition\n"
            f"</P>\n</DATE>\n<SECTION>\n<P>\nBook Review; Page 1; Book Review Desk\n</P>\n</SECTION>\n<LENGTH>\n<P>\n"
            f"1206 words\n</P>\n</LENGTH>\n<HEADLINE>\n<P>\n{_sentence(rng, 7).upper()}\n</P>\n</HEADLINE>\n"
            f"<BYLINE>\n<P>\nBy JACK MILES\n</P>\n</BYLINE>\n<TEXT>\n<P>\n{_sentence(rng, 40)}\n</P>\n<P>\n"
            f"{_sentence(rng, 35)}\n</P>\n</TEXT>\n<TYPE>\n<P>\nReview\n</P>\n</TYPE>\n</DOC>\n")


DISKS45_FILES = {"FBIS": 490, "FR94": 263, "FT": 812, "LATIMES": 730}  # 2,295 files, as disks45.py expects


def _write_disks45(home: Path, rng: random.Random, per_source: int) -> list[str]:
    root = home / "disks45" / "corpus" / "NEWS_data"
    ids: list[str] = []
    paths: dict[str, list[Path]] = {}
    paths["FBIS"] = [root / "FBIS" / f"FB396{k + 1:03d}" for k in range(DISKS45_FILES["FBIS"])]
    paths["FR94"] = [root / "FR94" / f"{1 + k % 12:02d}" / f"FR94{1 + k % 12:02d}{1 + k // 12:02d}.{k % 3}"
                     for k in range(DISKS45_FILES["FR94"])]
    paths["FT"] = [root / "FT" / f"FT9{11 + k % 34}" / f"FT9{11 + k % 34}_{1 + k // 34}"
                   for k in range(DISKS45_FILES["FT"])]
    paths["LATIMES"] = [root / "LATIMES" / f"LA{1 + k % 12:02d}{1 + k // 24:02d}{89 + k % 24 // 12}"
                        for k in range(DISKS45_FILES["LATIMES"])]
    for source, files in paths.items():
        assert len(set(files)) == len(files), source
        for f in files:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.touch()
        for j in range(per_source):  # documents in a few files, two per file
            f = files[j // 2 * 7]
            if source == "FBIS":
                docno, text = f"FBIS3-{100 + j}", _fbis(rng, f"FBIS3-{100 + j}")
            elif source == "FR94":
                docno = f"FR940104-0-{j:05d}"
                text = _fr94(rng, docno, empty=j == 3)
            elif source == "FT":
                docno, text = f"FT911-{j + 1}", _ft(rng, f"FT911-{j + 1}")
            else:
                docno, text = f"LA010189-{j + 1:04d}", _latimes(rng, f"LA010189-{j + 1:04d}", j + 1)
            with f.open("a", encoding="utf-8") as out:
                out.write(text)
            ids.append(docno)
    # files the globs must skip: read-me and DTD files, and the Congressional Record (nocr)
    for name, text in (("FBIS/READMEFB", "FBIS read me\n"), ("LATIMES/READMELA", "LA read me\n"),
                       ("FR94/READMEFR", "FR read me\n"), ("DTDS/FTDTD", "<!ELEMENT DOC - - (DOCNO)>\n"),
                       ("CR/CR93E1", _fbis(rng, "CR93E1-1").replace("FBIS", "CR"))):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return ids


# -- MS MARCO documents, train and ORCAS ---------------------------------------------------------------------------
def _write_msmarco(home: Path, rng: random.Random, n: int,
                   extra: dict[str, list[tuple[str, str, int]]] | None = None) -> list[str]:
    """``extra``: per source, more queries (qid, text, index of its relevant document) after the generated ones."""
    d = home / "msmarco-document"
    (d / "train").mkdir(parents=True, exist_ok=True)
    (d / "orcas").mkdir(parents=True, exist_ok=True)
    ids, docs = [], []
    for i in range(n):
        docno = f"D{1_555_982 + i * 13}"
        title = "" if i == 6 else _sentence(rng, rng.randint(3, 8))  # a document without a title
        body = " ".join(_sentence(rng, rng.randint(30, 120)) for _ in range(rng.randint(1, 4)))
        docs.append(f"<DOC>\n<DOCNO>{docno}</DOCNO>\n<TEXT>\nhttps://www.example.org/{i}/page.html\n{title}\n{body}\n"
                    f"</TEXT>\n</DOC>\n")
        ids.append(docno)
    (d / "collection.tsv.gz").write_bytes(_gz("".join(docs).encode()))
    msmarco = {str(1000 + i): "what is " + _sentence(rng, 4) for i in range(n)}
    orcas = {str(1000 + i): _sentence(rng, 3) for i in range(0, n, 2)}  # the same ids, other texts
    extra = extra or {}
    more = {s: "".join(f"{q}\t{t}\n" for q, t, _ in extra.get(s, ())) for s in ("msmarco", "orcas")}
    more_qrels = {s: "".join(f"{q} {'0' if s == 'msmarco' else 'Q0'} {ids[k]} 1\n" for q, _, k in extra.get(s, ()))
                  for s in ("msmarco", "orcas")}
    (d / "train" / "queries.tsv.gz").write_bytes(_gz(("".join(f"{q}\t{t}\n" for q, t in msmarco.items())
                                                      + more["msmarco"]).encode()))
    (d / "train" / "qrels.gz").write_bytes(_gz(("".join(f"{q} 0 {ids[k]} 1\n" for k, q in enumerate(msmarco))
                                                + more_qrels["msmarco"]).encode()))
    (d / "orcas" / "queries.tsv.gz").write_bytes(_gz(("".join(f"{q}\t{t}\n" for q, t in orcas.items())
                                                      + more["orcas"]).encode()))
    (d / "orcas" / "qrels.gz").write_bytes(_gz(("".join(f"{q} Q0 {ids[(k * 3) % n]} 1\n" for k, q in enumerate(orcas))
                                                + more_qrels["orcas"]).encode()))
    return ids


# -- topics and qrels ----------------------------------------------------------------------------------------------
def _topic_texts(rng: random.Random, qids: list[str], texts: dict | None) -> list[tuple[str, str, str, str]]:
    """(qid, title, description, narrative) per topic: ``texts[qid]`` where given, else drawn from ``rng``."""
    if texts is not None:
        return [(q, *texts[q]) for q in qids]
    return [(q, _sentence(rng, 3), _sentence(rng, 12), _sentence(rng, 20)) for q in qids]


def _classic_topics(rng: random.Random, qids: list[str], texts: dict | None = None) -> str:
    """TREC topics as 04.testset and core_nist.txt write them (ir_datasets' TrecQueries, DEFAULT_QTYPE_MAP)."""
    return "".join(f"<top>\n\n<num> Number: {q}\n<title> {t}\n\n<desc> Description:\n"
                   f"{d}\n\n<narr> Narrative:\n{n}\n\n</top>\n\n\n" for q, t, d, n in _topic_texts(rng, qids, texts))


def _core18_topics(rng: random.Random, qids: list[str], texts: dict | None = None) -> str:
    """topics2018.txt's layout: closing tags, the title on its own line (wapo.py RM_TAGS)."""
    return "".join(f"<top>\n\n<num> Number: {q} </num>\n<title>\n{t}\n</title>\n\n<desc>\n"
                   f"{d}\n</desc>\n\n<narr>\n{n}\n</narr>\n</top>\n\n" for q, t, d, n in _topic_texts(rng, qids, texts))


def _qrels(rng: random.Random, qids: list[str], docnos: list[str], *, no_relevant: str | None = None) -> str:
    lines = []
    for q in qids:
        for d in rng.sample(docnos, min(6, len(docnos))):
            rel = 0 if q == no_relevant else rng.choice([0, 0, 1, 2])
            lines.append(f"{q} 0 {d} {rel}\n")
    return "".join(lines)


def write_corpora(home: Path, seed: int = 0, *, docs: int = 30) -> dict:
    """Write every corpus, topics and qrels under ``home`` (an IR_DATASETS_HOME); returns the ids per corpus."""
    rng = random.Random(seed)
    home = Path(home)
    ids = {"wapo": _write_wapo(home, rng, docs), "nyt": _write_nyt(home, rng, docs),
           "disks45": _write_disks45(home, rng, max(4, docs // 4)), "msmarco": _write_msmarco(home, rng, docs)}
    robust = [str(q) for q in (301, 302, 303, 672)]  # 672: judged, none relevant (as Robust04's)
    (home / "disks45" / "04.testset.gz").write_bytes(_gz(_classic_topics(rng, robust).encode()))
    (home / "disks45" / "qrels.robust2004.txt").write_text(
        _qrels(rng, robust, ids["disks45"], no_relevant="672"))
    core17 = ["307", "310", "321"]
    (home / "nyt" / "trec-core-2017").mkdir(exist_ok=True)
    (home / "nyt" / "trec-core-2017" / "queries.txt").write_text(_classic_topics(rng, core17))
    (home / "nyt" / "trec-core-2017" / "qrels").write_text(_qrels(rng, core17, ids["nyt"]))
    core18 = ["321", "336", "341"]
    (home / "wapo" / "trec-core-2018").mkdir(exist_ok=True)
    (home / "wapo" / "trec-core-2018" / "queries.txt").write_text(_core18_topics(rng, core18))
    (home / "wapo" / "trec-core-2018" / "qrels").write_text(_qrels(rng, core18, ids["wapo"]))
    return ids


# -- the paper's setting in miniature: planted leaks, query variants, the authors' Core runs ----------------------
PAPER_RUNS = {"core17": "core17.bm25-anserini.top100.run.gz", "core18": "core18.bm25-anserini.top100.run.gz"}
ROBUST04_TOPICS = ["301", "302", "303", "672"]
REUSED_WITH_OTHER_TEXT = "321"  # a Core 2018 topic id of Core 2017 with another text; the other reused ids keep theirs
# The training queries planted near a topic, and the labels an annotator gives them (the study's label set). Forms:
# identical (the title), question ("what is the <title>"), swap (the title's first two words swapped), variant (the
# topic's first query variant, far from its title: found through the variant field only). With all-MiniLM-L6-v2 each
# form is above 0.91 and every other generated query below it; "Different Topic" marks a false candidate. Core 2018's
# 336 and 341 are Core 2017's topics too (same text): their candidates count for both corpora.
PLANTS = (
    ("robust04", "301", "msmarco", "identical", ("Title-Identical", "Variant-Reformulation")),
    ("robust04", "301", "orcas", "question", ("Title-Reformulation",)),
    ("robust04", "302", "orcas", "variant", ("Title-Generalization", "Variant-Identical")),
    ("robust04", "303", "msmarco", "swap", ("Different Topic",)),
    ("robust04", "672", "orcas", "identical", ("Title-Identical",)),  # a leak of the topic without relevant judgments
    ("core17", "307", "msmarco", "question", ("Title-Specialization",)),
    ("core17", "307", "orcas", "swap", ("Different Topic",)),
    ("core17", "310", "orcas", "identical", ("Title-Identical",)),
    ("core17", "321", "msmarco", "variant", ("Title-Generalization", "Variant-Identical")),
    ("core18", "321", "msmarco", "identical", ("Title-Identical",)),
    ("core18", "336", "orcas", "swap", ("Title-Reformulation",)),
    ("core18", "336", "msmarco", "variant", ("Title-Specialization", "Variant-Identical")),
    ("core18", "341", "msmarco", "question", ("Different Topic",)),
    ("core18", "801", "orcas", "identical", ("Title-Identical",)),
)


def _runs(depth: int) -> dict[str, dict[str, list[str]]]:
    """Per Core corpus, the authors' bundled run (leakexp/data/runs/): topic -> its documents down to rank ``depth``."""
    from leakexp.stages.firststage import BUNDLED_RUNS

    out: dict[str, dict[str, list[str]]] = {}
    for corpus, name in PAPER_RUNS.items():
        run = out.setdefault(corpus, {})
        for line in gzip.decompress((BUNDLED_RUNS / name).read_bytes()).decode().splitlines():
            qid, _, docno, rank, _, _ = line.split()
            run.setdefault(qid, [])
            if int(rank) <= depth:
                run[qid].append(docno)
    return out


def _judged(rng: random.Random, qids: list[str], pools: dict[str, list[str]], *, no_relevant: str = "") -> str:
    """Qrels with a relevant and a judged non-relevant document for every topic but ``no_relevant``."""
    lines = []
    for q in qids:
        docs = rng.sample(pools[q], min(8, len(pools[q])))
        labels = [2, 1, 0] + [rng.choice([0, 0, 1]) for _ in docs[3:]]
        lines += [f"{q} 0 {d} {0 if q == no_relevant else rel}\n" for d, rel in zip(docs, labels)]
    return "".join(lines)


def _phrases(rng: random.Random, n: int) -> list[list[str]]:
    """``n`` three-word phrases of which no two share a pair of words: a query planted near one is near no other."""
    pairs: set[frozenset] = set()
    out = []
    while len(out) < n:
        words = rng.sample(WORDS, 3)
        mine = {frozenset((a, b)) for i, a in enumerate(words) for b in words[i + 1:]}
        if not mine & pairs:
            pairs |= mine
            out.append(words)
    return out


def write_paper_corpora(home: Path, seed: int = 0, *, docs: int = 30, run_depth: int = 5) -> dict:
    """The corpora of :func:`write_corpora` as ``experiment=paper`` reads them, with what its grid needs: training
    queries planted near test topics (``PLANTS``), two query variants of every topic (``<home>/variants/<corpus>.tsv``,
    not part of ir_datasets), the Core tracks' topics of the authors' bundled runs (50 each) with the runs' documents
    down to ``run_depth`` as NYT and WaPo articles under their ids, and qrels judging a relevant and a non-relevant
    document of every topic (but Robust04's 672) among them.

    Returns ``ids`` (documents per corpus), ``topics`` (corpus -> qid -> title), ``variants`` (corpus -> path),
    ``runs`` (corpus -> qid -> the run's docnos) and ``plants`` (one dict per planted query: corpus, topic, source,
    qid, text, labels, leak)."""
    rng, trng = random.Random(seed), random.Random(f"paper-{seed}")
    home = Path(home)
    runs = _runs(run_depth)
    qids = {"robust04": ROBUST04_TOPICS, "core17": list(runs["core17"]), "core18": list(runs["core18"])}
    own = [(c, q) for c in qids for q in qids[c]
           if c != "core18" or q not in runs["core17"] or q == REUSED_WITH_OTHER_TEXT]
    phrases = iter(_phrases(trng, 2 * len(own)))
    texts: dict[str, dict] = {c: {} for c in qids}
    variants: dict[str, dict[str, list[str]]] = {c: {} for c in qids}
    for corpus, q in own:
        title, far = " ".join(next(phrases)), " ".join(next(phrases))
        texts[corpus][q] = (title, _sentence(trng, 12), _sentence(trng, 20))
        variants[corpus][q] = [far, f"{title} news"]
    for q in qids["core18"]:  # the topics Core 2018 took over from Core 2017
        if q not in texts["core18"]:
            texts["core18"][q], variants["core18"][q] = texts["core17"][q], variants["core17"][q]
    texts = {c: {q: texts[c][q] for q in qids[c]} for c in qids}
    forms = {"identical": lambda t, v: t, "question": lambda t, v: f"what is the {t}", "variant": lambda t, v: v[0],
             "swap": lambda t, v: " ".join([t.split()[1], t.split()[0], *t.split()[2:]])}
    plants, extra = [], {"msmarco": [], "orcas": []}
    for n, (corpus, topic, source, form, labels) in enumerate(PLANTS):
        qid = str((5000 if source == "msmarco" else 7000) + n)  # no id of the other source: annotations name no source
        text = forms[form](texts[corpus][topic][0], variants[corpus][topic])
        extra[source].append((qid, text, trng.randrange(docs)))
        plants.append({"corpus": corpus, "topic": topic, "source": source, "qid": qid, "text": text,
                       "labels": list(labels), "leak": "Different Topic" not in labels})
    run_ids = {c: tuple(dict.fromkeys(d for q in qids[c] for d in runs[c][q])) for c in runs}
    assert not {str(1_600_000 + i * 7) for i in range(docs)} & set(run_ids["core17"])  # no NYT id twice
    ids = {"wapo": _write_wapo(home, rng, docs, run_ids["core18"]), "nyt": _write_nyt(home, rng, docs, run_ids["core17"]),
           "disks45": _write_disks45(home, rng, max(4, docs // 4)), "msmarco": _write_msmarco(home, rng, docs, extra)}
    robust = qids["robust04"]
    (home / "disks45" / "04.testset.gz").write_bytes(_gz(_classic_topics(rng, robust, texts["robust04"]).encode()))
    (home / "disks45" / "qrels.robust2004.txt").write_text(
        _judged(rng, robust, {q: ids["disks45"] for q in robust}, no_relevant="672"))
    for corpus, folder, writer in (("core17", home / "nyt" / "trec-core-2017", _classic_topics),
                                   ("core18", home / "wapo" / "trec-core-2018", _core18_topics)):
        folder.mkdir(exist_ok=True)
        (folder / "queries.txt").write_text(writer(rng, qids[corpus], texts[corpus]))
        (folder / "qrels").write_text(_judged(rng, qids[corpus], runs[corpus]))
    (home / "variants").mkdir(exist_ok=True)
    paths = {}
    for corpus, by_topic in variants.items():
        paths[corpus] = home / "variants" / f"{corpus}.tsv"
        paths[corpus].write_text("".join(f"{q}\t{v}\n" for q in qids[corpus] for v in by_topic[q]))
    return {"ids": ids, "topics": {c: {q: t[0] for q, t in ts.items()} for c, ts in texts.items()},
            "variants": paths, "runs": runs, "plants": plants}


def irds_home() -> Path:
    """The IR_DATASETS_HOME ir_datasets reads in this process (its dataset modules fix it on import)."""
    import os

    import ir_datasets

    home = Path(ir_datasets.load("wapo/v2").docs_path(force=False)).parent.parent
    if home != Path(os.environ["IR_DATASETS_HOME"]):
        raise RuntimeError(f"ir_datasets reads {home}, not IR_DATASETS_HOME={os.environ['IR_DATASETS_HOME']}: it was "
                           "imported before the variable was set")
    return home


@pytest.fixture(scope="session")
def irds_corpora(_irds_home) -> Path:
    """The miniature corpora, written once per session into the session's IR_DATASETS_HOME (tests/conftest.py)."""
    home = irds_home()
    write_corpora(home, seed=7)
    return home


# -- compressed raw files, as some copies of Disks 4 & 5 hold them ------------------------------------------------
def compress_z(data: bytes) -> bytes:
    """Unix ``compress`` (.Z; 16 bits, block mode) of ``data``: LZW codes from 9 bits wide, packed least significant
    bit first, each width's codes padded to a whole group of eight when the width grows, as compress(1) writes them
    (both unlzw3 and ``uncompress`` read it back)."""
    table = {bytes([i]): i for i in range(256)}
    free, n_bits, segments, codes, w = 257, 9, [], [], b""

    def emit(code: int) -> None:
        nonlocal n_bits, codes
        codes.append(code)
        if free > (1 << n_bits) - 1 and n_bits < 16:  # the next code is wider: close this width's group of eight
            segments.append((n_bits, codes + [0] * (-len(codes) % 8)))
            n_bits, codes = n_bits + 1, []

    for byte in data:
        wc = w + bytes([byte])
        if wc in table:
            w = wc
            continue
        emit(table[w])
        if free < 1 << 16:
            table[wc], free = free, free + 1
        w = bytes([byte])
    if w:
        emit(table[w])
    segments.append((n_bits, codes))
    out = bytearray(b"\x1f\x9d\x90")
    for width, cs in segments:
        out += sum(c << (width * i) for i, c in enumerate(cs)).to_bytes((width * len(cs) + 7) // 8, "little")
    return bytes(out)


COMPRESSED = {"FBIS/FB396001": ".Z", "FR94/01/FR940101.0": "Z", "FT/FT911/FT911_1": ".gz"}  # LATIMES stays plain


def copy_disks45_compressed(home: Path, dest: Path) -> list[Path]:
    """A copy of the miniature Disks 4 & 5 under ``home`` (``disks45/corpus``) in ``dest``, with the first file of
    FBIS (.Z), FR94 (.0Z, as FR940104.0Z) and FT (.gz) compressed under the new name; returns those files."""
    import shutil

    shutil.copytree(Path(home) / "disks45" / "corpus", dest)
    out = []
    for name, suffix in COMPRESSED.items():
        f = Path(dest) / "NEWS_data" / name
        data = f.read_bytes()
        target = f.with_name(f.name + suffix)
        target.write_bytes(_gz(data) if suffix == ".gz" else compress_z(data))
        f.unlink()
        out.append(target)
    return out
