"""A grid cell (corpus, leakage, size, model, seed) and the requests for its artifacts."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
import dataclasses
from dataclasses import dataclass

from omegaconf import DictConfig

from leakexp.runner.stage import Ask
from leakexp.runner.schema import Name, NonNegativeInt, PositiveInt, Section


@dataclass(frozen=True)
class Cell:
    """One grid cell: a training set (corpus, leakage, size) and a model trained on it with a seed."""

    corpus: str
    leakage: str
    size: int
    model: str
    seed: int

    def ask(self, stage: str, **extra) -> Ask:
        """The request for this cell's artifact of ``stage`` (sets, train, rerank, eval, memorization, ...)."""
        params = dataclasses.asdict(self)
        if stage == "sets":
            params = {k: params[k] for k in ("corpus", "leakage", "size")}
        return Ask.of(stage, **params, **extra)

    def parts(self) -> list[str]:
        return [self.corpus, self.leakage, str(self.size), self.model, f"seed-{self.seed}"]

    def __str__(self) -> str:
        return f"{self.corpus}/{self.leakage}/{self.size}/{self.model}/seed-{self.seed}"


def cell_from_config(cfg: DictConfig) -> Cell:
    return Cell(cfg.corpus.name, cfg.leakage.name, int(cfg.size), cfg.model.name, int(cfg.seed))


def grid_cells(cfg: DictConfig) -> list[Cell]:
    g = cfg.grid
    return [Cell(c, l, int(s), m, int(seed)) for c in g.corpora for l in g.leakages for s in g.sizes
            for m in g.models for seed in g.seeds]


class GridSettings(Section):
    """``grid``: the cells a grid run, status, plan and the tables cover."""

    corpora: Annotated[list[Name], Field(min_length=1)]
    leakages: Annotated[list[Literal["none", "msm", "test"]], Field(min_length=1)]
    sizes: Annotated[list[PositiveInt], Field(min_length=1)]
    models: Annotated[list[Name], Field(min_length=1)]
    seeds: Annotated[list[NonNegativeInt], Field(min_length=1)]


class LeakageSettings(Section):
    """``leakage``: the cell's leakage type."""

    name: Literal["none", "msm", "test"]
