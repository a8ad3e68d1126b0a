"""DUET (Mitra et al., WWW 2017) as Capreolus v0.2.6 implements it (MODELS.md §4): a local exact-match model
plus a distributed model over frozen word embeddings (no character n-gram hashing)."""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from leakexp.models.capreolus import CapreolusReranker


class DUET(CapreolusReranker):
    name = "duet"
    uses_idf = True

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800, nfilters: int = 10,
                 lmhidden: int = 30, nhidden: int = 699, idfweight: bool = True, dropoutrate: float = 0.5, **_):
        if nhidden != maxdoclen - 101:
            raise ValueError(f"duet: nhidden={nhidden} must equal maxdoclen - 101 = {maxdoclen - 101} (Capreolus' "
                             "hard-coded coupling of the doc branch's pooling)")
        if maxqlen != 4:
            raise ValueError(f"duet: maxqlen={maxqlen}; the query branch only collapses to one position with 4")
        super().__init__(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen)
        self.hparams = dict(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, nfilters=nfilters,
                            lmhidden=lmhidden, nhidden=nhidden, idfweight=idfweight, dropoutrate=dropoutrate)
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
        self._oov_cache: dict[int, torch.Tensor] = {}

    def _oov_vector(self, token: str) -> torch.Tensor:
        """Capreolus gives out-of-vocabulary words random N(0, 0.5^2) vectors from the global numpy seed in
        insertion order; here each word's vector is seeded by the word itself (deterministic everywhere)."""
        seed = int.from_bytes(hashlib.sha256(token.encode()).digest()[:8], "little")
        return torch.from_numpy(np.random.default_rng(seed).normal(0, 0.5, self.vectors.dim).astype(np.float32))

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, L) token ids -> (B, L, dim): known words by their vector, unknown ones (negative ids) by their
        seeded random vector, padding 0."""
        out = self.embedding(ids.clamp(min=0))
        oov = ids < 0
        if oov.any():
            names = {i: w for w, i in self.ids.oov.items()}
            for i in ids[oov].unique().tolist():
                if i not in self._oov_cache:
                    self._oov_cache[i] = self._oov_vector(names[i])
            out[oov] = torch.stack([self._oov_cache[i] for i in ids[oov].tolist()])
        return out

    def featurize(self, queries: list[str], docs: list[str]) -> dict[str, torch.Tensor]:
        q, d = self.ids.batch(queries, self.maxqlen), self.ids.batch(docs, self.maxdoclen)
        with torch.no_grad():  # frozen vectors
            q_emb, d_emb = self._embed(q), self._embed(d)
        return {"q": q, "d": d, "q_emb": q_emb, "d_emb": d_emb, "idf": self.idf_table.batch(queries, self.maxqlen)}

    def local(self, q: torch.Tensor, d: torch.Tensor, idf: torch.Tensor) -> torch.Tensor:
        """Local model: (B, Q) ids, (B, D) ids, (B, Q) idf -> (B,)."""
        em = (q.unsqueeze(2) == d.unsqueeze(1)).float()  # (B, Q, D); pad-vs-pad is zeroed by idf 0 only
        if self.hparams["idfweight"]:
            em = em * idf.unsqueeze(2)
        h = F.relu(self.local_conv(em.unsqueeze(1)))  # (B, F, Q, 1)
        return self.local_mlp(h.reshape(h.shape[0], -1)).squeeze(-1)  # filter-major flatten

    def distributed(self, q_emb: torch.Tensor, d_emb: torch.Tensor) -> torch.Tensor:
        B = q_emb.shape[0]
        qh = self.q_pool(self.dropout(F.relu(self.q_conv(q_emb.unsqueeze(1)))))  # (B, F, 1, 1)
        qv = self.q_fc(qh.reshape(B, -1))  # (B, F)
        dh = self.d_pool(self.dropout(F.relu(self.d_conv(d_emb.unsqueeze(1)))))  # (B, F, nhidden, 1)
        dh = dh.reshape(B, 1, dh.shape[1], dh.shape[2])  # (B, 1, F, nhidden)
        dv = self.dropout(F.relu(self.d_conv2(dh))).reshape(B, -1, dh.shape[-1])  # (B, F, nhidden)
        comb = F.relu(self.comb_fc(qv.unsqueeze(2) * dv)).squeeze(-1)  # (B, F)
        return self.out_fc(self.dropout(comb)).squeeze(-1)

    def forward(self, q, d, q_emb, d_emb, idf) -> torch.Tensor:
        return self.local(q, d, idf) + self.distributed(q_emb, d_emb)

    def config(self) -> dict:
        return dict(self.hparams)
