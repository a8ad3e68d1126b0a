"""What a stage declares: its name and version, the config it reads, its inputs, and how it computes.

A stage module builds one :class:`Stage` per artifact kind and hands it to the registry (``leakexp.runner.registry``).
The runner (``leakexp.runner.pipeline``) derives every key from these declarations alone, Merkle-style: a hash of
the stage's name and version, its normalised parameters, the config values it reads and its inputs' keys.
A compute function receives a :class:`Context` holding exactly those, so a key cannot miss a value its
stage reads. This module names no stage and imports nothing of leakexp.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import importlib
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """An unknown name or a value outside its domain; the message names the setting and the fix."""


class ConfigErrors(ConfigError):
    """Several settings' errors at once (e.g. every model of the grid missing from the cache): one line, the
    messages joined by '; '; ``messages`` keeps each, for the lists of what a run will still need."""

    def __init__(self, messages: list[str]):
        self.messages = list(messages)
        super().__init__("; ".join(self.messages))


class DataUnavailable(RuntimeError):
    """A data set that is not on this machine; the message says how to provide it."""


_FETCHING = contextvars.ContextVar("leakexp_fetching", default=False)


@contextlib.contextmanager
def fetching():
    """Within it, a stage's ``require`` fetches what is missing and may be fetched (a pinned Hugging Face model: a
    command that computes, before any work); outside it, requirements are only checked (plan and status list what a
    run will need)."""
    token = _FETCHING.set(True)
    try:
        yield
    finally:
        _FETCHING.reset(token)


_MODELS = contextvars.ContextVar("leakexp_models", default=None)


@contextlib.contextmanager
def reading_models(models):
    """Within it, a requirement about re-rankers asks only for ``models`` (None: every model of the configuration):
    a monoT5 cell needs neither GloVe nor another model's weights."""
    token = _MODELS.set(None if models is None else list(models))
    try:
        yield
    finally:
        _MODELS.reset(token)


def models_read(names):
    """Of the configuration's model ``names``, those the run at hand reads (:func:`reading_models`)."""
    wanted = _MODELS.get()
    return list(names) if wanted is None else [n for n in names if n in wanted]


def may_fetch() -> bool:
    """Whether a requirement that is missing may be fetched now (:func:`fetching`)."""
    return _FETCHING.get()


class InputsMissing(FileNotFoundError):
    """Files outside the store that a stage reads are not on this machine; the message names them and what to do.
    Nothing is keyed or computed without them: a key names the identity of the files read."""


@dataclass(frozen=True)
class Ask:
    """A request for one artifact: a stage and its parameters (e.g. ``Ask.of("set", corpus=..., size=...)``)."""

    stage: str
    items: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, stage: str, **params: Any) -> "Ask":
        return cls(stage, tuple(sorted(params.items())))

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.items)

    def __str__(self) -> str:
        return "/".join([self.stage, *(str(v) for _, v in self.items)])


def _declared(dotted: str, declared: tuple[str, ...] | None) -> bool:
    return declared is None or any(dotted == d or dotted.startswith(d + ".") or d.startswith(dotted + ".")
                                   for d in declared)


class Declared:
    """A config section's validated settings object (its schema's instance: every value typed and in its domain,
    no default to supply) through which a stage reads only the leaves it declared (``Stage.reads``)."""

    def __init__(self, value: Any, path: str, declared: tuple[str, ...] | None):
        self._value, self._path, self._declared = value, path, declared

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        dotted = f"{self._path}.{name}"
        if not _declared(dotted, self._declared):
            raise KeyError(f"{dotted!r} is read but not declared in the stage's reads ({', '.join(self._declared)})")
        value = getattr(self._value, name)
        return Declared(value, dotted, self._declared) if hasattr(type(value), "model_fields") else value

    def dump(self) -> dict:
        """The declared leaves as plain values, nested as in the config (e.g. a model's constructor parameters)."""
        out = {}
        for name in type(self._value).model_fields:
            dotted = f"{self._path}.{name}"
            if _declared(dotted, self._declared):
                value = getattr(self, name)
                out[name] = value.dump() if isinstance(value, Declared) else value
        return out

    def __repr__(self) -> str:
        return f"Declared({self._path}: {self._value!r})"


class Config(dict):
    """The config values one stage reads, as nested dicts (what its key hashes), and the same as typed settings:
    ``c.settings("bm25").k1`` is how a stage's declarations (inputs, path, external files) read a setting.

    ``declared`` holds the paths the stage declared (``Stage.reads``): reading any other path is an error, not a
    silent None, so a key cannot miss a value its stage reads.
    """

    declared: tuple[str, ...] | None = None
    section: Callable[[str], Any] | None = None  # the runner's typed sections (``Settings.section``)

    def settings(self, section: str) -> "Declared":
        """The validated settings object of a section the stage reads (``data``, ``models.knrm``, ``corpora.x``);
        reading a leaf the stage did not declare is an error."""
        if not _declared(section, self.declared):
            raise KeyError(f"{section!r} is read but not declared in the stage's reads ({', '.join(self.declared)})")
        if self.section is None:
            raise RuntimeError("these settings are not typed: build the runner of a Settings")
        return Declared(self.section(section), section, self.declared)

    def __deepcopy__(self, memo: dict) -> "Config":
        out = Config(copy.deepcopy(dict(self), memo))
        out.declared, out.section = self.declared, self.section  # the typed sections are shared, never copied
        return out


def _copied(node: Any) -> Any:
    """A copy of plain settings (dicts, lists, scalars): the runner selects config for every artifact of a grid,
    and ``copy.deepcopy`` was most of the time ``status`` took."""
    if isinstance(node, dict):
        return {k: _copied(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_copied(v) for v in node]
    if node is None or isinstance(node, (str, int, float, bool)):
        return node
    return copy.deepcopy(node)


def select(settings: Mapping, paths: Iterable[str], section: Callable[[str], Any] | None = None) -> Config:
    """The parts of ``settings`` that ``paths`` name (dotted; ``!path`` removes), as nested dicts; ``section``: the
    typed sections they come from (``Config.settings``)."""
    out: dict = {}
    paths = list(paths)
    for path in (p for p in paths if not p.startswith("!")):
        node: Any = settings
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        *parents, leaf = path.split(".")
        target = out
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = _copied(node)
    for path in (p[1:] for p in paths if p.startswith("!")):
        *parents, leaf = path.split(".")
        target = out
        for part in parents:
            target = target.get(part, {}) if isinstance(target, dict) else {}
        if isinstance(target, dict):
            target.pop(leaf, None)
    config = Config(out)
    config.declared = tuple(p for p in paths if not p.startswith("!"))
    config.section = section
    return config


class Stage:
    """One artifact kind, declared as a class in one module: its name, version, settings, inputs and compute.

    A subclass names the stage (``name``, the word its command, its settings section, its status row and its store
    folder share) and gives exactly one of ``compute(ctx, tmp)`` (writes a stored artifact into ``tmp`` and returns
    its key figures) or ``value(ctx)`` (an in-process value, loaded data, memoised by key). The class's docstring
    says what one artifact is. :func:`register_stage` makes it known to the runner and the command line.

    - ``Settings``: the schema of its config section (``section``: its name, or its family's, the part before a
      ``/``), validated before any work; stages read other stages' sections too, never an undeclared one.
    - ``reads``: dotted config paths (a section or a leaf); ``{param}`` is filled from the parameters and a
      leading ``!`` leaves a path out; or a method ``reads(params, cuda) -> paths``.
    - ``inputs(params, config)``: name -> :class:`Ask` (or a list of them) of the artifacts it reads.
    - ``normalise(params)``: the parameters the artifact really depends on; equal ones are one artifact.
    - ``path(params, config)``: readable directory parts under the stage's name (default: the values).
    - ``external(params, config)``: identity of files outside the store that it reads (part of the key).
    - ``missing(params, config)``: None, or one line naming the outside files it reads that are absent and what to
      do; such an artifact and everything below it is "data missing" in status and is not computed.
    - ``opener(path)``: what dependants receive for a stored artifact (default: its directory).
    - ``device``: the key records whether it ran on CUDA (numerics differ).
    - ``verify``: its files' checksums are checked when it is used (checkpoints: a damaged one is recomputed).
    - ``check(settings)``: what the schemas cannot say about the stage's settings (the configuration's typed
      ``Settings``), checked before any work (raises :class:`ConfigError`).
    - ``require(settings)``: what computing it needs from outside the store and the settings (annotation files, models in
      the Hugging Face cache), checked before any work by commands that compute it; read-only commands (status,
      plan) skip it.
    - ``fills(values)``: a null setting of its section given a value from what ``leakexp fetch`` placed (the plain
      values, before they are typed and keyed), so that every command reads the same files under the same key.
    - ``keyed_as``: the name a renamed stage had when its first artifacts were keyed: its keys hash that name, so a
      store made before the rename keeps its artifacts (a runner that may write moves the old folder once).
    - ``asks(runner, cells)``: the artifacts of this stage that the configured grid (``cells``) asks for by name:
      its status row and what its command computes (none: it is computed when another stage reads it).
    - ``help``: its command's one-line help (``leakexp <name>``, or ``leakexp <family>`` for a family); none: no
      command of its own. ``per_cell``: the command computes the cells the command line names (sweeps expand), not
      the grid's. ``demo``: ``leakexp demo`` computes it beside the grid (on the toy world).
    """

    name: str = ""
    version: int = 1
    keyed_as: str = ""
    section: str = ""
    Settings: type | None = None
    reads: tuple[str, ...] | Callable[[dict, bool], Iterable[str]] = ()
    compute: Callable[["Context", Path], dict | None] | None = None
    value: Callable[["Context"], Any] | None = None
    path: Callable[[dict, Config], Iterable[Any]] | None = None
    external: Callable[[dict, Config], Any] | None = None
    missing: Callable[[dict, Config], str | None] | None = None
    opener: Callable[[Path], Any] | None = None
    check: Callable[[Any], None] | None = None  # (Settings) -> None
    require: Callable[[Any], None] | None = None  # (Settings) -> None
    fills: Callable[[dict], None] | None = None  # (plain values) -> None
    device: bool = False
    verify: bool = False
    help: str = ""
    per_cell: bool = False
    demo: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name and (cls.compute is None) == (cls.value is None):
            raise TypeError(f"stage {cls.name}: give exactly one of compute (stored) or value (in-process)")
        if cls.name and not cls.section:
            cls.section = cls.name.split("/")[0]

    def inputs(self, params: dict, config: Config) -> Mapping[str, "Ask | list[Ask]"]:
        return {}

    def normalise(self, params: dict) -> dict:
        return params

    def asks(self, runner: Any, cells: list) -> list[Ask]:
        return []

    @property
    def family(self) -> str:
        """The word before a ``/`` (``robustness`` of ``robustness/ood``): its command's name."""
        return self.name.split("/")[0]

    @property
    def module(self) -> str:
        """Where it is declared; never part of a key."""
        return type(self).__module__

    @property
    def describe(self) -> str:
        """What one artifact is: the first paragraph of the class's docstring, on one line."""
        return " ".join((type(self).__doc__ or "").strip().split("\n\n")[0].split())

    @property
    def key_name(self) -> str:
        """The name its keys hash: its own, or the one it had when its first artifacts were keyed."""
        return self.keyed_as or self.name

    @property
    def stored(self) -> bool:
        return self.compute is not None

    def read_paths(self, params: dict, cuda: bool) -> list[str]:
        raw = self.reads(params, cuda) if callable(self.reads) else self.reads
        return [r.format(**params) for r in raw]

    def __repr__(self) -> str:
        return f"<stage {self.name} v{self.version}>"


# -- the registry of stages ------------------------------------------------------------------------------------
STAGE_PACKAGE = "leakexp.stages"  # its modules declare the stages; its PIPELINE orders them (the order data flows)
_STAGES: dict[str, Stage] = {}
_LOADED: list[str] = []  # the stage package's modules in their order, once loaded


def register_stage(cls: type[Stage]) -> type[Stage]:
    """Make the stage class ``cls`` known to the runner, the command line and the listings (a class decorator); its
    ``Settings``, if it declares one, is the schema of its section. A second stage of one name is an error."""
    stage = cls()
    if not stage.name:
        raise ValueError(f"{cls.__qualname__} names no stage (name = ...)")
    if stage.name in _STAGES:
        raise ValueError(f"stage {stage.name!r} is already registered ({_STAGES[stage.name].module})")
    _STAGES[stage.name] = stage
    return cls


def unregister_stage(name: str) -> None:
    """Forget a registered stage (tests that add one)."""
    _STAGES.pop(name, None)


def load() -> list[str]:
    """Import every module of the stage package, its ``PIPELINE`` first in that order, once; their names in order."""
    if not _LOADED:
        package = importlib.import_module(STAGE_PACKAGE)
        found = sorted(m.name for m in pkgutil.walk_packages(package.__path__, f"{STAGE_PACKAGE}."))
        names = list(dict.fromkeys([*(f"{STAGE_PACKAGE}.{m}" for m in getattr(package, "PIPELINE", ())), *found]))
        for name in names:
            importlib.import_module(name)
        _LOADED.extend(names)
    return _LOADED


def stages() -> list[Stage]:
    """Every registered stage, in the order data flows through them: by their module's place in the stage package's
    ``PIPELINE``, then in the order they were declared (a stage registered from elsewhere comes last)."""
    order = {m: i for i, m in enumerate(load())}
    declared = list(_STAGES.values())
    return sorted(declared, key=lambda s: (order.get(s.module, len(order)), declared.index(s)))


def stage(name: str) -> Stage:
    load()
    try:
        return _STAGES[name]
    except KeyError:
        raise ValueError(f"no stage named {name!r}; stages: {', '.join(s.name for s in stages())}") from None


@dataclass(frozen=True)
class Runtime:
    """Settings that change how fast, not what, a stage computes: visible to every stage, part of no key (the
    device, BM25 and df threads, loader workers, batch sizes for inference, verbosity)."""

    device: str = "cpu"
    verbose: bool = False
    threads: int = 2
    loader_workers: str | int = "auto"
    resume_every_s: float = 300.0
    cpu_threads: int = 1
    cpu_kernels: str = "portable"
    embed_batch_size: int = 256
    score_batch_size: Mapping[str, int] = field(default_factory=dict)

    def score_batch(self, model: str) -> int:
        """Pairs per scoring batch of ``model`` (its ``train.score_batch_size``; 64 where it names none)."""
        return self.score_batch_size.get(model, 64)


@dataclass
class Context:
    """What a compute function sees: its parameters, the config it declared, its inputs, runtime settings.

    ``inputs[name]`` is resolved on first access (stored inputs are computed if missing). ``runtime`` holds
    settings that change speed, not results (device, threads, batch sizes for inference, verbosity).
    """

    stage: Stage
    params: dict
    config: Config
    key: str
    path: Path | None
    runtime: Runtime
    input_names: tuple[str, ...] = ()
    _resolve: Callable[[str], Any] = field(repr=False, default=None)
    _cache: dict = field(default_factory=dict, repr=False)

    def settings(self, section: str) -> Declared:
        """The validated settings object of a config section the stage reads (``evaluate``, ``models.knrm``,
        ``corpora.robust04``): ``Config.settings``; a leaf the stage did not declare is an error."""
        if not _declared(section, self.config.declared):
            raise KeyError(f"{section!r} is not read by stage {self.stage.name} ({', '.join(self.config.declared)})")
        return self.config.settings(section)

    def input(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self._resolve(name)
        return self._cache[name]

    @property
    def inputs(self) -> "_Inputs":
        return _Inputs(self)


class _Inputs:
    def __init__(self, ctx: Context):
        self._ctx = ctx

    def __getitem__(self, name: str) -> Any:
        return self._ctx.input(name)

