"""monoT5 (Nogueira et al. 2020): ``Query: q Document: d Relevant:`` -> ``true`` / ``false``; the score is
log P(true) at the first decoder step, from a log-softmax over the two logits (MODELS.md §6-7).

The embedded default is a small randomly initialised T5 whose SentencePiece vocabulary is trained on the
toy world's text (:func:`train_embedded_tokenizer`), so that ``T5Tokenizer`` and pyterrier-t5 load it offline.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Iterable

import torch
from torch.nn import functional as F

from leakexp.models.base import HFReranker, fp32
from leakexp.stage import Ask, Context, Stage

PROMPT = "Query: {q} Document: {d} Relevant:"
# A small T5 for CPUs; `n_positions` stays 512 like t5-base (pyterrier-t5 reads it)
EMBEDDED_T5 = dict(d_model=128, d_kv=32, d_ff=256, num_layers=2, num_decoder_layers=2, num_heads=4,
                   relative_attention_num_buckets=32, dropout_rate=0.1, feed_forward_proj="relu",
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, n_positions=512)
# The t5-base architecture (huggingface t5-base config.json), for GPU tests and benchmarks at the paper's shapes
# without downloading weights: same layers and widths, vocabulary padded to t5-base's 32,128 rows.
T5_BASE = dict(EMBEDDED_T5, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_decoder_layers=12, num_heads=12,
               vocab_size=32128)


def train_embedded_tokenizer(texts: Iterable[str], out: Path, vocab_size: int = 4000,
                             architecture: dict | None = None) -> Path:
    """A deterministic SentencePiece unigram vocabulary in T5's id layout (pad 0, eos 1, unk 2) in ``out``,
    with the config of a randomly initialised T5 (``architecture``: EMBEDDED_T5 by default, or T5_BASE).

    ``true``, ``false`` and the prompt words are user-defined pieces, so each is one token.
    """
    import sentencepiece as spm
    from transformers import T5Tokenizer

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(list(texts)), model_writer=model, vocab_size=vocab_size, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1, shuffle_input_sentence=False,
        input_sentence_size=0, character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
        user_defined_symbols=["▁true", "▁false", "▁Query:", "▁Document:", "▁Relevant:"],
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spiece.model").write_bytes(model.getvalue())
    tok = T5Tokenizer.from_pretrained(str(out), extra_ids=0)
    for word in ("true", "false"):
        ids = tok.encode(word)
        if len(ids) != 2:  # one piece + </s>
            raise RuntimeError(f"the embedded T5 vocabulary splits {word!r} into {tok.convert_ids_to_tokens(ids)}")
    tok.save_pretrained(str(out))
    from transformers import T5Config

    arch = dict(architecture or EMBEDDED_T5)
    arch["vocab_size"] = max(int(arch.get("vocab_size", 0)), len(tok))
    T5Config(**arch).save_pretrained(str(out))
    (out / "embedded.json").write_text(json.dumps({"random_init": True}) + "\n")
    return out


class MonoT5(HFReranker):
    name = "monot5"
    objective = "pointwise"
    hf_attr = "t5"

    def __init__(self, *, checkpoint: str = "t5-base", max_length: int = 512, truncation: str = "pygaggle",
                 attn_implementation: str = "sdpa", **_):
        super().__init__()
        from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer
        from transformers.utils import logging as hf_logging

        if truncation not in ("pygaggle", "keep_prompt"):
            raise ValueError(f"monot5: truncation={truncation!r}; use pygaggle or keep_prompt")
        hf_logging.disable_progress_bar()
        self.hparams = dict(checkpoint=str(checkpoint), max_length=max_length, truncation=truncation,
                            attn_implementation=attn_implementation)
        path = Path(str(checkpoint))
        self.tokenizer = T5Tokenizer.from_pretrained(str(checkpoint))
        if (path / "embedded.json").exists():  # random initialisation, seeded by the caller
            self.t5 = T5ForConditionalGeneration._from_config(T5Config.from_pretrained(str(path)),
                                                              attn_implementation=attn_implementation)
        else:
            self.t5 = T5ForConditionalGeneration.from_pretrained(str(checkpoint), attn_implementation=attn_implementation)
        self.true_id = self.tokenizer.encode("true")[0]
        self.false_id = self.tokenizer.encode("false")[0]
        self.prompt_ids = self.tokenizer("Relevant:")["input_ids"]  # [..., </s>]
        # the rows of lm_head that scoring reads, as a device tensor (an index list would be copied every batch)
        self.register_buffer("two_ids", torch.tensor([self.false_id, self.true_id]), persistent=False)

    def featurize(self, queries: list[str], docs: list[str]) -> dict[str, torch.Tensor]:
        max_length = self.hparams["max_length"]
        if self.hparams["truncation"] == "pygaggle":
            # PyGaggle: the whole prompt, cut at max_length (a long document loses "Relevant:"), then </s>
            return dict(self.tokenizer([PROMPT.format(q=q, d=d) for q, d in zip(queries, docs)], max_length=max_length,
                                       truncation=True, padding="longest", return_tensors="pt"))
        # keep_prompt (pyterrier-t5): cut the query-document part so that "Relevant:" </s> always fits
        head = self.tokenizer([f"Query: {q} Document: {d}" for q, d in zip(queries, docs)])["input_ids"]
        keep = max_length - len(self.prompt_ids)
        rows = [ids[:-1][:keep] + self.prompt_ids for ids in head]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        return {"input_ids": ids, "attention_mask": (torch.arange(width)[None, :] < torch.tensor([len(r) for r in rows])[:, None]).long()}

    def _decoder_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        decoder_input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) decoder outputs as the LM head reads them (scaled when the config says so)."""
        enc = self.t5.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        dec = self.t5.decoder(input_ids=decoder_input_ids, encoder_hidden_states=enc,
                              encoder_attention_mask=attention_mask).last_hidden_state
        if getattr(self.t5.config, "scale_decoder_outputs", False):
            dec = dec * (self.t5.model_dim**-0.5)
        return dec

    def _two_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, 2) fp32 logits of ``false`` and ``true`` at the first decoder step, without the full vocabulary."""
        start = torch.full((input_ids.shape[0], 1), self.t5.config.decoder_start_token_id, device=input_ids.device)
        h = self._decoder_states(input_ids, attention_mask, start)[:, 0]
        w = self.t5.lm_head.weight.index_select(0, self.two_ids)
        return fp32(F.linear, h, w)  # the score layer in fp32 (bf16 logits would tie documents)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return fp32(lambda z: F.log_softmax(z, dim=-1)[:, 1], self._two_logits(input_ids, attention_mask))  # log P(true)

    def pointwise_loss(self, feats: dict, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy on the target text ``true`` / ``false`` followed by </s>, as monoT5 is fine-tuned (what
        ``T5ForConditionalGeneration(labels=...)`` computes), with the LM head and the loss in fp32. The targets
        are built on the device (no host sync)."""
        ids = feats["input_ids"]
        word = torch.where(labels.to(ids.device).bool(), self.true_id, self.false_id)
        target = torch.stack([word, torch.full_like(word, self.tokenizer.eos_token_id)], dim=1)  # (B, 2)
        shifted = torch.stack([torch.full_like(word, self.t5.config.decoder_start_token_id), word], dim=1)
        h = self._decoder_states(ids, feats["attention_mask"], shifted)
        return fp32(lambda h, w: F.cross_entropy(F.linear(h, w).flatten(0, 1), target.flatten()), h,
                    self.t5.lm_head.weight)


# -- the embedded tokenizer stage -------------------------------------------------------------------------
EMBEDDED_VOCAB = 4000


def _vocab(ctx: Context, tmp: Path) -> dict:
    pool = ctx.inputs["pool"]
    texts = [t for _, t in pool.docs] + pool.queries.text.tolist()
    for coll in ctx.inputs["collections"]:
        texts += [t for _, t in coll.docs] + [t.title for t in coll.topics.values()]
    train_embedded_tokenizer(texts, tmp / "t5", vocab_size=EMBEDDED_VOCAB)
    return {"texts": len(texts)}


def check_embedded(cfg) -> None:
    """The embedded monoT5 learns its vocabulary from the toy world's text: with real data it needs real weights."""
    from leakexp.config import resolved_model_config
    from leakexp.stage import ConfigError

    models = dict.fromkeys([*cfg.grid.models, cfg.model.name])
    if "monot5" in models and cfg.data.kind != "toy" and resolved_model_config(cfg, "monot5").get("checkpoint") == "embedded":
        raise ConfigError(f"models.monot5.checkpoint=embedded needs the toy world (data.kind=toy), not "
                          f"data.kind={cfg.data.kind}; use model.checkpoint=t5-base (or a local path to T5 weights)")


T5_VOCAB = Stage(
    "t5vocab", version=1, reads=("data.corpora",),
    inputs=lambda p, c: {"pool": Ask.of("pool"),
                         "collections": [Ask.of("collection", corpus=n) for n in c.at("data.corpora")]},
    compute=_vocab, opener=lambda path: path / "t5", check=check_embedded,
    describe="the embedded monoT5's tokenizer and config (a vocabulary trained on the toy world's text)",
)
