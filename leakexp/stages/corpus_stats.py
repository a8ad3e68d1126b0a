"""The ``corpus-stats`` stage: a corpus's statistics (documents, median words, empty documents, repeated ids; the
training pool's with name=train), computed before any index, idf table, token array or training set reads its
documents, and the check that stops a run on an implausible corpus (``leakexp.data.statistics``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from leakexp.data.statistics import CHECK_SETTINGS, FIGURES, check_documents, document_figures
from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage


def _section(name: str) -> str:
    return "data" if name == "train" else f"corpora.{name}"


def documents_input(name: str) -> Ask:
    """The documents of ``name``: the training pool's (``train``) or a test collection's."""
    return Ask.of("pool") if name == "train" else Ask.of("collection", corpus=name)


@register_stage
class CorpusStats(Stage):
    """documents, median words, empty documents and repeated ids of a collection (name=train: the training pool),
    checked before anything reads its documents"""

    name, version, keyed_as = "corpus-stats", 1, "docstats"
    help = ("per test corpus and the training pool: documents, median words, empty documents, repeated document ids, "
            "topics and judged topics (exit 2 when a corpus fails its check)")

    def reads(self, p: dict, cuda: bool) -> list[str]:
        return [f"{_section(p['name'])}.{k}" for k in CHECK_SETTINGS]

    def inputs(self, p: dict, c: Config) -> dict:
        return {"docs": documents_input(p["name"])}

    def compute(self, ctx: Context, tmp: Path) -> dict:
        name = ctx.params["name"]
        figures = document_figures(ctx.inputs["docs"].docs)
        (tmp / "stats.json").write_text(json.dumps(figures, indent=1))
        settings = ctx.settings(_section(name))
        check_documents(name, figures, {k: getattr(settings, k) for k in CHECK_SETTINGS})
        return {k: figures[k] for k in FIGURES}

    def opener(self, path: Path) -> dict:
        return json.loads((path / "stats.json").read_text())


def corpus_stats_input(name: str) -> Ask:
    """What a stage that reads the documents of ``name`` asks for first (its check, and the figures it records)."""
    return Ask.of("corpus-stats", name=name)


def stats_figures(figures: Mapping) -> dict:
    """The figures a stage that reads documents records in its manifest (prefixed, beside its own)."""
    return {f"corpus_{k}": figures[k] for k in FIGURES}
