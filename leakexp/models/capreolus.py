"""What KNRM, PACRR and Duet share, as Capreolus v0.2.6 builds it (MODELS.md §1): frozen word vectors,
token ids with exact-match ids for out-of-vocabulary words, and an idf table."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import torch
from torch import nn

from leakexp.models.base import Reranker
from leakexp.models.vectors import TextIds, load_word_vectors, tokenize


class IdfTable:
    """idf = max(0, ln(1 + (N - df + 0.5) / (df + 0.5))) (Anserini's BM25 idf, as Capreolus' get_idf).

    Capreolus reads df from the index of the collection it ranks; leakexp counts it over the documents of
    the training set (stored with the checkpoint), so a model scores every collection the same way.
    A term never seen gets df = 0.
    """

    def __init__(self, df: dict[str, int] | None = None, n_docs: int = 0):
        self.df = dict(df or {})
        self.n_docs = n_docs

    @classmethod
    def from_texts(cls, texts) -> "IdfTable":
        df, n = Counter(), 0
        for t in texts:
            df.update(set(tokenize(t)))
            n += 1
        return cls(dict(df), n)

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return max(0.0, math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5)))

    def batch(self, texts: list[str], length: int) -> torch.Tensor:
        rows = []
        for t in texts:
            v = [self.idf(tok) for tok in tokenize(t)[:length]]
            rows.append(v + [0.0] * (length - len(v)))  # padded positions: idf 0
        return torch.tensor(rows, dtype=torch.float32)

    def to_json(self) -> dict:
        return {"df": self.df, "n_docs": self.n_docs}


class CapreolusReranker(Reranker):
    """Frozen word vectors + embedtext-style token ids; subclasses add the scoring network."""

    objective = "pairwise"
    uses_idf = False

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800, **_):
        super().__init__()
        vectors = load_word_vectors(embeddings)
        self.vectors = vectors
        self.ids = TextIds(vectors)
        self.embedding = nn.Embedding.from_pretrained(torch.from_numpy(vectors.matrix), freeze=True, padding_idx=0)
        self.maxqlen, self.maxdoclen = maxqlen, maxdoclen
        self.idf_table = IdfTable()

    def prepare(self, instances) -> None:
        """Called by the trainer with the training set before the first step."""
        if self.uses_idf:
            self.idf_table = IdfTable.from_texts(instances.drop_duplicates("docno").text)

    def save(self, out: Path) -> None:
        super().save(out)
        if self.uses_idf:
            (Path(out) / "idf.json").write_text(json.dumps(self.idf_table.to_json()))

    @classmethod
    def load(cls, path: Path):
        path = Path(path)
        model = cls(**json.loads((path / "model.json").read_text())["config"])
        model.load_state_dict(torch.load(path / "model.pt", weights_only=True))
        if (path / "idf.json").exists():
            d = json.loads((path / "idf.json").read_text())
            model.idf_table = IdfTable(d["df"], d["n_docs"])
        return model
