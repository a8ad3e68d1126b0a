"""Re-ranking: the BM25 top-k of every topic of a corpus, scored by a trained model."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TYPE_CHECKING

from leakexp.models import get, load_checkpoint
from leakexp.models.base import Reranker, rank_with_docno_ties
from leakexp.models.compute import Compute
from leakexp.models.tokens import Tokens
from leakexp.lib.trec import write_run
from leakexp.runner.schema import PositiveInt, Section
from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage
from leakexp.stages.cell import rerank_params, rerank_path, train_params
from leakexp.stages.firststage import first_stage_file
from leakexp.stages.train import reads_idf

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


def rerank(model: Reranker, bm25: pd.DataFrame, docs, *, batch_size: int = 64, device: str = "cpu",
           bf16: bool = False, score_dtype: str = "float32") -> pd.DataFrame:
    """Re-rank a stored BM25 run with the PyTerrier pipeline ``bm25 >> text >> model``, or, when ``docs`` are the
    documents' stored :class:`Tokens`, ``bm25 >> model`` scoring from their token ids.

    Ties in the model's score are broken by docno (the paper), not by BM25's order. ``bf16``: autocast on CUDA.
    ``score_dtype``: ``float16`` rounds every score before ranking, as Capreolus stores its predictions
    (``leakexp.models.base.round_scores``; config ``models.<model>.score_dtype``).
    """
    import pyterrier as pt

    first_stage = pt.Transformer.from_df(bm25[["qid", "query", "docno", "score", "rank"]])
    if isinstance(docs, Tokens):
        pipeline = first_stage >> model.transformer(batch_size=batch_size, device=device, bf16=bf16, docs=docs,
                                                    score_dtype=score_dtype)
    else:
        text = pt.apply.generic(lambda df: df.assign(text=[docs[d] for d in df.docno]))
        pipeline = first_stage >> text >> model.transformer(batch_size=batch_size, device=device, bf16=bf16,
                                                            score_dtype=score_dtype)
    topics = bm25[["qid", "query"]].drop_duplicates("qid")
    res = pipeline(topics)
    return rank_with_docno_ties(res[["qid", "query", "docno", "score"]])


def scoring_reads(p: dict, cuda: bool) -> list[str]:
    """What scoring with the cell's model reads (re-ranking, memorization, robustness): the model's settings (whether
    it reads idf, how its scores are stored), and on CUDA its precision and how it computes there; never a batch size
    (speed only) nor how it trains on CUDA."""
    reads = ["models.{model}", "!models.{model}.train.score_batch_size"]
    if not cuda:  # how a model computes on CUDA: read there only
        return reads + ["!models.{model}.cuda"]
    reads += ["!models.{model}.cuda.score_batch_size", "!models.{model}.cuda.micro_batch", "precision.rerank_bf16"]
    return reads + (["precision.rerank_compile"] if get(p["model"]).FAST_PATH else [])


def load_model(ctx: Context, name: str = "model", df: str = "df") -> Reranker:
    """The trained model of input ``name`` on the runtime's device, with input ``df``'s idf if it reads idf."""
    model = load_checkpoint(ctx.inputs[name]).to(ctx.runtime.device)
    if model.needs_idf:
        model.use_idf(ctx.inputs[df])
    if ctx.runtime.device.startswith("cuda") and model.FAST_PATH:
        model.use(scoring_compute(ctx))
    return model


def scoring_compute(ctx: Context) -> Compute:
    """How the cell's model scores on CUDA (leakexp.models.compute): bf16 weights where ``models.<model>.cuda``
    says so and ``precision.rerank_bf16`` is on, compiled where ``precision.rerank_compile`` and the model's ``cuda.rerank_compile`` are, monoT5's options."""
    cuda = ctx.settings(f"models.{ctx.params['model']}").cuda
    precision = ctx.settings("precision")
    return Compute(bf16_weights=precision.rerank_bf16 and cuda.rerank_weights == "bf16",
                   compile=precision.rerank_compile and cuda.rerank_compile, bias_once=getattr(cuda, "position_bias_once", False),
                   single_query=getattr(cuda, "single_query_cross_attention", False))


def scoring(ctx: Context) -> dict:
    """How the stage scores: batch size, device, precision (bf16 on CUDA when configured) and the precision a
    score is stored in before ranking (``models.<model>.score_dtype``, read through the stage's ``models.{model}``)."""
    device = ctx.runtime.device
    bf16 = device.startswith("cuda") and ctx.settings("precision").rerank_bf16  # declared on CUDA only
    batch = ctx.runtime.score_batch(ctx.params.get("model"))
    score_dtype = ctx.settings(f"models.{ctx.params['model']}").score_dtype
    return {"batch_size": batch, "device": device, "bf16": bf16, "score_dtype": score_dtype}


@register_stage
class Rerank(Stage):
    """a trained model's re-ranking of the first-stage run of a corpus"""

    name, version = "rerank", 3
    help = "re-rank the BM25 top-100 of the cell(s)' corpus"
    per_cell = True
    device = True
    reads = staticmethod(scoring_reads)

    def inputs(self, p: dict, c: Config) -> dict:
        target = p["target"]
        inputs = {"model": Ask.of("train", **train_params(p)), "run": Ask.of("firststage", corpus=target),
                  "collection": Ask.of("collection", corpus=target),
                  "tokens": Ask.of("tokens", docs="run", model=p["model"], corpus=target)}
        if reads_idf(c, p["model"]):  # the idf of the collection it ranks
            inputs["df"] = Ask.of("df", name=target)
        return inputs

    def normalise(self, p: dict) -> dict:
        return rerank_params(p)

    def path(self, p: dict, c: Config) -> list:
        return rerank_path(p)

    def compute(self, ctx: Context, tmp: Path) -> dict:
        p = ctx.params
        model = load_model(ctx)
        tokens = ctx.inputs["tokens"] if model.encodes() else ctx.inputs["collection"].docs
        res = rerank(model, ctx.inputs["run"], tokens, **scoring(ctx))
        res.to_parquet(tmp / "run.parquet", index=False)
        write_run(res, tmp / "run.trec.gz", f"leakexp-{p['model']}-{p['leakage']}-{p['size']}-s{p['seed']}")
        return {"queries": int(res.qid.nunique()), "rows": len(res)}

    def asks(self, r, cells) -> list[Ask]:
        return [c.ask("rerank") for c in cells]

    class Settings(Section):
        """``rerank``: which first stage the models re-rank, how deep, with which topic field."""

        query_field: Literal["title", "description", "narrative"]
        depth: PositiveInt
        first_stage: dict[str, str | None] | str | None  # corpus -> run (null: BM25), one run, or a '{corpus}' template

        def files_for(self, corpora: list[str]) -> list[tuple[str, Path]]:
            return [("rerank.first_stage", f) for f in dict.fromkeys(first_stage_file(self.first_stage, c) for c in corpora)
                    if f is not None]
