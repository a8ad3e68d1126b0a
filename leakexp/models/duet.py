"""DUET (Mitra et al., WWW 2017) as Capreolus v0.2.6 implements it (docs/models.md §4): a local exact-match model
plus a distributed model over frozen word embeddings (no character n-gram hashing)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Literal, TYPE_CHECKING

import numpy as np
from pydantic import Field

from leakexp.models.base import fp32
from leakexp.models.capreolus import CapreolusReranker, CapreolusSettings, WordCollator
from leakexp.models.tokens import Tokens
from leakexp.runner.schema import PositiveInt

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch
    from torch import nn
    from torch.nn import functional as F


@lru_cache(maxsize=100_000)
def _oov_vector(token: str, dim: int) -> torch.Tensor:
    import torch

    seed = int.from_bytes(hashlib.sha256(token.encode()).digest()[:8], "little")
    return torch.from_numpy(np.random.default_rng(seed).normal(0, 0.5, dim).astype(np.float32))


@dataclass(frozen=True)
class DuetCollator(WordCollator):
    """DUET's batch: ids padded to maxqlen and maxdoclen (no trimming: its convolutions read fixed widths), the
    batch's unknown-word vectors in batch id order (row k for id -(k + 1); functions of the words alone), and the
    query-term idf."""

    trim: bool = False
    idf: bool = True
    dim: int = 0

    def __call__(self, q: Tokens, d: Tokens) -> dict[str, torch.Tensor]:
        import torch

        qt, dt, shared = self.ids(q, d)
        words = q.oov if len(q.oov) >= len(d.oov) else d.oov  # a query's oov extends its documents'
        oov = (torch.stack([_oov_vector(words[-int(g) - 1], self.dim) for g in shared]) if len(shared)
               else torch.zeros(0, self.dim))
        return {"q": qt, "d": dt, "oov": oov, "idf": self.idf_tensor(q)}


class DUET(CapreolusReranker):
    name = "duet"
    LABEL = "Duet"

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800, nfilters: int = 10,
                 lmhidden: int = 30, nhidden: int = 699, idfweight: bool = True, dropoutrate: float = 0.5,
                 unit_vectors: bool = False, **_):
        from torch import nn

        if nhidden != maxdoclen - 101:
            raise ValueError(f"duet: nhidden={nhidden} must equal maxdoclen - 101 = {maxdoclen - 101} (Capreolus' "
                             "hard-coded coupling of the doc branch's pooling)")
        if maxqlen != 4:
            raise ValueError(f"duet: maxqlen={maxqlen}; the query branch only collapses to one position with 4")
        super().__init__(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, unit_vectors=unit_vectors)
        self.hparams = dict(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, nfilters=nfilters,
                            lmhidden=lmhidden, nhidden=nhidden, idfweight=idfweight, dropoutrate=dropoutrate,
                            unit_vectors=unit_vectors)
        dim = self.vectors.dim
        # local model: exact matches weighted by query-term idf
        self.local_conv = nn.Conv2d(1, nfilters, kernel_size=(1, maxdoclen))
        self.local_mlp = nn.Sequential(nn.Linear(nfilters * maxqlen, lmhidden), nn.ReLU(), nn.Dropout(dropoutrate),
                                       nn.Linear(lmhidden, 1))
        # distributed model
        self.q_conv = nn.Conv2d(1, nfilters, kernel_size=(3, dim))
        self.q_pool = nn.MaxPool2d((2, 1), stride=1)
        self.q_fc = nn.Linear(nfilters, nfilters)
        self.d_conv = nn.Conv2d(1, nfilters, kernel_size=(3, dim))
        self.d_pool = nn.MaxPool2d((100, 1), stride=1)
        self.d_conv2 = nn.Conv2d(1, nfilters, kernel_size=(nfilters, 1))
        self.comb_fc = nn.Linear(nhidden, 1)
        self.out_fc = nn.Linear(nfilters, 1)
        self.dropout = nn.Dropout(dropoutrate)

    @classmethod
    def reads_idf(cls, params: dict) -> bool:
        return bool(params.get("idfweight", True))

    def oov_vector(self, token: str) -> torch.Tensor:
        """Capreolus gives out-of-vocabulary words random N(0, 0.5^2) vectors from the global numpy seed in
        insertion order (extractor/slowembedtext.py, _build_embedding_matrix); here each word's vector is seeded
        by the word itself, so it is the same in every batch, process and run."""
        return _oov_vector(token, self.vectors.dim)

    def query_weights(self, queries) -> np.ndarray:
        """The query-term idf of the collection being ranked (zeros without idfweight: the local model's
        exact matches are then unweighted)."""
        if self.needs_idf:
            return self.query_idf(queries)
        return np.zeros((len(queries), self.maxqlen), dtype=np.float32)

    def collator(self) -> "DuetCollator":
        return DuetCollator(maxqlen=self.maxqlen, maxdoclen=self.maxdoclen, dim=self.vectors.dim)

    def embed(self, ids: torch.Tensor, oov: torch.Tensor) -> torch.Tensor:
        """(B, L) ids -> (B, L, dim) on the model's device: known words by their frozen vector, unknown words
        (id -k) by row k-1 of ``oov``, padding 0."""
        import torch

        out = self.embedding(ids.clamp(min=0))  # unknown and pad ids -> the zero pad row
        if oov.shape[0]:
            table = torch.cat([oov.new_zeros(1, oov.shape[1]), oov]).to(out.dtype)  # row 0: not an unknown word
            out = out + table[(-ids).clamp(min=0)]
        return out

    def local(self, q: torch.Tensor, d: torch.Tensor, idf: torch.Tensor) -> torch.Tensor:
        """Local model: (B, Q) ids, (B, D) ids, (B, Q) idf -> (B,)."""
        from torch.nn import functional as F

        em = (q.unsqueeze(2) == d.unsqueeze(1)).to(idf.dtype)  # (B, Q, D); pad-vs-pad is zeroed by idf 0 only
        if self.hparams["idfweight"]:
            em = em * idf.unsqueeze(2)
        h = F.relu(self.local_conv(em.unsqueeze(1)))  # (B, F, Q, 1)
        # filter-major flatten; the MLP (40 -> 30 -> 1, negligible work) in fp32: bf16 would round its 30 hidden
        # values and the score, so that documents tie
        return fp32(self.local_mlp, h.reshape(h.shape[0], -1)).squeeze(-1)

    def distributed(self, q_emb: torch.Tensor, d_emb: torch.Tensor) -> torch.Tensor:
        from torch.nn import functional as F

        B = q_emb.shape[0]
        qh = self.q_pool(self.dropout(F.relu(self.q_conv(q_emb.unsqueeze(1)))))  # (B, F, 1, 1)
        qv = fp32(self.q_fc, qh.reshape(B, -1))  # (B, F)
        dh = self.d_pool(self.dropout(F.relu(self.d_conv(d_emb.unsqueeze(1)))))  # (B, F, nhidden, 1)
        dh = dh.reshape(B, 1, dh.shape[1], dh.shape[2])  # (B, 1, F, nhidden)
        dv = self.dropout(F.relu(self.d_conv2(dh))).reshape(B, -1, dh.shape[-1])  # (B, F, nhidden)
        # the combination (699 -> 1 per filter, then 10 -> 1) in fp32: in bf16 its 10 values and the score are
        # rounded so that documents tie; the convolutions before it (the work) stay under autocast
        comb = fp32(lambda q, d: F.relu(self.comb_fc(q.unsqueeze(2) * d)).squeeze(-1), qv, dv)  # (B, F)
        return fp32(self.out_fc, self.dropout(comb)).squeeze(-1)

    def forward(self, q: torch.Tensor, d: torch.Tensor, oov: torch.Tensor, idf: torch.Tensor) -> torch.Tensor:
        return self.local(q, d, idf) + self.distributed(self.embed(q, oov), self.embed(d, oov))  # fp32 + fp32

    def config(self) -> dict:
        return dict(self.hparams)


class DuetSettings(CapreolusSettings):
    name: Literal["duet"]
    nfilters: PositiveInt
    lmhidden: PositiveInt
    nhidden: PositiveInt
    idfweight: bool
    dropoutrate: Annotated[float, Field(ge=0, lt=1)]


DUET.Settings = DuetSettings
