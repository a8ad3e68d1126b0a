"""The tokens stage: what a model reads of each document of a training set or a first-stage run, encoded once
(token ids truncated to what the model reads) and shared by every cell that trains or re-ranks on them."""

from __future__ import annotations

from pathlib import Path

from leakexp.data.files import file_identity
from leakexp.models import get
from leakexp.models.base import with_artifacts
from leakexp.models.tokens import Tokens
from leakexp.models.vectors import VECTORS_CACHE_FORMAT
from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage
from leakexp.stages.cell import set_params
from leakexp.stages.corpus_stats import corpus_stats_input


def encoding_settings(config, model: str) -> dict:
    """The settings of ``model`` its documents' encoding reads (the model class's ``ENCODING``)."""
    settings = config.settings(f"models.{model}")
    return {k: getattr(settings, k) for k in get(model).ENCODING}


def _artifacts(c, model: str) -> dict:
    """The artifacts ``model``, as configured, reads in place of a setting (``Reranker.artifacts``)."""
    return get(model).artifacts(c.settings(f"models.{model}"))


def documents_of(ctx: Context) -> tuple[list[str], list[str]]:
    """(docnos, texts) of the documents the artifact covers: a training set's, or a first-stage run's."""
    import pandas as pd

    if ctx.params["docs"] == "set":
        frame = pd.read_parquet(ctx.inputs["set"] / "instances.parquet", columns=["docno", "text"])
        frame = frame.drop_duplicates("docno").sort_values("docno", kind="mergesort")
        return frame["docno"].tolist(), frame["text"].tolist()
    docnos = sorted(set(ctx.inputs["run"]["docno"]))
    docs = ctx.inputs["collection"].docs
    return docnos, [docs[d] for d in docnos]


@register_stage
class DocumentTokens(Stage):
    """what a model reads of each document of a training set (docs=set) or a first-stage run (docs=run): token ids,
    encoded once and shared by every cell"""

    name, version = "tokens", 1

    def reads(self, p: dict, cuda: bool) -> list[str]:
        return [f"models.{{model}}.{k}" for k in get(p["model"]).ENCODING]

    def inputs(self, p: dict, c: Config) -> dict:
        if p["docs"] == "set":
            inputs = {"set": Ask.of("build", **set_params(p))}
        else:  # the corpus passed its check before its documents are read
            inputs = {"run": Ask.of("firststage", corpus=p["corpus"]),
                      "collection": Ask.of("collection", corpus=p["corpus"]), "stats": corpus_stats_input(p["corpus"])}
        return {**inputs, **{name: Ask.of(a.stage) for name, a in _artifacts(c, p["model"]).items()}}

    def normalise(self, p: dict) -> dict:
        if p["docs"] == "set":
            return {"docs": "set", "model": p["model"], **set_params(p)}
        return {"docs": "run", "model": p["model"], "corpus": p["corpus"]}

    def path(self, p: dict, c: Config) -> list:
        return [p["model"], *([v for k, v in sorted(p.items()) if k not in ("model", "docs")]), p["docs"]]

    def external(self, p: dict, c: Config) -> dict | None:
        """The identity of local files the encoding reads (a word-vector file, a tokenizer's directory's files;
        :func:`~leakexp.data.files.file_identity`): a changed file re-keys the tokens and what reads them."""
        if _artifacts(c, p["model"]):
            return None  # what the model reads of another artifact is an input: its key covers it
        out = {}
        for key, value in encoding_settings(c, p["model"]).items():
            path = Path(str(value)).expanduser()
            if isinstance(value, str) and path.is_file() and key == "embeddings":
                # a word-vector file as parsed: how its rows are read (float64, pymagnitude's unit rows) is part of
                # what the models trained on it see, so a new parse re-keys them (and only them)
                out[key] = {**file_identity(path), "parsed": VECTORS_CACHE_FORMAT}
            elif isinstance(value, str) and path.is_file():
                out[key] = file_identity(path)
            elif isinstance(value, str) and path.is_dir():  # a checkpoint: its tokenizer's files, not the weights
                out[key] = {f.name: file_identity(f) for f in sorted(path.iterdir())
                            if f.is_file() and f.stat().st_size < 64 << 20}
        return out or None

    def compute(self, ctx: Context, tmp: Path) -> dict:
        model = ctx.params["model"]
        cls, declared = get(model), ctx.settings(f"models.{model}")
        settings = with_artifacts(cls, declared, {k: getattr(declared, k) for k in cls.ENCODING}, ctx.input)
        docnos, texts = documents_of(ctx)
        tokens = cls.document_tokens(settings, texts, progress=ctx.runtime.verbose)
        tokens.keys, tokens.source = docnos, cls.encoding_id(settings)
        tokens.save(tmp, "docs")
        return {"documents": len(tokens), "tokens": int(tokens.offsets[-1]),
                "truncated": int((tokens.full > tokens.lengths).sum()), "unknown_words": len(tokens.oov)}

    def opener(self, path: Path) -> Tokens:
        return Tokens.load(path, "docs")

    def asks(self, r, cells) -> list[Ask]:
        """Each cell's model's reading of its training set's documents and of its corpus's first-stage run."""
        return [a for c in cells for a in (
            Ask.of("tokens", docs="set", model=c.model, corpus=c.corpus, leakage=c.leakage, size=c.size),
            Ask.of("tokens", docs="run", model=c.model, corpus=c.corpus))]
