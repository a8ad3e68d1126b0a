"""The ``t5vocab`` stage: the embedded T5's tokenizer and config, a vocabulary trained on the toy world's text (the
demo's monoT5 needs no downloaded weights: its ``checkpoint: embedded`` reads this artifact, as its class declares;
with real data a model's ``checkpoint`` names real weights).
"""

from __future__ import annotations

from pathlib import Path

from leakexp.models import get
from leakexp.models.hftokens import train_embedded_tokenizer
from leakexp.runner.schema import Settings
from leakexp.stages.sources import pool_source
from leakexp.runner.stage import Ask, Config, ConfigError, Context, Stage, register_stage

EMBEDDED_VOCAB = 4000


@register_stage
class T5Vocab(Stage):
    """the embedded T5's tokenizer and config (a vocabulary trained on the toy world's text)"""

    name, version = "t5vocab", 1
    reads = ("data.corpora",)

    def inputs(self, p: dict, c: Config) -> dict:
        return {"pool": Ask.of("pool"),
                "collections": [Ask.of("collection", corpus=n) for n in c.settings("data").corpora]}

    def compute(self, ctx: Context, tmp: Path) -> dict:
        pool = ctx.inputs["pool"]
        texts = [t for _, t in pool.docs] + pool.queries.text.tolist()
        for coll in ctx.inputs["collections"]:
            texts += [t for _, t in coll.docs] + [t.title for t in coll.topics.values()]
        train_embedded_tokenizer(texts, tmp / "t5", vocab_size=EMBEDDED_VOCAB)
        return {"texts": len(texts)}

    def opener(self, path: Path) -> Path:
        return path / "t5"

    def check(self, s: Settings) -> None:
        """The vocabulary is learnt from the toy world's text: a model that reads it needs the toy world, and with
        real data real weights."""
        for name in s.model_names:
            settings = s.model_of(name)
            for a in get(name).artifacts(settings).values():
                if a.stage == self.name and not pool_source(s.data).made_by:
                    raise ConfigError(
                        f"models.{name}.{a.setting}={getattr(settings, a.setting)} needs the toy world (data.kind=toy), "
                        f"not data.kind={s.data.kind}; give {name} real weights: the paper's pinned ones "
                        f"(experiment=paper) or a local path to them")
