"""What KNRM, PACRR and Duet share, as Capreolus v0.2.6 builds it (docs/models.md §1): frozen word vectors,
token ids with exact-match ids for out-of-vocabulary words, and the idf of the collection being ranked."""

from __future__ import annotations

import inspect
import itertools
import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence, TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from leakexp.models.base import ModelSettings, Reranker
from leakexp.models.tokens import Tokens
from leakexp.runner.schema import Name, PositiveInt
from leakexp.models.vectors import (TOKENIZER_VERSION, word_tokens, batch_ids, distinct_tokens, load_word_vectors,
                                    word_ids)

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch
    from torch import nn


PARALLEL_FROM = 50_000  # documents a df count takes in its own process before worker processes start


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
    def from_docs(cls, texts: Iterable[str], *, analyzer: Callable[[str], list[str]] = word_tokens,
                  progress: bool = False, processes: int = 1, chunk: int = 2000,
                  parallel_from: int = PARALLEL_FROM) -> "IdfTable":
        """Count df over ``texts`` (one per document) with the models' analyzer; N = number of documents.

        With the models' own analyzer the distinct tokens of each document come from
        :func:`~leakexp.models.vectors.distinct_tokens` (the same sets, faster); with ``processes`` > 1 the
        documents after the first ``parallel_from`` are counted in chunks of ``chunk`` by that many worker
        processes. Counts are summed, so the table is the same for any of these."""
        df: Counter = Counter()
        n = 0
        bar = tqdm(desc="document frequencies", unit="doc", disable=not progress)
        if analyzer is not word_tokens:
            for t in texts:
                df.update(set(analyzer(t)))
                n += 1
                bar.update()
            bar.close()
            return cls(dict(df), n)
        memo: dict = {}
        batches, more = _chunks(texts, chunk), False
        for batch in batches:
            df.update(itertools.chain.from_iterable(distinct_tokens(batch, memo=memo)))
            n += len(batch)
            bar.update(len(batch))
            if processes > 1 and n >= parallel_from:
                more = True
                break
        if more:
            import multiprocessing

            with multiprocessing.get_context("spawn").Pool(processes) as pool:
                for part, count in pool.imap(_count_chunk, batches):
                    df.update(part)
                    n += count
                    bar.update(count)
        bar.close()
        return cls(dict(df), n)

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return max(0.0, math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5)))

    def weights(self, texts: Sequence[str], length: int) -> np.ndarray:
        """(n, length) float32 idf of each text's first ``length`` tokens; padded positions get idf 0."""
        out = np.zeros((len(texts), length), dtype=np.float32)
        for i, t in enumerate(texts):
            v = [self.idf(tok) for tok in word_tokens(t)[:length]]
            out[i, : len(v)] = v
        return out

    def batch(self, texts: list[str], length: int) -> torch.Tensor:
        """:meth:`weights` as a tensor."""
        import torch

        return torch.from_numpy(self.weights(texts, length))

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


def _chunks(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(texts)
    while batch := list(itertools.islice(it, size)):
        yield batch


_WORKER_MEMO: dict = {}  # a worker process's segment memo (distinct_tokens), kept between its chunks


def _count_chunk(texts: list[str]) -> tuple[Counter, int]:
    """Documents among ``texts`` that hold each token (a worker's share of a df count), and len(texts)."""
    return Counter(itertools.chain.from_iterable(distinct_tokens(texts, memo=_WORKER_MEMO))), len(texts)


class CapreolusReranker(Reranker):
    """Frozen word vectors + embedtext-style token ids; subclasses add the scoring network.

    ``forward(q, d)`` receives (B, maxqlen) and (B, longest document) ids: 0 is padding, a positive id a row of
    ``self.embedding``, and a negative id an out-of-vocabulary word (one id per distinct word, so that equal words
    match exactly); embed with ``ids.clamp(min=0)`` (the zero vector) or :func:`~leakexp.models.vectors
    .similarity_matrix`, which scores exact out-of-vocabulary matches as Capreolus does.

    Checkpoints hold the trained parameters and the embedding source with its content hash, not the frozen
    matrix: loading reads the vectors (once per process) and refuses a source whose content changed.
    """

    objective = "pairwise"

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800,
                 finetune: bool = False, unit_vectors: bool = False, **_):
        import torch
        from torch import nn

        super().__init__()
        vectors = load_word_vectors(embeddings, unit=unit_vectors)  # unit: as pymagnitude gives GloVe to Capreolus
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

    def query_idf(self, queries: Sequence[str]) -> np.ndarray:
        """(n, maxqlen) float32 idf of each query's first maxqlen tokens (0 where padded)."""
        if self.idf_table is None:
            raise RuntimeError(
                f"{self.name} weights query terms by idf but has no df table: build one from the documents of the "
                "collection it trains on or ranks with IdfTable.from_docs(texts) and call model.use_idf(table)")
        return self.idf_table.weights(queries, self.maxqlen)

    def query_weights(self, queries: Sequence[str]) -> np.ndarray | None:
        """The per-query row the collator turns into the ``idf`` input (None: the model has no such input)."""
        return None

    # -- token ids (leakexp.models.tokens) ----------------------------------------------------------------
    ENCODING = ("embeddings", "maxdoclen")

    @classmethod
    def _setting(cls, settings: dict, key: str):
        """``settings[key]``, else the constructor's default."""
        if key in settings:
            return settings[key]
        return inspect.signature(cls.__init__).parameters[key].default

    @classmethod
    def document_tokens(cls, settings: dict, texts: Sequence[str], *, progress: bool = False) -> Tokens:
        """Ids of each document's first maxdoclen tokens; unknown words share negative ids over all ``texts``
        (-1 is ``oov[0]``), so a batch can tell equal unknown words apart from different ones."""
        vectors = load_word_vectors(cls._setting(settings, "embeddings"))
        return word_ids(texts, vectors, int(cls._setting(settings, "maxdoclen")), progress=progress,
                        desc=f"{cls.name} document tokens")

    @classmethod
    def encoding_id(cls, settings: dict) -> str:
        return f"{load_word_vectors(cls._setting(settings, 'embeddings')).content_hash}:{TOKENIZER_VERSION}"

    def encode_queries(self, texts: Sequence[str], docs: Tokens) -> Tokens:
        """Ids of each query's first maxqlen tokens in ``docs``' unknown-word ids (new unknown words extend them:
        the result's ``oov`` is docs.oov followed by those words), with the model's per-query weights."""
        oov = {w: -(i + 1) for i, w in enumerate(docs.oov)}
        q = word_ids(texts, self.vectors, self.maxqlen, oov)
        q.oov = tuple(docs.oov) + q.oov
        q.weights = self.query_weights(texts)
        return q

    def collator(self) -> "WordCollator":
        # KNRM: documents padded to the batch's longest one; the model adds the rest of maxdoclen analytically
        return WordCollator(maxqlen=self.maxqlen, maxdoclen=self.maxdoclen)

    # -- checkpoints ----------------------------------------------------------------------------------
    def _frozen_keys(self) -> set[str]:
        return {"embedding.weight"} if not self.embedding.weight.requires_grad else set()

    def save(self, out: Path) -> None:
        import torch

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
        import torch

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


@dataclass(frozen=True)
class WordCollator:
    """Aligned query and document token rows of one batch -> the ``q`` and ``d`` id tensors (see
    :func:`~leakexp.models.vectors.batch_ids`), plus ``idf`` from the queries' weights when ``idf`` is set.
    ``trim``: documents only as wide as the batch's longest (the models add the rest of maxdoclen analytically)."""

    maxqlen: int
    maxdoclen: int
    trim: bool = True
    idf: bool = False

    def ids(self, q: Tokens, d: Tokens) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        if len(q) != len(d):
            raise ValueError(f"{len(q)} query rows but {len(d)} document rows: a batch's rows are aligned pairs")
        return batch_ids(q, d, self.maxqlen, self.maxdoclen, trim=self.trim)

    def idf_tensor(self, q: Tokens) -> torch.Tensor:
        import torch

        if q.weights is None:
            raise ValueError("these query tokens have no idf weights; encode the queries with the model's "
                             "encode_queries")
        return torch.tensor(q.weights[:, : self.maxqlen], dtype=torch.float32)

    def __call__(self, q: Tokens, d: Tokens) -> dict[str, torch.Tensor]:
        qt, dt, _ = self.ids(q, d)
        feats = {"q": qt, "d": dt}
        if self.idf:
            feats["idf"] = self.idf_tensor(q)
        return feats


class CapreolusSettings(ModelSettings):
    """What KNRM, PACRR and Duet share: their word vectors and input lengths (docs/models.md §1)."""

    embeddings: Name  # bundled, or a GloVe text file (paper: glove.6B.300d.txt)
    # rows scaled to unit length and quantised to 7 decimals, as Capreolus reads GloVe through pymagnitude
    # (leakexp.models.vectors.unit_rows); experiment=paper: true
    unit_vectors: bool = False
    maxqlen: PositiveInt
    maxdoclen: PositiveInt
