"""Token ids of many texts in flat arrays: what a model reads of each document, computed once and gathered into
batches (no tokenising in the training or re-ranking loop).

    docs = model.encode_docs(texts)               # Tokens: row i = what the model reads of texts[i]
    queries = model.encode_queries(qtexts, docs)  # shares docs' unknown-word ids (word models)
    feats = model.collator()(queries.take(qi), docs.take(di))   # the model's input tensors for one batch
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from leakexp.stage import Ask, Context, Stage


@dataclass
class Tokens:
    """Ragged int32 token ids: row ``i`` is ``ids[offsets[i]:offsets[i + 1]]``, truncated to what the model reads.

    ``full``: each row's length before truncation (a pair's truncation can depend on it). ``oov``: the words of
    negative ids (-1 is ``oov[0]``) for models that match unknown words exactly. ``weights``: a fixed-width float
    row per text when the model needs one (e.g. query-term idf). ``keys``: what each row is (docnos), if known.
    ``source``: the encoder's identity (``Reranker.encoding_id``) when stored.
    """

    ids: np.ndarray
    offsets: np.ndarray
    full: np.ndarray
    oov: tuple[str, ...] = ()
    weights: np.ndarray | None = None
    keys: list[str] | None = field(default=None, repr=False)
    source: str = ""

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], *, full: Iterable[int] | None = None, oov: Iterable[str] = (),
                  weights: np.ndarray | None = None, keys: list[str] | None = None) -> "Tokens":
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = (np.concatenate([np.asarray(r, dtype=np.int32) for r in rows]) if len(rows) and offsets[-1]
               else np.zeros(0, dtype=np.int32))
        full_arr = lengths.astype(np.int32) if full is None else np.fromiter(full, dtype=np.int32, count=len(rows))
        return cls(ids, offsets, full_arr, tuple(oov), weights, keys)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def take(self, idx: Sequence[int] | np.ndarray) -> "Tokens":
        """The rows ``idx`` (a gather), with the same ``oov`` words."""
        idx = np.asarray(idx, dtype=np.int64)
        rows = [self.row(i) for i in idx]
        out = Tokens.from_rows(rows, full=self.full[idx], oov=self.oov,
                               weights=None if self.weights is None else self.weights[idx])
        if self.keys is not None:
            out.keys = [self.keys[i] for i in idx]
        return out

    def padded(self, width: int | None = None, pad: int = 0) -> np.ndarray:
        """(rows, width) int64 ids, right-padded with ``pad`` (width: the longest row, at least 1)."""
        lengths = self.lengths
        width = max(1, int(lengths.max(initial=0))) if width is None else width
        out = np.full((len(self), width), pad, dtype=np.int64)
        for i in range(len(self)):
            r = self.row(i)[:width]
            out[i, : len(r)] = r
        return out

    def index(self) -> dict[str, int]:
        """key -> row (``keys`` must be set)."""
        if self.keys is None:
            raise ValueError("these tokens have no keys")
        return {k: i for i, k in enumerate(self.keys)}

    # -- files ------------------------------------------------------------------------------------------
    def save(self, folder: str | Path, name: str) -> Path:
        """``<name>.<array>.npy`` (ids, offsets, full, weights) and ``<name>.json`` (oov words, keys, source), each
        written to a temporary name and renamed; no time stamps, so equal tokens are equal bytes."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {"ids": self.ids, "offsets": self.offsets, "full": self.full, "weights": self.weights}
        for key, array in arrays.items():
            if array is None:
                continue
            tmp = folder / f".{name}.{key}.npy.tmp-{os.getpid()}"
            with open(tmp, "wb") as f:
                np.save(f, np.ascontiguousarray(array))
            os.replace(tmp, folder / f"{name}.{key}.npy")
        meta = folder / f".{name}.json.tmp-{os.getpid()}"
        meta.write_text(json.dumps({"oov": list(self.oov), "keys": self.keys, "source": self.source}) + "\n",
                        encoding="utf-8")
        os.replace(meta, folder / f"{name}.json")
        return folder / f"{name}.json"

    @classmethod
    def load(cls, folder: str | Path, name: str) -> "Tokens":
        """The saved tokens; the ids are memory-mapped (read on use, shared by the loader's worker processes)."""
        folder = Path(folder)
        meta = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        weights = folder / f"{name}.weights.npy"
        return cls(np.load(folder / f"{name}.ids.npy", mmap_mode="r"), np.load(folder / f"{name}.offsets.npy"),
                   np.load(folder / f"{name}.full.npy"), tuple(meta["oov"]),
                   np.load(weights) if weights.exists() else None, meta["keys"], meta.get("source", ""))


# -- the stage: each document a model reads, encoded once ------------------------------------------------
def encoding_settings(config, model: str) -> dict:
    """The settings of ``model`` its documents' encoding reads (the model class's ``ENCODING``)."""
    from leakexp.models import get

    return {k: config.at(f"models.{model}.{k}") for k in get(model).ENCODING}


def _embedded(c, model: str) -> bool:
    return model == "monot5" and c.at("models.monot5.checkpoint") == "embedded"


def _reads(p: dict, cuda: bool) -> list[str]:
    from leakexp.models import get

    return [f"models.{{model}}.{k}" for k in get(p["model"]).ENCODING]


def _inputs(p: dict, c) -> dict:
    from leakexp.build import set_params

    if p["docs"] == "set":
        inputs = {"set": Ask.of("sets", **set_params(p))}
    else:
        inputs = {"run": Ask.of("firststage", corpus=p["corpus"]), "collection": Ask.of("collection", corpus=p["corpus"])}
    if _embedded(c, p["model"]):
        inputs["vocab"] = Ask.of("t5vocab")
    return inputs


def _external(p: dict, c) -> str | None:
    """The encoder's identity beyond the settings (a word-vector file's content), so a changed file re-keys."""
    from leakexp.models import get

    if _embedded(c, p["model"]):
        return None  # the embedded vocabulary is an input: its key covers it
    return get(p["model"]).encoding_id(encoding_settings(c, p["model"])) or None


def _normalise(p: dict) -> dict:
    from leakexp.build import set_params

    if p["docs"] == "set":
        return {"docs": "set", "model": p["model"], **set_params(p)}
    return {"docs": "run", "model": p["model"], "corpus": p["corpus"]}


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


def _tokens(ctx: Context, tmp: Path) -> dict:
    from leakexp.models import get

    model = ctx.params["model"]
    settings = encoding_settings(ctx.config, model)
    if "vocab" in ctx.input_names:
        settings["checkpoint"] = str(ctx.inputs["vocab"])
    docnos, texts = documents_of(ctx)
    cls = get(model)
    tokens = cls.document_tokens(settings, texts, progress=bool(ctx.runtime.get("verbose")))
    tokens.keys, tokens.source = docnos, cls.encoding_id(settings)
    tokens.save(tmp, "docs")
    return {"documents": len(tokens), "tokens": int(tokens.offsets[-1]),
            "truncated": int((tokens.full > tokens.lengths).sum()), "unknown_words": len(tokens.oov)}


TOKENS = Stage(
    "tokens", version=1, reads=_reads, inputs=_inputs, compute=_tokens, normalise=_normalise, external=_external,
    path=lambda p, c: [p["model"], *([v for k, v in sorted(p.items()) if k not in ("model", "docs")]), p["docs"]],
    opener=lambda path: Tokens.load(path, "docs"),
    describe="what a model reads of each document of a training set (docs=set) or a first-stage run (docs=run): "
             "token ids, encoded once and shared by every cell",
)
