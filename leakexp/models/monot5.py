"""monoT5 (Nogueira et al. 2020): ``Query: q Document: d Relevant:`` -> ``true`` / ``false``; the score is
log P(true) at the first decoder step, from a log-softmax over the two logits (docs/models.md §6-7).

The embedded default is a small randomly initialised T5 whose SentencePiece vocabulary is trained on the
toy world's text (:func:`train_embedded_tokenizer`), so that ``T5Tokenizer`` and pyterrier-t5 load it offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence, TYPE_CHECKING

import numpy as np

from leakexp.lib import hub
from leakexp.models.base import HFReranker, ModelInput, ModelSettings, Module, fp32, padding_mask_4d
from leakexp.models.compute import WIDTH_MULTIPLE, Compute, T5CudaSettings
from leakexp.models.hftokens import (EMBEDDED_T5, T5_BASE, check_rows, encode_texts, load_tokenizer,  # noqa: F401
                                     pad_rows, tokenizer_id, train_embedded_tokenizer)
from leakexp.models.tokens import Tokens
from leakexp.runner.schema import Name, PositiveInt

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch
    from torch import nn
    from torch.nn import functional as F


PROMPT = "Query: {q} Document: {d} Relevant:"
# The prompt in two parts, split between "Document:" and the space that follows it: ':' then ' ' is always a
# grapheme break and a whitespace boundary, and no added token holds a space, so the T5 tokenizer (normaliser per
# grapheme, whitespace pre-tokenizer) gives tokens(PROMPT) == tokens(QUERY_PART) + tokens(DOC_PART) for any q and d.
# The document part keeps its leading space and, for PyGaggle's cut, " Relevant:": no boundary lies next to d.
QUERY_PART = "Query: {} Document:"
DOC_PART = " {} Relevant:"  # truncation=pygaggle
DOC_HEAD = " {}"  # truncation=keep_prompt: "Query: q Document: d" is cut, then "Relevant:" </s> appended
class MonoT5(HFReranker):
    name = "monot5"
    LABEL = "monoT5"
    CHECKPOINT_ALTERNATIVE = "embedded (a random T5 whose vocabulary is learnt from the toy world: experiment=demo only)"
    objective = "pointwise"
    hf_attr = "t5"

    def __init__(self, *, checkpoint: str = "t5-base", max_length: int = 512, truncation: str = "pygaggle",
                 attn_implementation: str = "sdpa", **_):
        import torch

        super().__init__()
        from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer
        from transformers.utils import logging as hf_logging

        if truncation not in ("pygaggle", "keep_prompt"):
            raise ValueError(f"monot5: truncation={truncation!r}; use pygaggle or keep_prompt")
        hf_logging.disable_progress_bar()
        self.hparams = dict(checkpoint=str(checkpoint), max_length=max_length, truncation=truncation,
                            attn_implementation=attn_implementation)
        path = Path(hub.local(str(checkpoint)))  # a pinned hub name (NAME@COMMIT): its folder in the cache
        self.tokenizer = T5Tokenizer.from_pretrained(str(path))
        if (path / "embedded.json").exists():  # random initialisation, seeded by the caller
            self.t5 = T5ForConditionalGeneration._from_config(T5Config.from_pretrained(str(path)),
                                                              attn_implementation=attn_implementation)
        else:
            self.t5 = T5ForConditionalGeneration.from_pretrained(str(path), attn_implementation=attn_implementation)
        self.true_id = self.tokenizer.encode("true")[0]
        self.false_id = self.tokenizer.encode("false")[0]
        self.eos_id = int(self.tokenizer.eos_token_id)  # a plain int: the compiled loss reads no tokenizer
        self.prompt_ids = self.tokenizer("Relevant:")["input_ids"]  # [..., </s>]
        check_split(self.tokenizer)  # the prompt's token ids are gathered from stored parts
        # the rows of lm_head that scoring reads, as a device tensor (an index list would be copied every batch)
        self.register_buffer("two_ids", torch.tensor([self.false_id, self.true_id]), persistent=False)

    @classmethod
    def artifacts(cls, settings) -> dict[str, ModelInput]:
        """``checkpoint: embedded``: a random T5 whose vocabulary the ``t5vocab`` stage learns from the toy world."""
        return {"vocab": ModelInput("t5vocab", "checkpoint")} if settings.checkpoint == "embedded" else {}

    # -- token ids (leakexp.models.tokens) -------------------------------------------------------------
    ENCODING = ("checkpoint", "max_length", "truncation")

    @classmethod
    def document_tokens(cls, settings: dict, texts: Sequence[str], *, progress: bool = False) -> Tokens:
        return _doc_tokens(_tokenizer(settings), settings, texts, progress)

    @classmethod
    def encoding_id(cls, settings: dict) -> str:
        return tokenizer_id(_tokenizer(settings))

    def encode_docs(self, texts: Sequence[str]) -> Tokens:
        return _doc_tokens(self.tokenizer, self.hparams, texts, False)

    def encode_queries(self, texts: Sequence[str], docs: Tokens) -> Tokens:
        return encode_texts(self.tokenizer, texts, _query_cut(self.hparams, len(self.prompt_ids)),
                            desc="query tokens", wrap=QUERY_PART.format)

    def collator(self) -> "PromptCollator":
        return PromptCollator(max_length=int(self.hparams["max_length"]), truncation=self.hparams["truncation"],
                              eos_id=self.tokenizer.eos_token_id, pad_id=self.tokenizer.pad_token_id,
                              prompt_ids=tuple(self.prompt_ids), multiple=WIDTH_MULTIPLE if self.compute.compile else 0)

    def _encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, L, d_model) encoder states. ``compute.bias_once``: the relative position bias (1, H, L, L) merged with a
        padded batch's mask into one (B, H, L, L) bias, once, then every layer reads it (transformers' SDPA path
        merges them in each layer: integrations/sdpa_attention.py ``create_position_bias_mask``); the same sums."""
        import torch

        enc = self.t5.encoder
        if not self.compute.bias_once:
            return enc(input_ids=input_ids, attention_mask=padding_mask_4d(attention_mask, self.t5.config)).last_hidden_state
        h = enc.dropout(enc.embed_tokens(input_ids))
        n = input_ids.shape[1]
        bias = enc.block[0].layer[0].SelfAttention.compute_bias(n, n, device=h.device)  # (1, H, L, L)
        if attention_mask is not None:
            keep = attention_mask[:, None, None, :].bool()
            bias = torch.where(keep, bias, torch.finfo(bias.dtype).min).contiguous()  # as SDPA reads it: no copy per layer
        for block in enc.block:
            h = block(h, None, bias)[0]  # no mask: the bias holds it
        return enc.dropout(enc.final_layer_norm(h))

    def _decoder_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                        decoder_input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) decoder outputs as the LM head reads them (scaled when the config says so). The decoder
        runs without its cache (``use_cache=False``: nothing is generated after these T steps, and the cache would
        copy every layer's cross-attention keys and values)."""
        enc = self._encode(input_ids, attention_mask)
        dec = self.t5.decoder(input_ids=decoder_input_ids, encoder_hidden_states=enc,
                              encoder_attention_mask=padding_mask_4d(attention_mask, self.t5.config),
                              use_cache=None if self.compute.legacy else False).last_hidden_state
        if getattr(self.t5.config, "scale_decoder_outputs", False):
            dec = dec * (self.t5.model_dim**-0.5)
        return dec

    def _two_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """(B, 2) fp32 logits of ``false`` and ``true`` at the first decoder step, without the full vocabulary."""
        import torch
        from torch.nn import functional as F

        start = torch.full((input_ids.shape[0], 1), self.t5.config.decoder_start_token_id, device=input_ids.device)
        h = self._decoder_states(input_ids, attention_mask, start)[:, 0]
        w = self.t5.lm_head.weight.index_select(0, self.two_ids)
        return fp32(F.linear, h, w)  # the score layer in fp32 (bf16 logits would tie documents)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        from torch.nn import functional as F

        return fp32(lambda z: F.log_softmax(z, dim=-1)[:, 1], self._two_logits(input_ids, attention_mask))  # log P(true)

    def pointwise_loss(self, feats: dict, labels: torch.Tensor, z_loss: float = 0.0) -> torch.Tensor:
        """Cross-entropy on the target text ``true`` / ``false`` followed by </s>, as monoT5 is fine-tuned (what
        ``T5ForConditionalGeneration(labels=...)`` computes), with the LM head and the loss in fp32. The targets
        are built on the device (no host sync).

        ``z_loss``: Mesh TF's term, added to each target token's cross-entropy before the tokens are averaged:
        ``z_loss * log_z^2``, log_z the logsumexp of the token's logits over the vocabulary (tensorflow/mesh @
        da90793 mesh_tensorflow/layers.py lines 1109-1116; transformer.py lines 835-848: the per-token losses,
        without padding, are summed and divided by the targets' size; here every target is 2 tokens, no padding).
        It keeps log_z near 0; the T5 models that Mesh TF trains use its default 1e-4 (transformer.py line 712)."""
        return self._core("loss", self._loss)(feats, labels, z_loss)

    def _loss(self, feats: dict, labels: torch.Tensor, z_loss: float) -> torch.Tensor:
        import torch
        from torch.nn import functional as F

        ids = feats["input_ids"]
        word = torch.where(labels.to(ids.device).bool(), self.true_id, self.false_id)
        target = torch.stack([word, torch.full_like(word, self.eos_id)], dim=1)  # (B, 2)
        shifted = torch.stack([torch.full_like(word, self.t5.config.decoder_start_token_id), word], dim=1)
        h = self._decoder_states(ids, feats.get("attention_mask"), shifted)

        def loss(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            logits = F.linear(h, w).flatten(0, 1)
            if not z_loss:
                return F.cross_entropy(logits, target.flatten())
            log_z = torch.logsumexp(logits, dim=-1)
            token = log_z - logits.gather(1, target.reshape(-1, 1)).squeeze(1)  # each token's cross-entropy
            return (token + z_loss * log_z.square()).mean()

        return fp32(loss, h, self.t5.lm_head.weight)

    # -- how it computes on a GPU (leakexp.models.compute) ----------------------------------------------
    def use(self, compute: Compute) -> "MonoT5":
        super().use(compute)
        for block in self.t5.decoder.block:  # the decoder's cross-attention, for its one query or as transformers has it
            layer = block.layer[1]
            wrapped = isinstance(layer.EncDecAttention, SingleQueryCrossAttention)
            if compute.single_query and not wrapped:
                layer.EncDecAttention = SingleQueryCrossAttention(layer.EncDecAttention)
            elif wrapped and not compute.single_query:
                layer.EncDecAttention = layer.EncDecAttention.attn
        return self

    def cast_for_scoring(self) -> None:
        """The encoder in bf16 (with its own bf16 copy of the shared embedding) and the decoder's cross-attention keys
        and values, computed over every encoder position, in bf16 too; the rest of the one decoder step, monoT5's
        score head, stays fp32 (its residual stream, norms and feed-forward at one position cost little; in bf16
        they made the scores of a small T5 drift 1.0-1.9x as far from fp32 as bf16 autocast does: docs/models.md,
        "How monoT5 and monoBERT compute on a GPU")."""
        import torch
        from torch import nn

        enc = self.t5.encoder
        enc.embed_tokens = nn.Embedding.from_pretrained(enc.embed_tokens.weight.detach().to(torch.bfloat16))
        enc.block.to(torch.bfloat16)
        enc.final_layer_norm.to(torch.bfloat16)
        for block in self.t5.decoder.block:
            cross = block.layer[1].EncDecAttention
            cross = getattr(cross, "attn", cross)
            cross.k, cross.v = Bf16Projection(cross.k), Bf16Projection(cross.v)


class Bf16Projection(Module):
    """A bias-free projection computed in bf16 (a frozen bf16 copy of the weight, a bf16 input), its output in fp32:
    the keys and values of monoT5's cross-attention over every encoder position, inside its fp32 decoder step."""

    def __init__(self, linear: nn.Linear):
        import torch
        from torch import nn

        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch
        from torch.nn import functional as F

        return F.linear(x.to(torch.bfloat16), self.weight).float()


class SingleQueryCrossAttention(Module):
    """T5's cross-attention (``attn``, a ``T5Attention`` without position bias) computed from its queries: per head,
    scores = (q W_k) . enc and output = (p . enc) W_v, so the keys and values of every encoder position, (B, L, H *
    d_kv) each, are never formed. For monoT5's one decoder query that is 2 H L d_model multiply-adds per layer instead
    of 2 L d_model H d_kv (64x fewer for t5-base); the same attention summed in another order."""

    def __init__(self, attn: nn.Module):
        super().__init__()
        self.attn = attn
        self.train(attn.training)  # dropout as the module it wraps (a model in eval mode stays so)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None, cache=None, **kwargs):
        import torch
        from torch.nn import functional as F

        a = self.attn
        b, t, _ = hidden_states.shape
        heads, d_kv = a.n_heads, a.key_value_proj_dim
        q = a.q(hidden_states).view(b, t, heads, d_kv)
        enc = key_value_states.to(q.dtype).unsqueeze(1)  # (B, 1, L, d_model)
        wk = a.k.weight.to(q.dtype).view(heads, d_kv, -1)
        wv = a.v.weight.to(q.dtype).view(heads, d_kv, -1)
        scores = torch.matmul(torch.einsum("bthk,hkd->bhtd", q, wk), enc.transpose(-1, -2))  # (B, H, T, L); T5: no scaling
        if mask is not None:  # SDPA's boolean keep-mask or eager attention's additive one
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool \
                else scores + mask
        p = F.dropout(F.softmax(scores, dim=-1), p=a.dropout, training=self.training)
        out = torch.einsum("bhtd,hkd->bthk", torch.matmul(p, enc), wv).reshape(b, t, heads * d_kv)
        return a.o(out), position_bias, None


# -- token ids -> the tensors of the prompt tokenised whole ----------------------------------------------------
def _tokenizer(settings: dict):
    tok = load_tokenizer("t5", str(settings.get("checkpoint", "t5-base")))
    check_split(tok)
    return tok


# texts next to which a split could go wrong: spaces of all kinds, combining and prepended marks, NFKC forms
PROBES = ("", " ", "x  y ", "\u00a0a\tb\n", "\u0301e\u0301", "a\u0600", "\u0903\u200d", "\ufb01 \uff21", "\u65e5\u672c",
          "</s> <pad>", "Query: Document: Relevant:")


def _split_ok(tokenizer) -> bool:
    def ids(texts):
        return tokenizer(texts, add_special_tokens=False)["input_ids"]

    pairs = [(q, d) for q in PROBES for d in PROBES]
    whole = ids([PROMPT.format(q=q, d=d) for q, d in pairs])
    head = ids([f"Query: {q} Document: {d}" for q, d in pairs])
    query = ids([QUERY_PART.format(q) for q, _ in pairs])
    doc, doc_head = ids([DOC_PART.format(d) for _, d in pairs]), ids([DOC_HEAD.format(d) for _, d in pairs])
    return all(w == a + b and h == a + c for w, h, a, b, c in zip(whole, head, query, doc, doc_head))


def check_split(tokenizer) -> None:
    """Refuse a tokenizer whose prompt ids are not its query part's ids followed by its document part's (a
    pre-tokenizer that does not split at whitespace); a few probe texts, once per tokenizer."""
    if getattr(tokenizer, "_leakexp_split_ok", None) is None:
        tokenizer._leakexp_split_ok = _split_ok(tokenizer)
    if not tokenizer._leakexp_split_ok:
        raise ValueError(f"monot5: the tokenizer {tokenizer.name_or_path!r} does not tokenise the prompt as its "
                         f"query part followed by its document part; its token ids cannot be stored apart")


def _query_cut(settings: dict, prompt_len: int) -> int:
    """The most ids of the query part the model reads: all but </s> (pygaggle), all but "Relevant:" </s>
    (keep_prompt)."""
    max_length = int(settings.get("max_length", 512))
    return max_length - 1 if settings.get("truncation", "pygaggle") == "pygaggle" else max_length - prompt_len


def _doc_tokens(tokenizer, settings: dict, texts: Sequence[str], progress: bool) -> Tokens:
    """Each document's part of the prompt (" d Relevant:" for pygaggle, " d" for keep_prompt), cut to the most the
    model can read of it (the query part "Query: q Document:" is at least one id)."""
    pygaggle = settings.get("truncation", "pygaggle") == "pygaggle"
    prompt_len = 1 if pygaggle else len(tokenizer("Relevant:")["input_ids"])
    cut = max(_query_cut(settings, prompt_len) - 1, 0)
    return encode_texts(tokenizer, texts, cut, progress=progress, desc="monot5 document tokens",
                        wrap=(DOC_PART if pygaggle else DOC_HEAD).format)


@dataclass(frozen=True)
class PromptCollator:
    """Aligned query-part and document-part rows -> ``input_ids`` and ``attention_mask`` (int64), equal to the T5
    tokenizer on the whole prompt: ``pygaggle``: ``tokenizer(PROMPT..., max_length=max_length, truncation=True,
    padding="longest")`` = the first max_length - 1 ids, then </s>; ``keep_prompt``: the ids of "Query: q Document:
    d" cut to max_length - len(prompt_ids), then ``prompt_ids`` ("Relevant:" </s>). Right-padded with ``pad_id``;
    plain fields only, so it pickles into DataLoader workers."""

    max_length: int
    truncation: str
    eos_id: int
    pad_id: int
    prompt_ids: tuple[int, ...]
    multiple: int = 0  # widths padded up to a multiple of it (a compiled model's static shapes); 0: the longest row

    def __call__(self, q: Tokens, d: Tokens) -> dict[str, torch.Tensor]:
        if len(q) != len(d):
            raise ValueError(f"{len(q)} query rows but {len(d)} document rows")
        if self.truncation == "pygaggle":
            keep, tail = self.max_length - 1, np.array([self.eos_id], dtype=np.int64)
        else:
            keep, tail = self.max_length - len(self.prompt_ids), np.asarray(self.prompt_ids, dtype=np.int64)
        kq = np.minimum(q.full.astype(np.int64), keep)
        check_rows(q, kq, "query")
        check_rows(d, np.minimum(d.full.astype(np.int64), keep - kq), "document")
        rows = [np.concatenate([q.row(i)[:keep], d.row(i)[: keep - kq[i]], tail]).astype(np.int64)
                for i in range(len(q))]
        ids, mask = pad_rows(rows, self.pad_id, self.multiple, self.max_length)
        return {"input_ids": ids, "attention_mask": mask}


class MonoT5Settings(ModelSettings):
    name: Literal["monot5"]
    checkpoint: Name  # embedded (toy world), a Hugging Face name (t5-base) or a local directory
    max_length: PositiveInt
    truncation: Literal["pygaggle", "keep_prompt"]
    attn_implementation: Literal["sdpa", "eager"]
    cuda: T5CudaSettings  # how it computes on CUDA (leakexp.models.compute)


MonoT5.Settings = MonoT5Settings
