"""A document's text as its collection holds it, from the record ir_datasets 0.6.3 keeps of it.

ir_datasets' ``default_text()`` is not always the archive's text. WaPo's body comes from
``BeautifulSoup(paragraph, 'lxml-xml').get_text()`` (``ir_datasets/datasets/wapo.py``, ``WapoDocs._docs_iter``,
lines 96-101): an XML parser over HTML paragraphs, which returns '' for a paragraph without markup and only the
first element for mixed content (``<span>NEW ORLEANS —</span> Whenever a …`` gives ``NEW ORLEANS —``), so most of an
article is lost. Every record type below keeps its raw fields (``WapoDoc.body_paras_html``, ``NytDoc.source_xml``),
so the text is rebuilt from them, with the same function for iteration and look-up, and from the docstore ir_datasets
has already built (no re-download, no re-parse of the archive).

- WaPo v2 (``WapoDoc``): title, kicker, then every ``sanitized_html`` paragraph parsed as HTML (text between tags
  kept, entities decoded, a space at ``<br>`` and block ends). Images, tweets, videos and galleries
  (``body_media``) are left out: captions, blurbs and embedded tweets are not the article's text (Anserini's
  ``WashingtonPostCollection`` reads neither captions nor blurbs either). ``body_paras_html`` does not keep each
  paragraph's mime type, so the rare ``text/plain`` paragraph is parsed as HTML too (equal unless it holds ``<`` or
  an entity).
- NYT (``NytDoc``): the print headline (``hl1``) and the paragraphs of the ``full_text`` block, one per line, from
  ``source_xml`` (ir_datasets' own ``get_text()`` glues paragraphs that no white space separates). An article
  without a full text is its headline alone.
- TREC Disks 4 & 5 (``TrecParsedDoc``): ir_datasets' title (``HEADLINE``, ``TITLE``, ``H3``, ``H4``) and body (the
  text of Anserini's content tags ``TEXT HEADLINE TITLE HL HEAD TTL DD DATE LP LEADPARA``,
  ``ir_datasets/formats/trec.py`` ``CONTENT_TAGS`` and ``_parser_sax``), markup and comments removed.
- MS MARCO documents (``MsMarcoDocument``): title and body; the URL is left out.
- Any other record: its ``default_text()``.
"""

from __future__ import annotations

import html
import re
from typing import Any, Callable

BREAKS = frozenset("br p div li ul ol h1 h2 h3 h4 h5 h6 tr td th blockquote table".split())
_TAG = re.compile(r"<[^>]*>")


def html_text(fragment: str) -> str:
    """The text of an HTML fragment: tags removed, entities decoded, a space where a line or block breaks."""
    if "<" not in fragment and "&" not in fragment:
        return fragment
    from lxml import etree
    from lxml.html import fragment_fromstring

    try:
        root = fragment_fromstring(fragment, create_parent="div")
    except (etree.ParserError, ValueError):  # not parseable as HTML (e.g. only a comment): strip tags by pattern
        return html.unescape(_TAG.sub(" ", fragment))
    for el in root.iter():
        if isinstance(el.tag, str) and el.tag.lower() in BREAKS:  # a space before and after a break or block
            el.text, el.tail = " " + (el.text or ""), " " + (el.tail or "")
    return root.text_content()


def wapo_text(doc: Any) -> str:
    """Title, kicker and paragraphs of a ``WapoDoc`` (see the module docstring)."""
    parts = [doc.title or "", doc.kicker or "", *(html_text(p) for p in doc.body_paras_html if p)]
    return "\n".join(p.strip() for p in parts if p and p.strip())


def nyt_text(doc: Any) -> str:
    """Print headline and full-text paragraphs of an ``NytDoc``, from its NITF XML."""
    from lxml import etree

    xml = doc.source_xml if isinstance(doc.source_xml, bytes) else doc.source_xml.encode("utf-8")
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, recover=True)
    root = etree.fromstring(xml, parser)
    if root is None:  # unreadable XML: what ir_datasets parsed of it
        return doc.default_text()
    parts = []
    headline = root.find(".//hl1")
    if headline is not None:
        parts.append("".join(headline.itertext()))
    block = root.find(".//block[@class='full_text']")
    if block is not None:
        paragraphs = [el for el in block if isinstance(el.tag, str)]
        parts += ["".join(p.itertext()) for p in paragraphs] if paragraphs else ["".join(block.itertext())]
    return "\n".join(" ".join(p.split()) for p in parts if p.strip())


def _title_body(doc: Any) -> str:
    return "\n".join(p for p in (doc.title, doc.body) if p)


def _readers() -> dict[type, Callable[[Any], str]]:
    from ir_datasets.datasets.msmarco_document import MsMarcoDocument
    from ir_datasets.datasets.nyt import NytDoc
    from ir_datasets.datasets.wapo import WapoDoc
    from ir_datasets.formats.trec import TrecParsedDoc

    return {WapoDoc: wapo_text, NytDoc: nyt_text, TrecParsedDoc: _title_body, MsMarcoDocument: _title_body}


_READERS: dict[type, Callable[[Any], str]] | None = None


def document_text(doc: Any) -> str:
    """The text of an ir_datasets document record as its collection holds it (see the module docstring)."""
    global _READERS
    if _READERS is None:
        _READERS = _readers()
    reader = _READERS.get(type(doc))
    return reader(doc) if reader is not None else doc.default_text()
