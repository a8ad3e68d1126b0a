"""The ``toy`` stage: the toy world, generated into the store from ``data.*`` by a seeded generator
(``leakexp.data.toy``); the ``pool`` and ``collection`` stages read it when the data's source is made by it (``data.kind: toy``)."""

from __future__ import annotations

from pathlib import Path

from leakexp.data import toy
from leakexp.data.sources import source_of
from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage


@register_stage
class Toy(Stage):
    """the generated toy world"""

    # the generator: 5 = the real data's hazards (see leakexp.data.toy); 6 = a query that leaks for two topics
    name, version = "toy", 6
    reads = ("data.seed", "data.queries_per_source", "data.leak_fraction")
    help = "generate the toy world into the store and print where it is"

    def compute(self, ctx: Context, tmp: Path) -> dict:
        d = ctx.settings("data")
        return toy.generate(tmp, seed=d.seed, queries_per_source=d.queries_per_source,
                            leak_fraction=d.leak_fraction)["train"]

    def path(self, p: dict, c: Config) -> list:
        return ["toy", f"seed-{c.settings('data').seed}"]

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of(self.name)] if source_of(r.settings.data.kind).made_by == self.name else []
