"""A grid cell (corpus, leakage, size, model, seed), the requests for its artifacts, and each stage's parameters
and readable path among a cell's: which cells share one artifact is decided here, in one place."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from leakexp.runner.schema import Name, NonNegativeInt, PositiveInt, Section, Settings, section
from leakexp.runner.stage import Ask


@dataclass(frozen=True)
class Cell:
    """One grid cell: a training set (corpus, leakage, size) and a model trained on it with a seed."""

    corpus: str
    leakage: str
    size: int
    model: str
    seed: int

    def ask(self, stage: str, **extra) -> Ask:
        """The request for this cell's artifact of ``stage`` (build, train, rerank, evaluate, memorization, ...)."""
        params = dataclasses.asdict(self)
        if stage == "build":
            params = {k: params[k] for k in ("corpus", "leakage", "size")}
        return Ask.of(stage, **params, **extra)

    def parts(self) -> list[str]:
        return [self.corpus, self.leakage, str(self.size), self.model, f"seed-{self.seed}"]

    def __str__(self) -> str:
        return f"{self.corpus}/{self.leakage}/{self.size}/{self.model}/seed-{self.seed}"


def cell_from_config(s: Settings) -> Cell:
    """The cell the command line names (``corpus=… leakage=… size=… model=… seed=…``)."""
    return Cell(s.corpus.name, s.leakage.name, s.run.size, s.model.name, s.run.seed)


def grid_cells(s: Settings) -> list[Cell]:
    g = s.grid
    return [Cell(c, l, size, m, seed) for c in g.corpora for l in g.leakages for size in g.sizes
            for m in g.models for seed in g.seeds]


@section("grid")
class GridSettings(Section):
    """``grid``: the cells a grid run, status, plan and the tables cover."""

    corpora: Annotated[list[Name], Field(min_length=1)]
    leakages: Annotated[list[Literal["none", "msm", "test"]], Field(min_length=1)]
    sizes: Annotated[list[PositiveInt], Field(min_length=1)]
    models: Annotated[list[Name], Field(min_length=1)]
    seeds: Annotated[list[NonNegativeInt], Field(min_length=1)]


@section("leakage")
class LeakageSettings(Section):
    """``leakage``: the cell's leakage type."""

    name: Literal["none", "msm", "test"]


# -- a cell's parameters per stage: what each artifact depends on, and its readable path ---------------------
def set_params(p: dict) -> dict:
    """What a training set depends on among a cell's parameters: No-Leakage sets are one for every corpus
    (their fillers exclude the leaks of every corpus)."""
    if p["leakage"] == "none":
        return {"leakage": "none", "size": int(p["size"])}
    return {"corpus": p["corpus"], "leakage": p["leakage"], "size": int(p["size"])}


def train_params(p: dict) -> dict:
    """What a trained model depends on among a cell's parameters: its training set's, the model and the seed
    (so the No-Leakage model of a (model, size, seed) is one for every corpus)."""
    return {**set_params(p), "model": p["model"], "seed": int(p["seed"])}


def cell_path(p: dict) -> list[str]:
    """Readable directory parts of a cell's artifact: [corpus,] leakage, size, model, seed-N."""
    return [*([p["corpus"]] if "corpus" in p else []), p["leakage"], str(p["size"]), p["model"], f"seed-{p['seed']}"]


def rerank_params(p: dict) -> dict:
    """A re-ranking depends on the trained model and the corpus it ranks (``target``, by default the corpus the
    cell's set was built for): the No-Leakage model's re-ranking of a corpus is one, whichever cell asks."""
    return {**train_params(p), "target": p["target"] if "target" in p else p["corpus"]}


def rerank_path(p: dict) -> list[str]:
    """[target, leakage, size, model, seed-N] plus ``from-<corpus>`` for a model trained for another corpus."""
    trained_for = [f"from-{p['corpus']}"] if p.get("corpus", p["target"]) != p["target"] else []
    return [p["target"], p["leakage"], str(p["size"]), p["model"], f"seed-{p['seed']}", *trained_for]


def memorization_params(p: dict) -> dict:
    """A leaked cell's memorization: its own parameters (its No-Leakage cell is an input, not a parameter)."""
    if p["leakage"] not in ("msm", "test"):
        raise ValueError(f"memorization needs a leaked cell (msm or test), got {p}")
    return {k: p[k] for k in ("corpus", "leakage", "size", "model")} | {"seed": int(p["seed"])}
