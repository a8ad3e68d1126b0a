"""The ``firststage`` stage: the top-k of every topic of a corpus that the models re-rank, from leakexp's BM25
or from an external TREC run (e.g. the SPIRE-22 authors' Anserini runs, bundled in ``leakexp/data/runs``); and the
``rerank`` section that names them."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, TYPE_CHECKING

from leakexp.data.files import files_identity
from leakexp.data.judgments import BUNDLED_RUNS, run_path
from leakexp.lib.bm25 import ANSERINI_VERSION, bm25_search
from leakexp.lib.trec import read_run
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage, register_stage
from leakexp.stages.index import BM25, bm25_options
from leakexp.stages.sources import collection_source
from leakexp.runner.schema import Settings

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


def first_stage_file(spec: str | Mapping | None, corpus: str) -> Path | None:
    """The external first-stage run that ``rerank.first_stage`` names for ``corpus`` (None: leakexp's BM25).

    A mapping names one run per corpus (``{core17: bundled:core17…gz}``); a corpus it lacks, or maps to null,
    gets leakexp's BM25. A value with ``{corpus}`` names one run per corpus; a plain path is one run, of the one
    corpus the grid re-ranks (``check_first_stage`` refuses it for a grid of several corpora).
    """
    if isinstance(spec, Mapping):
        spec = spec.get(corpus)
        return None if not spec else run_path(spec)
    if not spec:
        return None
    return run_path(str(spec).format(corpus=corpus)) if "{corpus}" in str(spec) else run_path(spec)


def first_stage_caption(s: Settings, corpus: str) -> str:
    """What the models of ``corpus`` re-ranked, for a table's caption."""
    depth = s.rerank.depth
    external = first_stage_file(s.rerank.first_stage, corpus)
    if external is not None:
        who = ("the SPIRE-22 authors' Anserini BM25 run" if external.parent == BUNDLED_RUNS
               else "the external run")
        return f"First stage: the top-{depth} of {who} {external.name}"
    b = s.bm25
    anserini = b.backend == "anserini"
    tool = f"Anserini {ANSERINI_VERSION}" if anserini else "PISA"
    if anserini and b.collection == "trec":
        c = s.corpus_of(corpus).model_dump()
        if collection_source(c).raw_trec(c) is not None:
            tool += "'s TrecCollection index of the raw TREC files"
    return (f"First stage: the BM25 top-{depth} of {tool} (k1 {b.k1}, b {b.b}, stemmer {b.stemmer}, "
            f"stop words {b.stopwords})")


def check_first_stage(s: Settings) -> None:
    """A plain ``rerank.first_stage`` path is one corpus's run: the grid and the cell must re-rank that corpus
    alone (Core 2017's topics are a subset of Robust04's, so a wrong run would not be noticed by its topics)."""
    spec = s.rerank.first_stage
    if isinstance(spec, Mapping):  # a corpus it does not know would silently re-rank BM25: name it
        from leakexp.runner.config import options

        known = list(dict.fromkeys([*options("corpus"), *s.corpus_names]))
        unknown = [str(k) for k in spec if str(k) not in known]
        if unknown:
            raise ConfigError(f"rerank.first_stage.{unknown[0]} names no corpus; the mapping's keys are corpora "
                              f"({', '.join(known)})")
        return
    if not spec or "{corpus}" in str(spec):
        return
    cell = s.corpus.name
    corpora = list(dict.fromkeys([*s.grid.corpora, cell]))
    if corpora != [cell]:
        raise ConfigError(f"rerank.first_stage={spec} is one run, for corpus={cell}, but the grid also "
                          f"re-ranks {', '.join(c for c in corpora if c != cell)}; name one run per "
                          f"corpus with a template such as 'runs/{{corpus}}.bm25.gz' or a mapping such as "
                          f"{{{cell}: {spec}}}, or re-rank this corpus alone "
                          f"with grid.corpora=[{cell}]")


@register_stage
class FirstStage(Stage):
    """the first-stage top-k of every topic of a corpus that the models re-rank"""

    name, version = "firststage", 1

    def reads(self, p: dict, cuda: bool) -> tuple[str, ...]:
        return ("rerank.query_field", "rerank.depth", "rerank.first_stage", *BM25)

    def inputs(self, p: dict, c: Config) -> dict:
        inputs = {"topics": Ask.of("collection", corpus=p["corpus"])}
        if first_stage_file(c.settings("rerank").first_stage, p["corpus"]) is None:
            inputs["index"] = Ask.of("index", name=p["corpus"])
        return inputs

    def external(self, p: dict, c: Config):
        f = first_stage_file(c.settings("rerank").first_stage, p["corpus"])
        return None if f is None else files_identity(f)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        r = ctx.settings("rerank")
        topics = ctx.inputs["topics"].topics_frame(r.query_field)
        external = first_stage_file(r.first_stage, ctx.params["corpus"])
        if external is not None:
            run = read_run(external, topics, depth=r.depth)
        else:
            run = bm25_search(ctx.inputs["index"], topics, depth=r.depth, **bm25_options(ctx))
        run.to_parquet(tmp / "run.parquet", index=False)
        return {"queries": int(run.qid.nunique()), "rows": len(run)}

    def opener(self, path: Path) -> pd.DataFrame:
        import pandas as pd

        return pd.read_parquet(path / "run.parquet")

    check = staticmethod(check_first_stage)

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of("firststage", corpus=c) for c in dict.fromkeys(r.settings.grid.corpora)]
