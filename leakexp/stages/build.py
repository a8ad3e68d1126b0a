"""The ``fillers``, ``negatives`` and ``build`` stages: the controlled-leakage training sets of the grid (paper,
Section 4, "Training Datasets"), built by ``leakexp.lib.training_sets`` from the training pool, the verified leaks
and BM25 negatives."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, TYPE_CHECKING

import numpy as np

from leakexp.lib.bm25 import bm25_search
from leakexp.runner.schema import NonNegativeInt, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage, register_stage
from leakexp.stages.cell import set_params
from leakexp.lib.candidates import above_threshold
from leakexp.stages.corpus_stats import corpus_stats_input
from leakexp.stages.index import bm25_options
from leakexp.stages.sources import pool_source

from leakexp.lib.training_sets import (Negatives, build_set, excluded_queries, filler_order, query_key, split_query_key,
                                      write_set)

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)

# -- stages ----------------------------------------------------------------------------------------------
NEGATIVES_CHUNK = 8192  # fillers per negatives artifact: every set reads the chunks its size needs, shared


def _corpora(c: Config) -> list[str]:
    return list(c.settings("data").corpora or [])


@register_stage
class Fillers(Stage):
    """the training queries No-Leakage sets may use, in one seeded order"""

    name, version = "fillers", 1
    reads = ("build.seed", "detect.threshold", "data.corpora")

    def inputs(self, p: dict, c: Config) -> dict:
        return {"pool": Ask.of("pool"), "candidates": Ask.of("detect"), "annotations": Ask.of("verify"),
                "leaks": [Ask.of("leaks", corpus=n) for n in _corpora(c)]}

    def value(self, ctx: Context) -> pd.DataFrame:
        pool, threshold = ctx.inputs["pool"], ctx.settings("detect").threshold
        pairs = above_threshold(ctx.inputs["candidates"], threshold)
        excluded = excluded_queries(pool, pairs, ctx.inputs["annotations"], ctx.inputs["leaks"])
        return filler_order(pool, excluded, ctx.settings("build").seed)


def negatives_need(size: int) -> int:
    """Fillers a set of ``size`` instances may walk: its queries plus slack for those without a negative."""
    return int(int(size) // 2 * 1.1) + 100


@register_stage
class NegativeRuns(Stage):
    """BM25 top-k of training queries (a chunk of the fillers, or every verified leak) for negatives"""

    name, version = "negatives", 1
    reads = ("build.negatives_depth", "bm25.k1", "bm25.b", "bm25.stemmer", "bm25.stopwords", "bm25.backend",
             "data.corpora")

    def inputs(self, p: dict, c: Config) -> dict:
        queries = [Ask.of("leaks", corpus=n) for n in _corpora(c)] if p["part"] == "leaks" else Ask.of("fillers")
        return {"queries": queries, "index": Ask.of("index", name="train")}

    def compute(self, ctx: Context, tmp: Path) -> dict:
        import pandas as pd

        part = ctx.params["part"]
        if part == "leaks":
            queries = pd.concat(ctx.inputs["queries"], ignore_index=True)[["qid", "text", "source"]]
        else:
            chunk = int(part)
            queries = ctx.inputs["queries"].iloc[chunk * NEGATIVES_CHUNK:(chunk + 1) * NEGATIVES_CHUNK]
        queries = queries.drop_duplicates(["source", "qid"])
        if not len(queries):  # a chunk past the end of the fillers: no query to search (the set says what is short)
            pd.DataFrame({"source": pd.Series(dtype=object), "qid": pd.Series(dtype=object),
                          "docno": pd.Series(dtype=object), "rank": pd.Series(dtype=np.int64)}
                         ).to_parquet(tmp / "run.parquet", index=False)
            return {"queries": 0, "rows": 0}
        # one BM25 query id per training query: an id may name an MS MARCO and an ORCAS query
        frame = pd.DataFrame({"qid": [query_key(s, q) for s, q in zip(queries.source, queries.qid)],
                              "query": queries.text}).sort_values("qid", kind="mergesort").reset_index(drop=True)
        run = bm25_search(ctx.inputs["index"], frame, depth=ctx.settings("build").negatives_depth,
                          **bm25_options(ctx))
        source, qid = split_query_key(run.qid)
        run = run.assign(source=source, qid=qid)[["source", "qid", "docno", "rank"]]
        run.to_parquet(tmp / "run.parquet", index=False)
        return {"queries": len(frame), "rows": len(run)}

    def opener(self, path: Path) -> pd.DataFrame:
        import pandas as pd

        return pd.read_parquet(path / "run.parquet")


def pool_queries(s: Settings) -> tuple[int, str] | None:
    """How many training queries the configured pool holds at most, and which setting says so, where the config
    alone tells (the toy world: ``data.queries_per_source`` per source); None where only the data does."""
    return pool_source(s.data).pool_queries(s.data.model_dump())


def check_size(s: Settings, corpus: str, leakage: str, size: int, where: str) -> None:
    """A set the pool cannot fill, known from the config before any work: its non-test queries (the fillers and
    the verified leaks, all drawn from the pool) outnumber the pool's queries. ``where`` names the setting
    (``size=…``, ``grid.sizes has …``). The exact number of fillers (the pool less the queries leakage detection
    sets aside and those without a BM25 negative) is checked when the set is built (:func:`build_set`)."""
    pool = pool_queries(s)
    if pool is None:
        return
    held, why = pool
    test = s.corpus_of(corpus).test_leak_queries if leakage == "test" else 0
    need = int(size) // 2 - test
    if need > held:
        raise ConfigError(
            f"{where}: a training set of corpus={corpus} leakage={leakage} needs {need} training queries but the "
            f"training pool of data={s.data.name} holds {held} ({why}), fewer once leakage detection sets "
            f"queries aside: the filler pool is exhausted; choose size <= {2 * (held + test)} or raise "
            "data.queries_per_source"
        )


def check_grid_sizes(s: Settings) -> None:
    """Every set of the grid fits the pool (:func:`check_size`): plan, status and grid refuse before any work."""
    g = s.grid
    for size in dict.fromkeys(g.sizes):
        for corpus in dict.fromkeys(g.corpora):
            for leakage in dict.fromkeys(g.leakages):
                check_size(s, corpus, leakage, size, f"grid.sizes has {size}")


@register_stage
class Build(Stage):
    """a controlled-leakage training set (corpus x leakage type x size)"""

    # 2: MS MARCO leaks drawn from the verified leaks in id order (the set, not the annotations' order)
    name, version, keyed_as = "build", 2, "sets"
    help = ("build the training sets of the grid (corpus x leakage x size); prints a summary (--export-monot5: also "
            "write the monoT5 text format)")
    check = staticmethod(check_grid_sizes)

    def reads(self, p: dict, cuda: bool) -> list[str]:
        reads = ["build.seed"]
        if p["leakage"] == "msm":
            reads += ["corpora.{corpus}.fixed_leak_queries", "build.take_all_leaks"]
        if p["leakage"] == "test":
            reads += ["corpora.{corpus}.test_leak_queries", "build.test_query_field", "build.test_with_replacement",
                      "build.test_missing_judgments"]
        return reads

    def inputs(self, p: dict, c: Config) -> dict:
        chunks = -(-negatives_need(p["size"]) // NEGATIVES_CHUNK)
        inputs = {"pool": Ask.of("pool"), "fillers": Ask.of("fillers"),
                  "negatives": [Ask.of("negatives", part=str(i)) for i in range(chunks)]}
        if p["leakage"] == "msm":
            inputs["leaks"] = Ask.of("leaks", corpus=p["corpus"])
            inputs["negatives"].append(Ask.of("negatives", part="leaks"))
        if p["leakage"] == "test":
            inputs["collection"] = Ask.of("collection", corpus=p["corpus"])
            inputs["stats"] = corpus_stats_input(p["corpus"])  # the corpus passed its check before its documents are read
        return inputs

    def normalise(self, p: dict) -> dict:
        return set_params(p)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        import pandas as pd

        p, b = ctx.params, ctx.settings("build")
        corpus, leakage, size = p.get("corpus", "any"), p["leakage"], int(p["size"])
        # a set reads the settings of its own leakage type only (see reads): the others do not apply to it
        fixed = {"none": 0, "msm": lambda c: c.fixed_leak_queries, "test": lambda c: c.test_leak_queries}[leakage]
        fixed = fixed if leakage == "none" else fixed(ctx.settings(f"corpora.{corpus}"))
        test = leakage == "test"
        pool = ctx.inputs["pool"]
        searched = len(ctx.inputs["negatives"]) * NEGATIVES_CHUNK
        negatives = Negatives.from_frames(pool.qrels, pd.concat(ctx.inputs["negatives"], ignore_index=True), b.seed)
        frame, manifest = build_set(
            corpus=corpus, leakage=leakage, size=size, fixed_queries=fixed,
            fillers=ctx.inputs["fillers"].iloc[:searched], negatives=negatives,
            leaks=ctx.inputs["leaks"] if leakage == "msm" else None,
            collection=ctx.inputs["collection"] if test else None, pool_docs=pool.docs, seed=b.seed,
            test_field=b.test_query_field if test else "title",
            take_all_leaks=b.take_all_leaks if leakage == "msm" else False,
            test_with_replacement=b.test_with_replacement if test else True,
            test_missing_judgments=b.test_missing_judgments if test else "skip",
        )
        write_set(tmp, frame, manifest)
        if manifest.get("skipped_topics"):
            log.info("%s/%s/%s: %d topic(s) without judgments skipped (%s); leaked part %d instances short",
                     corpus, leakage, size, len(manifest["skipped_topics"]),
                     ", ".join(f"{t['topic']}: {t['reason']}" for t in manifest["skipped_topics"]),
                     manifest["leaked_shortfall"])
        return {k: manifest[k] for k in ("instances", "leaked_instances", "leaked_shortfall", "leakage_ratio",
                                         "content_hash")}

    def asks(self, r, cells) -> list[Ask]:
        return [c.ask("build") for c in cells]

    class Settings(Section):
        """``build``: how the controlled-leakage training sets are drawn."""

        seed: NonNegativeInt
        test_query_field: Literal["title", "description", "narrative"]
        negatives_depth: PositiveInt
        take_all_leaks: bool
        test_with_replacement: bool
        test_missing_judgments: Literal["skip", "top_up"]
