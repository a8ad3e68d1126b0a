"""The ``t5vocab`` stage: the embedded monoT5's tokenizer and config, a vocabulary trained on the toy world's text
(the demo's monoT5 needs no downloaded weights; with real data ``model.checkpoint`` names T5 weights).
"""

from __future__ import annotations

from pathlib import Path

from leakexp.models.monot5 import train_embedded_tokenizer
from leakexp.runner.stage import Ask, ConfigError, Context, Stage
from leakexp.runner.schema import Settings

EMBEDDED_VOCAB = 4000


def _vocab(ctx: Context, tmp: Path) -> dict:
    pool = ctx.inputs["pool"]
    texts = [t for _, t in pool.docs] + pool.queries.text.tolist()
    for coll in ctx.inputs["collections"]:
        texts += [t for _, t in coll.docs] + [t.title for t in coll.topics.values()]
    train_embedded_tokenizer(texts, tmp / "t5", vocab_size=EMBEDDED_VOCAB)
    return {"texts": len(texts)}


def check_embedded(s: Settings) -> None:
    """The embedded monoT5 learns its vocabulary from the toy world's text: with real data it needs real weights."""
    if "monot5" in s.model_names and s.data.kind != "toy" and s.model_of("monot5").checkpoint == "embedded":
        raise ConfigError(f"models.monot5.checkpoint=embedded needs the toy world (data.kind=toy), not "
                          f"data.kind={s.data.kind}; use the paper's pinned t5-base (experiment=paper: model.checkpoint="
                          f"t5-base@a9723ea7f1b39c1eae772870f3b547bf6ef7e6c1) or a local path to T5 weights")


T5_VOCAB = Stage(
    "t5vocab", version=1, reads=("data.corpora",),
    inputs=lambda p, c: {"pool": Ask.of("pool"),
                         "collections": [Ask.of("collection", corpus=n) for n in c.settings("data").corpora]},
    compute=_vocab, opener=lambda path: path / "t5", check=check_embedded,
    describe="the embedded monoT5's tokenizer and config (a vocabulary trained on the toy world's text)",
)
