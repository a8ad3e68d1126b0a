"""What the Hugging Face re-rankers share to read texts once: their tokenizer loaded from the settings alone,
an id of its content, texts -> :class:`Tokens` in batched calls, and right-padded batch tensors; and the embedded
T5's vocabulary, learnt offline from the toy world's text (monoT5's ``checkpoint: embedded``)."""

from __future__ import annotations

import functools
import hashlib
import io
import json
from pathlib import Path
from typing import Callable, Iterable, Sequence, TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from leakexp.lib import hub
from leakexp.models.compute import bucket_width
from leakexp.models.tokens import Tokens

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import torch


TEXTS_PER_CALL = 1000  # texts per tokenizer call


@functools.lru_cache(maxsize=4)
def load_tokenizer(kind: str, path: str):
    """The tokenizer (``kind``: "auto" or "t5") of a checkpoint (a local path, or a pinned hub name whose cached folder
    is read: leakexp.lib.hub), without any weights; cached per process (tokenizing never changes it)."""
    from transformers import AutoTokenizer, T5Tokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    return (T5Tokenizer if kind == "t5" else AutoTokenizer).from_pretrained(hub.local(path))


def tokenizer_id(tokenizer) -> str:
    """sha256 of what decides a tokenizer's ids: its Rust pipeline (normalizer, pre-tokenizer, vocabulary, added
    tokens; without the per-call truncation and padding) and the special-token ids. Library versions are not part
    of it (nothing else in the store is keyed by them either)."""
    pipeline = json.loads(tokenizer.backend_tokenizer.to_str())
    pipeline.pop("truncation", None)
    pipeline.pop("padding", None)
    special = {k: getattr(tokenizer, k, None) for k in ("pad_token_id", "eos_token_id", "cls_token_id",
                                                         "sep_token_id", "unk_token_id", "pad_token_type_id")}
    blob = json.dumps({"class": type(tokenizer).__name__, "pipeline": pipeline, "special": special},
                      sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def encode_texts(tokenizer, texts: Sequence[str], cut: int, *, progress: bool = False, desc: str = "tokens",
                 wrap: Callable[[str], str] | None = None) -> Tokens:
    """Token ids (no special tokens) of each text (``wrap(text)`` when given), each row cut to its first ``cut``
    ids; ``full`` = the uncut length. Tokenised ``TEXTS_PER_CALL`` texts per call."""
    texts = list(texts)
    full = np.zeros(len(texts), dtype=np.int64)
    parts: list[np.ndarray] = []
    with tqdm(total=len(texts), desc=desc, unit="text", disable=not progress) as bar:
        for s in range(0, len(texts), TEXTS_PER_CALL):
            chunk = texts[s : s + TEXTS_PER_CALL]
            if wrap is not None:
                chunk = [wrap(t) for t in chunk]
            rows = tokenizer(chunk, add_special_tokens=False, return_attention_mask=False,
                             return_token_type_ids=False, verbose=False)["input_ids"]
            full[s : s + len(rows)] = [len(r) for r in rows]
            kept = np.minimum(full[s : s + len(rows)], cut)
            parts.append(np.fromiter((i for r in rows for i in r[:cut]), dtype=np.int32, count=int(kept.sum())))
            bar.update(len(chunk))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.minimum(full, cut), out=offsets[1:])
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return Tokens(ids, offsets, full.astype(np.int32))


def check_rows(tokens: Tokens, need: np.ndarray, what: str) -> None:
    """Raise when a row holds fewer ids than a batch needs of it although the text had more (tokens stored for a
    shorter cut than this model reads)."""
    short = (tokens.lengths < need) & (tokens.lengths < tokens.full)
    if short.any():
        i = int(np.flatnonzero(short)[0])
        raise ValueError(f"{what} row {i} holds {int(tokens.lengths[i])} of {int(tokens.full[i])} token ids but "
                         f"{int(need[i])} are read: tokens stored for another max_length?")


def pad_rows(rows: list[np.ndarray], pad: int, multiple: int = 0,
             max_length: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, width) int64 ids right-padded with ``pad``, and the int64 attention mask; the width is the longest row's,
    padded up to a multiple of ``multiple`` (not beyond ``max_length``) for a compiled model's static shapes
    (:func:`leakexp.models.compute.bucket_width`)."""
    import torch

    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    width = bucket_width(int(lengths.max(initial=0)), max_length, multiple)
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    return torch.from_numpy(ids), torch.from_numpy(mask)


# -- the embedded T5: a vocabulary learnt offline from the toy world's text (the t5vocab stage) -----------------
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
