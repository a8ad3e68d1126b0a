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


def check_source(model, tokens: "Tokens") -> None:
    """Refuse stored tokens made by another encoder than ``model``'s (e.g. another vocabulary or word-vector file):
    they would feed it ids it does not read."""
    if not tokens.source:
        return
    have = type(model).encoding_id(model.hparams)
    if have != tokens.source:
        raise ValueError(f"stored document tokens were encoded by {tokens.source[:40]}…, but {model.name} reads "
                         f"{have[:40]}…: the tokenizer or word vectors changed since they were stored; recompute the "
                         "tokens artifact (leakexp status --why tokens shows it)")
