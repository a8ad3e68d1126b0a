"""KNRM (Xiong et al., SIGIR 2017) as Capreolus v0.2.6 implements it (docs/models.md §2)."""

from __future__ import annotations

from typing import Literal, TYPE_CHECKING

from leakexp.models.base import fp32

from leakexp.models.capreolus import CapreolusReranker, CapreolusSettings
from leakexp.models.vectors import similarity_matrix

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch


MUS = (-0.9, -0.7, -0.5, -0.3, -0.1, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def kernel_features(sim: torch.Tensor, mus: torch.Tensor, sigmas: torch.Tensor, *,
                    mask_doc_padding: bool = False, doc_mask: torch.Tensor | None = None,
                    extra_padding: int = 0) -> torch.Tensor:
    """Log soft-TF per kernel summed over valid query terms: (B, Q, D) -> (B, K).

    Capreolus sums the kernels over *all* document positions, padding included (``mask_doc_padding=False``),
    and counts a query term as valid iff its similarity row sums to something other than 0.
    ``extra_padding`` padded positions (similarity 0) not present in ``sim`` are added analytically, so a
    batch padded to its longest document scores exactly like one padded to maxdoclen.
    """
    import torch

    k = torch.exp(-0.5 * (sim.unsqueeze(-1) - mus) ** 2 / sigmas**2)  # (B, Q, D, K)
    if mask_doc_padding and doc_mask is not None:
        k = k * doc_mask[:, None, :, None]
    soft_tf = k.sum(dim=2)  # (B, Q, K)
    if extra_padding and not mask_doc_padding:
        soft_tf = soft_tf + extra_padding * torch.exp(-0.5 * mus**2 / sigmas**2)
    valid = (sim.sum(dim=2) != 0).float().unsqueeze(-1)  # (B, Q, 1)
    return (torch.log(soft_tf + 1e-6) * valid).sum(dim=1)  # (B, K)


class KNRM(CapreolusReranker):
    name = "knrm"
    LABEL = "KNRM"

    def __init__(self, *, embeddings: str = "bundled", maxqlen: int = 4, maxdoclen: int = 800,
                 gradkernels: bool = True, singlefc: bool = True, scoretanh: bool = False,
                 finetune: bool = False, mask_doc_padding: bool = False, unit_vectors: bool = False, **_):
        # Capreolus: frozen embeddings unless finetune=True
        import torch
        from torch import nn

        super().__init__(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, finetune=finetune,
                         unit_vectors=unit_vectors)
        self.hparams = dict(embeddings=embeddings, maxqlen=maxqlen, maxdoclen=maxdoclen, gradkernels=gradkernels,
                            singlefc=singlefc, scoretanh=scoretanh, finetune=finetune,
                            mask_doc_padding=mask_doc_padding, unit_vectors=unit_vectors)
        mus = torch.tensor(MUS)
        sigmas = torch.tensor([0.001 if m == 1.0 else 0.1 for m in MUS])
        # each mu and sigma is its own trainable scalar in Capreolus (gradkernels=True)
        self.mus = nn.Parameter(mus, requires_grad=gradkernels)
        self.sigmas = nn.Parameter(sigmas, requires_grad=gradkernels)
        self.combine = (nn.Linear(len(MUS), 1) if singlefc
                        else nn.Sequential(nn.Linear(len(MUS), 30), nn.Tanh(), nn.Linear(30, 1)))

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        import torch

        sim = similarity_matrix(self.embedding, q, d)  # (B, Q, D), fp32: kernels need it (sigma 0.001)

        def head(sim: torch.Tensor) -> torch.Tensor:  # kernels, log soft-TF and the score layer: all fp32
            feats = kernel_features(sim, self.mus, self.sigmas, mask_doc_padding=self.hparams["mask_doc_padding"],
                                    doc_mask=(d != 0).float(), extra_padding=self.hparams["maxdoclen"] - d.shape[1])
            score = self.combine(feats).squeeze(-1)  # (B,)
            return torch.tanh(score) if self.hparams["scoretanh"] else score

        return fp32(head, sim)

    def config(self) -> dict:
        return dict(self.hparams)


class KNRMSettings(CapreolusSettings):
    name: Literal["knrm"]
    gradkernels: bool
    singlefc: bool
    scoretanh: bool
    finetune: bool
    mask_doc_padding: bool


KNRM.Settings = KNRMSettings
