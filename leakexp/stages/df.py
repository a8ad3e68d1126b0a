"""The ``df`` stage: the document frequencies of a collection (name=train: the training pool), from which KNRM,
PACRR and DUET read each query term's idf (Capreolus' ``AnseriniIndex`` df table; the table is
``leakexp.models.capreolus.IdfTable``).
"""

from __future__ import annotations

from pathlib import Path

from leakexp.models.capreolus import IdfTable
from leakexp.runner.stage import Ask, Context, Stage, register_stage
from leakexp.stages.corpus_stats import corpus_stats_input, documents_input, stats_figures


@register_stage
class DocumentFrequencies(Stage):
    """document frequencies of a collection (name=train: the training pool), the idf KNRM/PACRR/DUET read"""

    name, version = "df", 1  # the analyzer is part of the table (TOKENIZER_VERSION, checked when it is loaded)

    def inputs(self, p: dict, c) -> dict:
        return {"docs": documents_input(p["name"]), "stats": corpus_stats_input(p["name"])}

    def compute(self, ctx: Context, tmp: Path) -> dict:
        docs = ctx.inputs["docs"].docs
        # runtime threads (bm25.threads): worker processes; the table is the same for any number
        table = IdfTable.from_docs((t for _, t in docs), progress=ctx.runtime.verbose,
                                   processes=ctx.runtime.threads)
        table.save(tmp / "df.parquet")
        return {"documents": table.n_docs, "terms": len(table.df), **stats_figures(ctx.inputs["stats"])}

    def opener(self, path: Path) -> IdfTable:
        return IdfTable.load(path / "df.parquet")
