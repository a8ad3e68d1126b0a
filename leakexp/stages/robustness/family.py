"""What every robustness stage shares (``leakexp.stages.robustness``): the ``robustness`` settings and their checks,
the family's command, which grid cells get robustness parts, and each cell's parts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import ir_measures
from pydantic import Field

from leakexp.lib.measures import LOWER_IS_BETTER
from leakexp.runner.schema import Name, PositiveInt, Section, Settings
from leakexp.runner.stage import Ask, ConfigError, Stage
from leakexp.stages.cell import Cell, grid_cells
from leakexp.toolkit import attacks

FIRST_STAGES = ("pool", "bm25")
OOD_TOPICS = ("disjoint", "all")


def robustness_settings(s: Settings) -> "Robustness.Settings":
    """The ``robustness`` section (:class:`Robustness.Settings`: every domain), then what only code can check (attack
    names, the measure, word lists), with ``sizes: largest`` resolved to the grid's largest size and the attacks by
    their canonical names (none: an empty list)."""
    v = s.robustness
    try:
        qa = tuple(attacks.check_attack(a) for a in v.query_attacks or [])
        dm = tuple(attacks.check_manipulation(d) for d in v.doc_manipulations or [])
    except attacks.AttackError as exc:
        raise ConfigError(f"robustness: {exc}") from None
    if v.measure in LOWER_IS_BETTER:
        raise ConfigError(f"robustness.measure={v.measure}: drop rates need a higher-is-better measure, e.g. nDCG@10")
    try:
        ir_measures.parse_measure(v.measure)
    except Exception:
        raise ConfigError(f"robustness.measure={v.measure!r} cannot be parsed; e.g. nDCG@10, AP, P@10") from None
    # the grid's largest size, whatever the grid (the demo's choice); corpora and sizes outside this grid are simply
    # not run (a narrowed grid keeps working), but their names must exist
    sizes = [max(s.grid.sizes)] if v.sizes == "largest" else v.sizes
    corpora = [] if s.data.corpora == "???" else list(s.data.corpora)
    for key, values in (("corpora", v.corpora), ("ood", v.ood)):
        bad = [x for x in values or [] if x not in corpora]
        if bad:
            raise ConfigError(f"robustness.{key} has {bad[0]!r}, which is not in data.corpora={corpora}; choose from "
                              "those or null")
    for key in ("synonyms", "misspellings"):
        if getattr(v, key) != "bundled":
            try:
                attacks.load_wordlist(getattr(v, key))
            except attacks.AttackError as exc:
                raise ConfigError(f"robustness.{key}: {exc}") from None
    return v.model_copy(update={"sizes": None if sizes is None else [int(x) for x in sizes], "query_attacks": list(qa),
                                "doc_manipulations": list(dm)})


class _Stuff(Section):
    repeats: PositiveInt
    from_rank: PositiveInt


class _Noise(Section):
    rate: Annotated[float, Field(gt=0, le=1)]


class Robustness(Stage):
    """A robustness stage: its section is ``robustness``, its command ``leakexp robustness`` (the whole family)."""

    help = ("robustness of the trained models with vs without leakage (Wu et al.: variance, OOD drop, query attacks, "
            "document manipulation); computes what the store lacks, then writes the tables")

    def check(self, s: Settings) -> None:
        robustness_settings(s)

    def asks(self, r, cells: list[Cell]) -> list[Ask]:
        """This stage's parts of the robustness cells among ``cells``."""
        s = r.settings
        chosen = set(robustness_cells(s)) if s.robustness.enabled else set()
        return [a for c in cells if c in chosen for a in parts(s, c).values() if a.stage == self.name]

    class Settings(Section):
        """``robustness``: which cells, attacks and manipulations (attack names, the measure and word lists are checked
        further by :func:`robustness_settings`: the family's check)."""

        enabled: bool
        corpora: list[Name] | None
        sizes: Annotated[list[PositiveInt], Field(min_length=1)] | Literal["largest"] | None
        ood: list[Name] | None
        ood_topics: Literal["disjoint", "all"]
        measure: Name
        gmap_epsilon: Annotated[float, Field(gt=0, lt=1)]
        worst: list[Annotated[float, Field(gt=0, le=1)]]
        bootstrap: Annotated[int, Field(ge=100)]  # resamples of the topics (at least 100 for a stable interval)
        seed: Annotated[int, Field(ge=0)]
        first_stage: Literal["bm25", "pool"]
        query_attacks: list[Name] | None
        doc_manipulations: list[Name] | None
        stuff: _Stuff
        noise: _Noise
        synonyms: Name
        misspellings: Name

        def files(self):
            return [(f"robustness.{k}", Path(getattr(self, k))) for k in ("synonyms", "misspellings")
                    if getattr(self, k) != "bundled"]


# -- which cells, and each cell's parts ----------------------------------------------------------------------------
OWN, OOD, QUERY, DOC = ("robustness/own-corpus", "robustness/ood", "robustness/query-attack",
                        "robustness/doc-manipulation")
QUERIES, DOCS = "robustness/attacked-queries", "robustness/manipulated-docs"


def robustness_cells(s: Settings) -> list[Cell]:
    """The grid cells that get robustness artifacts (``robustness.corpora`` / ``robustness.sizes``)."""
    r = robustness_settings(s)
    return [c for c in grid_cells(s) if (r.corpora is None or c.corpus in r.corpora)
            and (r.sizes is None or c.size in r.sizes)]


def ood_targets(r: Robustness.Settings, s: Settings, cell: Cell) -> list[str]:
    targets = r.ood if r.ood is not None else tuple(s.grid.corpora)
    return [c for c in dict.fromkeys(targets) if c != cell.corpus]


def parts(s: Settings, cell: Cell) -> dict[str, Ask]:
    """Every part of ``cell``'s robustness: part name (own, ood-<corpus>, <attack>, doc-<kind>) -> request."""
    r = robustness_settings(s)
    out = {"own": cell.ask(OWN)}
    out.update({f"ood-{t}": cell.ask(OOD, target=t) for t in ood_targets(r, s, cell)})
    out.update({a: cell.ask(QUERY, attack=a) for a in r.query_attacks})
    out.update({f"doc-{k}": cell.ask(DOC, kind=k) for k in r.doc_manipulations})
    return out


def queries_ask(s: Settings, corpus: str, attack: str) -> Ask:
    """The shared attacked queries of ``corpus`` under ``attack`` (with this config's first stage)."""
    return Ask.of(QUERIES, corpus=corpus, attack=attack, first_stage=s.robustness.first_stage)


def docs_ask(corpus: str, kind: str) -> Ask:
    """The shared manipulated documents of ``corpus`` (``kind``: stuff or noise)."""
    return Ask.of(DOCS, corpus=corpus, kind=kind)
