"""PACRR (Hui et al., EMNLP 2017) as Capreolus v0.2.6 implements it (docs/models.md §3)."""

from __future__ import annotations

from typing import Literal, TYPE_CHECKING

import numpy as np

from leakexp.models.base import fp32
from leakexp.models.capreolus import CapreolusReranker, CapreolusSettings, WordCollator
from leakexp.models.vectors import similarity_matrix
from leakexp.runner.schema import PositiveInt

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch
    from torch import nn
    from torch.nn import functional as F


def kmax_pooling(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest values along the last axis, in descending order: (..., D) -> (..., k)."""
    return x.topk(k, dim=-1, sorted=True).values


class PACRR(CapreolusReranker):
    name = "pacrr"
    LABEL = "PACRR"

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800, mingram: int = 1,
                 maxgram: int = 3, nfilters: int = 32, kmax: int = 2, combine: int = 32, idf: bool = True,
                 idf_zero_quirk: bool = True, unit_vectors: bool = False, **_):
        from torch import nn

        super().__init__(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, unit_vectors=unit_vectors)
        self.hparams = dict(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, mingram=mingram,
                            maxgram=maxgram, nfilters=nfilters, kmax=kmax, combine=combine, idf=idf,
                            idf_zero_quirk=idf_zero_quirk, unit_vectors=unit_vectors)
        self.grams = list(range(mingram, maxgram + 1))
        self.convs = nn.ModuleList(nn.Conv2d(1, nfilters, kernel_size=n) for n in self.grams)
        n_feats = len(self.grams) * kmax + (1 if idf else 0)
        self.combine = nn.Sequential(nn.Linear(maxqlen * n_feats, combine), nn.ReLU(), nn.Linear(combine, combine),
                                     nn.ReLU(), nn.Linear(combine, 1))

    @classmethod
    def reads_idf(cls, params: dict) -> bool:
        return bool(params.get("idf", True) and not params.get("idf_zero_quirk", True))

    def query_weights(self, queries) -> np.ndarray | None:
        if not self.hparams["idf"]:
            return None
        if self.hparams["idf_zero_quirk"]:
            # QUIRK (Capreolus' embedtext never fills idf): all zeros, so the softmax feature is constant
            return np.zeros((len(queries), self.maxqlen), dtype=np.float32)
        return self.query_idf(queries)

    def collator(self) -> WordCollator:
        # documents are padded to the batch's longest one; ngram_features adds the rest of maxdoclen
        return WordCollator(maxqlen=self.maxqlen, maxdoclen=self.maxdoclen, idf=bool(self.hparams["idf"]))

    def ngram_features(self, sim: torch.Tensor) -> torch.Tensor:
        """(B, Q, W) similarity -> (B, Q, grams * k): per n-gram size, max over filters then k-max over D.

        Documents are padded to the batch's longest one (W); the rest of maxdoclen consists of all-zero
        windows whose value (max over filters of ReLU(bias)) is added to the k-max candidates, so the result
        equals Capreolus' unmasked padding to maxdoclen exactly.
        """
        import torch
        from torch.nn import functional as F

        B, Q, W = sim.shape
        extra = self.maxdoclen - W
        out = []
        x = sim.unsqueeze(1)  # (B, 1, Q, W)
        for n, conv in zip(self.grams, self.convs):
            h = F.relu(conv(F.pad(x, (0, n - 1, 0, n - 1))))  # right/bottom zero pad keeps (Q, W)
            top = h.max(dim=1).values  # (B, Q, W): max over filters
            if extra > 0:
                pad_value = F.relu(conv.bias).max().to(top.dtype).expand(B, Q, min(extra, self.hparams["kmax"]))
                top = torch.cat([top, pad_value], dim=-1)
            out.append(kmax_pooling(top, self.hparams["kmax"]))
        return torch.cat(out, dim=-1)

    def forward(self, q: torch.Tensor, d: torch.Tensor, idf: torch.Tensor | None = None) -> torch.Tensor:
        import torch
        from torch.nn import functional as F

        sim = similarity_matrix(self.embedding, q, d)  # (B, Q, W), fp32
        feats = self.ngram_features(sim)  # (B, Q, grams * k)
        if idf is not None:
            # softmax over query positions
            feats = torch.cat([feats.float(), F.softmax(idf.float(), dim=1).unsqueeze(-1)], dim=-1)
        # the combining MLP (28 -> 32 -> 32 -> 1, negligible work) in fp32: its score is not rounded to bf16
        return fp32(lambda f: self.combine(f.reshape(f.shape[0], -1)).squeeze(-1), feats)  # query-major flatten

    def config(self) -> dict:
        return dict(self.hparams)


class PACRRSettings(CapreolusSettings):
    name: Literal["pacrr"]
    mingram: PositiveInt
    maxgram: PositiveInt
    nfilters: PositiveInt
    kmax: PositiveInt
    combine: PositiveInt
    idf: bool
    idf_zero_quirk: bool


PACRR.Settings = PACRRSettings
