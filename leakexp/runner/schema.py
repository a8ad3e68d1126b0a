"""Typed config sections: every leaf has a type and, where it has one, a domain, checked before any work.

A module that owns a config section declares it as a :class:`Section` (a strict pydantic model: no unknown keys,
no string for a number, no bool for an int, finite floats) and registers it under its key where it is declared
(:func:`section`; a stage's ``Settings`` under the stage's section); ``leakexp.runner.registry`` checks the whole
composed configuration against them with :func:`check_sections`, so a setting added to a YAML file without a schema
is an error too. A section names the files it needs (:meth:`Section.files`); they are
checked before a run that computes, each error naming the setting, the path and the fix.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from leakexp.runner.stage import ConfigError

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1)]


class Section(BaseModel):
    """One config section: strict types, no unknown keys, finite numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    def files(self) -> Iterable[tuple[str, Path]]:
        """(setting, path) of every file this section says a run reads (checked before the run)."""
        return ()


# the schemas of the config sections that no stage declares, registered where each is declared (:func:`section`): the
# grid's and the leakage's by the cell, ``models.<name>`` by the models' registry, plan, report and fetch by the
# configuration; a stage's ``Settings`` is its section's schema (``leakexp.runner.registry.schema_of`` finds both)
SECTIONS: dict[str, type[Section]] = {}


def section(name: str) -> Callable[[type[Section]], type[Section]]:
    """Register the decorated schema as the one of config section ``name`` (``grid``, ``models.knrm``, ``corpora.*``);
    another schema for a section already registered is an error (one section, one declaration)."""
    def add(schema: type[Section]) -> type[Section]:
        if SECTIONS.get(name, schema) is not schema:
            raise ValueError(f"config section {name!r} already has a schema ({SECTIONS[name].__qualname__})")
        SECTIONS[name] = schema
        return schema

    return add


class Settings:
    """A configuration's settings, typed: the one way code reads a setting. Each section is its schema's validated
    object, made once: ``s.evaluate.mfr``, ``s.grid.corpora``; ``s.run`` holds the top-level values (store, size,
    seed, device), ``s.corpus`` and ``s.model`` the cell's corpus and model as the configuration resolves them
    (``corpora.<name>``, ``models.<name>``: ``s.corpus_of(name)``, ``s.model_of(name)``). A stage reads the same
    objects through ``ctx.settings``, which also holds it to the leaves it declared."""

    def __init__(self, values: Mapping[str, Any], schemas: Callable[[str], type[Section]], top: type[Section],
                 overrides: Iterable[str] = ()):
        self.values, self._schemas, self._top, self._made = values, schemas, top, {}
        self.overrides = tuple(overrides)  # the command line's overrides it was composed from, where it was

    def section(self, dotted: str) -> Section:
        """A section by its dotted place in the settings: ``evaluate``, ``models.knrm``, ``corpora.robust04``."""
        if dotted not in self._made:
            try:
                node = functools.reduce(lambda n, part: n[part], dotted.split("."), self.values)
                schema = self._schemas(dotted)
            except (KeyError, TypeError):
                raise AttributeError(f"the settings have no section {dotted!r}") from None
            self._made[dotted] = schema.model_validate(node)
        return self._made[dotted]

    def __getattr__(self, name: str) -> Section:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.section(name)

    @property
    def run(self) -> Section:
        if "" not in self._made:
            self._made[""] = self._top.model_validate({k: v for k, v in self.values.items()
                                                       if k in self._top.model_fields})
        return self._made[""]

    @property
    def corpus_names(self) -> list[str]:
        """Every corpus the configuration can touch: the data's, the grid's and the cell's."""
        return list(self.values.get("corpora", {}))

    @property
    def model_names(self) -> list[str]:
        """The grid's models and the cell's."""
        return list(self.values.get("models", {}))

    def recipe_of(self, model: str) -> str | None:
        """The recipe ``model`` trains by (None: its file names none); ``models.<name>`` holds the ``train:`` block
        the recipe makes, not the recipe's name."""
        return self.values.get("recipes", {}).get(model)

    def plan_of(self, model: str) -> Section:
        """What ``leakexp plan`` assumes of ``model`` (its file's ``plan:`` block, then ``model_overrides``)."""
        return self.section(f"plans.{model}")

    def corpus_of(self, name: str) -> Section:
        return self.section(f"corpora.{name}")

    def model_of(self, name: str) -> Section:
        return self.section(f"models.{name}")

    @property
    def corpus(self) -> Section:
        """The cell's corpus (``corpus=``), with its ``corpus_overrides``."""
        return self.corpus_of(self.values["corpus"]["name"])

    @property
    def model(self) -> Section:
        """The cell's model (``model=``), as its file, its recipe and ``model_overrides`` make it."""
        return self.model_of(self.values["model"]["name"])


def _message(prefix: str, error: Mapping[str, Any]) -> str:
    # pydantic names the branch of a union it tried (e.g. "literal['each','cv']"): the setting's path leaves it out
    parts = [p for p in error["loc"] if isinstance(p, int) or str(p).isidentifier()]
    loc = ".".join(str(p) for p in (prefix, *parts) if p != "")
    value = error.get("input")
    shown = "" if error["type"] == "missing" else f" (got {value!r})"[:120]
    if error["type"] == "extra_forbidden":
        return f"{loc} is not a setting of {prefix or 'the configuration'}; remove it or check its spelling"
    return f"{loc}: {error['msg'].lower()}{shown}{_from_environment(loc)}"


# settings whose default conf/config.yaml takes from the environment
ENVIRONMENT_DEFAULTS = {"store": "LEAKEXP_STORE", "workers": "LEAKEXP_WORKERS", "cpu_kernels": "LEAKEXP_CPU_KERNELS"}


def _from_environment(loc: str) -> str:
    name = ENVIRONMENT_DEFAULTS.get(loc)
    if name is None or name not in os.environ:
        return ""
    return f"; the value comes from the environment variable {name}: change it, or give {loc}=… on the command line"


def validate(prefix: str, schema: type[Section], value: Any) -> Section:
    """``value`` as ``schema``; a ConfigError naming the first bad leaf (``prefix.path``) and what it must be."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{prefix} must be a mapping of settings (got {value!r})"[:200])
    try:
        return schema.model_validate(dict(value))
    except ValidationError as exc:
        raise ConfigError(_message(prefix, exc.errors()[0])) from None


def check_sections(config: Mapping[str, Any], sections: Mapping[str, type[Section]],
                   top: type[Section], skip: Iterable[str] = ("hydra",)) -> dict[str, Section]:
    """Every top-level key of ``config`` against its registered section, the plain top-level values against
    ``top`` (a key without a schema is an error)."""
    out = {"": validate("", top, {k: v for k, v in config.items() if k in top.model_fields})}
    for key, value in config.items():
        if key in skip or key in top.model_fields:
            continue
        if key not in sections:
            raise ConfigError(f"{key} is not a setting of leakexp (known: {', '.join(sorted(sections))}); remove it "
                              "or check its spelling")
        out[key] = validate(key, sections[key], value)
    return out


def check_files(entries: Iterable[tuple[str, Path]]) -> None:
    """Each (setting, path) names a readable file (or directory); the error names both and what to do."""
    for setting, path in entries:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"{setting} names {path}, which does not exist; give the path of an existing file "
                              f"(relative paths are read from {Path.cwd()})")
        if path.is_file():
            try:
                with open(path, "rb") as f:
                    f.read(1)
            except OSError as exc:
                raise ConfigError(f"{setting} names {path}, which cannot be read ({exc.strerror}); fix its "
                                  "permissions") from None
