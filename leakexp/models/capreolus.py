"""What KNRM, PACRR and Duet share, as Capreolus v0.2.6 builds it (MODELS.md §1): frozen word vectors,
token ids with exact-match ids for out-of-vocabulary words, and the idf of the collection being ranked."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

import torch
from torch import nn
from tqdm.auto import tqdm

from leakexp.models.base import Reranker
from leakexp.stage import Ask, Context, Stage
from leakexp.models.vectors import TOKENIZER_VERSION, TextIds, analyze, load_word_vectors, tokenize


class IdfTable:
    """Document frequencies of one collection and idf = max(0, ln(1 + (N - df + 0.5) / (df + 0.5))).

    The formula and the floor are Anserini's BM25 idf as Capreolus reads it from the index of the collection it
    ranks (capreolus/index/anserini.py at v0.2.6, ``get_idf``); the index is built without stemming and with
    stopwords (``indexstops=True, stemmer=none``), so df counts the analyzer's tokens: the same ones the model
    sees. A term absent from the collection has df = 0.
    """

    def __init__(self, df: dict[str, int] | None = None, n_docs: int = 0, tokenizer: str = TOKENIZER_VERSION):
        self.df = dict(df or {})
        self.n_docs = int(n_docs)
        self.tokenizer = tokenizer

    @classmethod
    def from_docs(cls, texts: Iterable[str], *, analyzer: Callable[[str], list[str]] = analyze,
                  progress: bool = False) -> "IdfTable":
        """Count df over ``texts`` (one per document) with the models' analyzer; N = number of documents."""
        df: Counter = Counter()
        n = 0
        for t in tqdm(texts, desc="document frequencies", unit="doc", disable=not progress):
            df.update(set(analyzer(t)))
            n += 1
        return cls(dict(df), n)

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return max(0.0, math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5)))

    def batch(self, texts: list[str], length: int) -> torch.Tensor:
        """(B, length) idf of each text's first ``length`` tokens; padded positions get idf 0."""
        rows = []
        for t in texts:
            v = [self.idf(tok) for tok in tokenize(t)[:length]]
            rows.append(v + [0.0] * (length - len(v)))
        return torch.tensor(rows, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.df)

    def __eq__(self, other) -> bool:
        return isinstance(other, IdfTable) and (self.df, self.n_docs, self.tokenizer) == (
            other.df, other.n_docs, other.tokenizer)

    def save(self, path: str | Path) -> Path:
        """A parquet file (term, df) with N and the tokenizer in its metadata; written to a temporary name in the
        same folder and renamed, so a reader never sees half a table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        terms = sorted(self.df)
        table = pa.table({"term": pa.array(terms, pa.string()),
                          "df": pa.array([self.df[t] for t in terms], pa.int64())})
        table = table.replace_schema_metadata({"leakexp.idf": json.dumps({"n_docs": self.n_docs,
                                                                          "tokenizer": self.tokenizer})})
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "IdfTable":
        import pyarrow.parquet as pq

        path = Path(path)
        table = pq.read_table(path)
        meta = (table.schema.metadata or {}).get(b"leakexp.idf")
        if meta is None:
            raise ValueError(f"{path} is not a leakexp df table (no 'leakexp.idf' metadata); rebuild it with "
                             "IdfTable.from_docs(...).save(path)")
        info = json.loads(meta)
        if info.get("tokenizer") != TOKENIZER_VERSION:
            raise ValueError(f"{path} was counted with tokenizer {info.get('tokenizer')!r}, the models now use "
                             f"{TOKENIZER_VERSION!r}; rebuild the df table")
        return cls(dict(zip(table.column("term").to_pylist(), table.column("df").to_pylist())), info["n_docs"],
                   info["tokenizer"])


class CapreolusReranker(Reranker):
    """Frozen word vectors + embedtext-style token ids; subclasses add the scoring network.

    Checkpoints hold the trained parameters and the embedding source with its content hash, not the frozen
    matrix: loading reads the vectors (once per process) and refuses a source whose content changed.
    """

    objective = "pairwise"

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800,
                 finetune: bool = False, **_):
        super().__init__()
        vectors = load_word_vectors(embeddings)
        self.vectors = vectors
        weights = torch.from_numpy(vectors.matrix)  # shared with the process-wide cache while frozen
        self.embedding = nn.Embedding.from_pretrained(weights.clone() if finetune else weights, freeze=not finetune,
                                                      padding_idx=0)
        self.maxqlen, self.maxdoclen = maxqlen, maxdoclen
        self.idf_table: IdfTable | None = None

    # -- idf of the collection being ranked ---------------------------------------------------------------
    def use_idf(self, table: IdfTable) -> "CapreolusReranker":
        """Set the df table of the collection this model trains on or ranks next (Capreolus reads the index of
        the collection at hand); returns the model."""
        if not isinstance(table, IdfTable):
            raise TypeError(f"use_idf expects an IdfTable, got {type(table).__name__}")
        self.idf_table = table
        return self

    def query_idf(self, queries: list[str]) -> torch.Tensor:
        if self.idf_table is None:
            raise RuntimeError(
                f"{self.name} weights query terms by idf but has no df table: build one from the documents of the "
                "collection it trains on or ranks with IdfTable.from_docs(texts) and call model.use_idf(table)")
        return self.idf_table.batch(queries, self.maxqlen)

    def text_ids(self) -> TextIds:
        """A fresh id map for one batch (unknown-word ids depend on the batch alone)."""
        return TextIds(self.vectors)

    # -- checkpoints ----------------------------------------------------------------------------------
    def _frozen_keys(self) -> set[str]:
        return {"embedding.weight"} if not self.embedding.weight.requires_grad else set()

    def save(self, out: Path) -> None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        frozen = self._frozen_keys()
        state = {k: v.detach().cpu() for k, v in self.state_dict().items() if k not in frozen}
        torch.save(state, out / "model.pt")
        meta = {"name": self.name, "config": self.config(),
                "embeddings": {"source": self.vectors.source, "sha256": self.vectors.content_hash,
                               "shape": list(self.vectors.matrix.shape), "stored": not frozen}}
        (out / "model.json").write_text(json.dumps(meta, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path):
        path = Path(path)
        meta = json.loads((path / "model.json").read_text())
        model = cls(**meta["config"])
        expected = meta.get("embeddings", {})
        have = model.vectors
        if expected and expected["sha256"] != have.content_hash:
            raise ValueError(
                f"{path}: trained with word vectors {expected['source']} (sha256 {expected['sha256'][:12]}…, shape "
                f"{expected['shape']}), but embeddings={meta['config'].get('embeddings')!r} now reads {have.source} "
                f"(sha256 {have.content_hash[:12]}…, shape {list(have.matrix.shape)}); restore the original file or "
                "retrain the model")
        frozen = model._frozen_keys()
        state = torch.load(path / "model.pt", weights_only=True)
        # never copy into the frozen matrix: it is shared with every model built from the same vectors
        state = {k: v for k, v in state.items() if k not in frozen}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - frozen:
            raise ValueError(f"{path}/model.pt does not match {cls.name}: missing {sorted(missing)}, "
                             f"unexpected {sorted(unexpected)}")
        return model


# -- the df stage -----------------------------------------------------------------------------------------
def _df(ctx: Context, tmp: Path) -> dict:
    docs = ctx.inputs["docs"].docs
    table = IdfTable.from_docs((t for _, t in docs), progress=bool(ctx.runtime.get("verbose")))
    table.save(tmp / "df.parquet")
    return {"documents": table.n_docs, "terms": len(table.df)}


DF = Stage(
    "df", version=1,  # the analyzer is part of the table (TOKENIZER_VERSION, checked when it is loaded)
    inputs=lambda p, c: {"docs": Ask.of("pool") if p["name"] == "train" else Ask.of("collection", corpus=p["name"])},
    compute=_df, opener=lambda path: IdfTable.load(path / "df.parquet"),
    describe="document frequencies of a collection (name=train: the training pool), the idf KNRM/PACRR/DUET read",
)
