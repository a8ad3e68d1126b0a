"""Each document's text computed straight from the raw archive files that tests/irds_corpora.py writes, with the
standard library only: independent of ir_datasets' parsers and of leakexp.data.doctext, so a test can compare them.

What counts as a document's text, per corpus (the same choices as leakexp.data.doctext, made here from the raw files):
WaPo v2: title, kicker and the ``sanitized_html`` paragraphs (text/html parsed as HTML, text/plain as is); NYT: the
``hl1`` headline and the ``full_text`` paragraphs; Disks 4 & 5: the text of Anserini's TrecCollection content tags
plus the ``H3``/``H4`` headlines ir_datasets reads as titles, without markup and comments; MS MARCO: title and body
(the lines after the URL in ``<TEXT>``).
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import xml.etree.ElementTree as ET
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

from irds_corpora import WAPO_FILE


class _Text(HTMLParser):
    BREAKS = {"br", "p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "td", "blockquote"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)

    def handle_starttag(self, tag, attrs):
        if tag in self.BREAKS:
            self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag in self.BREAKS:
            self.parts.append(" ")


def _html(fragment: str) -> str:
    p = _Text()
    p.feed(fragment)
    p.close()
    return "".join(p.parts)


def wapo(home: Path) -> dict[str, str]:
    out = {}
    with tarfile.open(home / "wapo" / "WashingtonPost.v2.tar.gz") as tar:
        for line in tar.extractfile(WAPO_FILE):
            doc = json.loads(line)
            parts = [doc["title"]]
            for c in doc["contents"]:
                if c is None or c.get("content") is None:
                    continue
                if c["type"] == "kicker":
                    parts.append(c["content"])
                elif c["type"] == "sanitized_html":
                    parts.append(_html(c["content"]) if c.get("mime") == "text/html" else c["content"])
            out[doc["id"]] = "\n".join(parts)
    return out


def nyt(home: Path) -> dict[str, str]:
    out = {}
    with tarfile.open(home / "nyt" / "nyt.tgz") as outer:
        for m in outer.getmembers():
            if not m.name.endswith(".tgz"):
                continue
            with tarfile.open(fileobj=io.BytesIO(outer.extractfile(m).read())) as inner:
                for f in inner.getmembers():
                    if not f.isfile():
                        continue
                    root = ET.fromstring(inner.extractfile(f).read())
                    parts = ["".join(h.itertext()) for h in root.iter("hl1")][:1]
                    for block in root.iter("block"):
                        if block.get("class") == "full_text":
                            parts += ["".join(p.itertext()) for p in block.iter("p")]
                            break
                    out[root.find(".//doc-id").get("id-string")] = "\n".join(parts)
    return out


CONTENT = "TEXT HEADLINE TITLE HL HEAD TTL DD DATE LP LEADPARA H3 H4".split()


def disks45(home: Path) -> dict[str, str]:
    out = {}
    root = home / "disks45" / "corpus" / "NEWS_data"
    files = [*root.glob("FBIS/FB*"), *root.glob("FR94/??/FR*"), *root.glob("FT/*/FT*"), *root.glob("LATIMES/LA*")]
    for f in files:
        for doc in re.findall(r"<DOC>\n(.*?)\n</DOC>", f.read_text(encoding="utf-8"), re.S):
            docno = re.search(r"<DOCNO>(.*?)</DOCNO>", doc).group(1).strip()
            doc = re.sub(r"<!--.*?-->", " ", doc, flags=re.S)
            parts = [m.group(2) for m in re.finditer(r"<(%s)>(.*?)</\1>" % "|".join(CONTENT), doc, re.S)]
            out[docno] = unescape(re.sub(r"<[^>]*>", " ", "\n".join(parts)))
    return out


def msmarco(home: Path) -> dict[str, str]:
    raw = gzip.decompress((home / "msmarco-document" / "collection.tsv.gz").read_bytes()).decode()
    out = {}
    for docno, text in re.findall(r"<DOCNO>(.*?)</DOCNO>\n<TEXT>\n(.*?)</TEXT>", raw, re.S):
        _url, title, body = text.split("\n", 2)
        out[docno] = f"{title}\n{body}"
    return out


ARCHIVES = {"core18": wapo, "core17": nyt, "robust04": disks45, "train": msmarco}
