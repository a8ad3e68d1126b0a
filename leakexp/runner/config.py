"""Loading and checking the Hydra configuration in ``conf/``."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from typing import Annotated, Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import Field


from leakexp.runner.schema import Name, NonNegativeFloat, PositiveFloat, PositiveInt, Section, Settings, section
from leakexp.runner.stage import ConfigError, Runtime  # noqa: F401  (ConfigError: defined beside the stage declarations)


def conf_dir() -> Path:
    """leakexp's own ``conf/`` (the packaged configuration; :func:`conf_dirs` adds the user's before it)."""
    path = Path(__file__).resolve().parents[2] / "conf"
    if not (path / "config.yaml").exists():
        raise ConfigError(f"no config.yaml in {path}: leakexp's conf/ directory is missing from the installation")
    return path


def user_conf_dirs() -> list[Path]:
    """The user's configuration directories, first found wins: ``$LEAKEXP_CONF`` (one directory, or several joined
    by ``os.pathsep``), then ``$XDG_CONFIG_HOME/leakexp/conf`` (default ``~/.config/leakexp/conf``) where it exists.
    Their ``corpus/*.yaml``, ``model/*.yaml``, ``experiment/*.yaml`` ... add options to leakexp's groups or replace
    those of the same name, and a ``config.yaml`` replaces leakexp's, so a custom corpus or training pool needs no
    edit of the source tree; ``leakexp`` and ``leakexp-run`` (Hydra's search path) read the same."""
    out = []
    for entry in filter(None, os.environ.get("LEAKEXP_CONF", "").split(os.pathsep)):
        path = Path(entry).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"LEAKEXP_CONF={entry}: no such directory (a directory of config groups such as "
                              "corpus/<name>.yaml that add to or replace leakexp's conf/)")
        out.append(path)
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config").expanduser() / "leakexp" / "conf"
    if xdg.is_dir():
        out.append(xdg.resolve())
    return list(dict.fromkeys(out))


def conf_dirs() -> list[Path]:
    """Where the configuration is searched, first found wins: the user's directories, then leakexp's conf/."""
    return [*user_conf_dirs(), conf_dir()]


def conf_file(relative: str) -> Path:
    """The file ``relative`` (``config.yaml``, ``corpus/robust04.yaml``) of the first directory of :func:`conf_dirs`
    that holds it (leakexp's own where none does)."""
    dirs = conf_dirs()
    return next((d / relative for d in dirs if (d / relative).is_file()), dirs[-1] / relative)


def options(group: str) -> list[str]:
    """A config group's options: its YAML files' names in every configuration directory."""
    return sorted({p.stem for d in conf_dirs() for p in (d / group).glob("*.yaml")})


def config_groups() -> dict[str, list[str]]:
    """Every config group (a folder of YAML files in a configuration directory, ``hydra/launcher`` too) and its
    options, read from the directories as they are."""
    groups: set[str] = set()
    for d in conf_dirs():
        groups |= {p.parent.relative_to(d).as_posix() for p in d.rglob("*.yaml") if p.parent != d}
    return {g: options(g) for g in sorted(groups)}


def _group_raw(group: str, name: str) -> tuple[dict, bool]:
    """(the file's content, unresolved; whether it holds an interpolation)."""
    path = conf_file(f"{group}/{name}.yaml")
    if not path.exists():
        raise ConfigError(f"{group}={name} is unknown; available: {', '.join(options(group))}")
    return _parsed_yaml(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=512)
def _parsed_yaml(path: str, mtime_ns: int) -> tuple[dict, bool]:
    """A group file's content, parsed once per version of the file (``plan`` and ``status`` resolve a model's
    config for every cell of the grid); callers copy it. Whether it holds an interpolation (``${...}``)."""
    content = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    return content, "${" in json.dumps(content)


def top_level_keys() -> list[str]:
    """The names a Hydra override can start with: the config groups and the keys of conf/config.yaml."""
    return list(GROUPS) + sorted(k for k in OmegaConf.load(conf_file("config.yaml")).keys() if k != "defaults")


def section_keys() -> list[str]:
    """The keys of conf/config.yaml that hold a section (a mapping), not a value: ``train``, ``bm25``, ``detect``, ..."""
    raw = OmegaConf.load(conf_file("config.yaml"))
    return sorted(k for k in raw.keys() if k != "defaults" and OmegaConf.is_dict(raw[k]))


def corpus_config(name: str) -> dict:
    """``conf/corpus/<name>.yaml``'s values, resolved (a copy)."""
    return _group_plain("corpus", name)


def model_config(name: str) -> dict:
    """``conf/model/<name>.yaml``'s values, resolved (a copy): a model's file as it ships, before any override."""
    return _group_plain("model", name)


def compose_raw(overrides: list[str] | None = None) -> DictConfig:
    """Hydra's composition of ``overrides`` (Hydra syntax), its values checked together (:func:`validate_config`);
    unknown group options name the key. ``leakexp.runner.registry.compose`` makes the typed settings of it."""
    from hydra.errors import HydraException

    overrides = [_per_name(o) for o in overrides or []]
    for o in overrides:
        key, _, value = o.partition("=")
        key = key.lstrip("+~")
        if key in ("data", "corpus", "leakage", "model", "grid", "experiment") and value not in options(key):
            raise ConfigError(f"{key}={value} is unknown; available: {', '.join(options(key))}")
    try:
        cfg = _compose(overrides)
    except HydraException as exc:
        raise ConfigError(str(exc).splitlines()[0] + _suggestion(str(exc))) from None
    except ValueError as exc:  # OmegaConf's, from an override Hydra composes whole (a sweep beside a bad key)
        raise ConfigError(f"an override could not be set ({exc}); check {' '.join(overrides)}") from None
    validate_config(cfg)
    return cfg


def _compose(overrides: list[str]) -> DictConfig:
    """Hydra's composition of ``overrides``. Hydra composes the config groups' choices, then sets each value
    override in turn (``ConfigLoaderImpl._apply_overrides_to_config``); here the first part is kept per choice of
    groups, and the values are set on a copy by that same Hydra function. A test compares every kind of override
    with Hydra's own composition; a sweep, a ``hydra`` override or a Hydra without that function composes whole."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    version = _conf_version()
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        set_values = ConfigLoaderImpl._apply_overrides_to_config
    except (ImportError, AttributeError):
        set_values = None
    parsed = OverridesParser.create().parse_overrides(overrides=overrides)
    if set_values is None or any(o.is_sweep_override() or o.key_or_group.startswith("hydra") for o in parsed):
        return copy.deepcopy(_composed(tuple(overrides), version))
    roots = conf_dirs()
    groups = [o for o in parsed if o.package is not None or any((r / o.key_or_group).is_dir() for r in roots)]
    cfg = copy.deepcopy(_composed(tuple(o.input_line for o in groups), version))
    for o in parsed:
        if o not in groups:
            try:
                set_values([o], cfg)
            except ValueError:  # OmegaConf's, for a key below a list that is no index (grid.sizes.x=3)
                parent = o.key_or_group.rpartition(".")[0]
                raise ConfigError(f"{o.input_line}: {parent} is a list; give its whole value ({parent}=[...])"
                                  if OmegaConf.is_list(OmegaConf.select(cfg, parent, default=None))
                                  else f"{o.input_line}: cannot be set") from None
    return cfg


def _conf_version() -> tuple[str, str]:
    """What a composition reads: leakexp's conf/ and a digest of every configuration directory's place and YAML
    files' names and contents (the user's first)."""
    digest = hashlib.blake2b(digest_size=16)
    for root in conf_dirs():
        digest.update(str(root).encode() + b"\0")
        for path in sorted(root.rglob("*.yaml")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return str(conf_dir()), digest.hexdigest()


@functools.lru_cache(maxsize=64)
def _composed(overrides: tuple[str, ...], conf_version: tuple[str, str]) -> DictConfig:
    """Hydra's composition of ``overrides``, once per version of ``conf/`` (Hydra takes about 0.2 s for each;
    ``compose`` hands out copies). Interpolations stay unresolved, so ``${oc.env:...}`` is read when accessed."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=conf_version[0], version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def config_yaml(overrides: list[str], part: str = "job", resolve: bool = False) -> str:
    """What Hydra's ``--cfg`` prints: the composed configuration of ``overrides`` as YAML, ``job`` (the values the
    run reads), ``hydra`` (Hydra's own node) or ``all`` (both); ``resolve``: interpolations resolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if part == "job":
        cfg = compose_raw(overrides)
    else:
        compose_raw(overrides)  # the same checks as any command
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=[_per_name(o) for o in overrides],
                                return_hydra_config=True)
        if part == "hydra":
            cfg = OmegaConf.create({"hydra": OmegaConf.to_container(cfg.hydra, resolve=False)})
    if resolve:  # the job's values; Hydra's node keeps the run-time ones (a job's number) it lacks before a run
        resolved = OmegaConf.to_container(cfg, resolve=False)
        for key in [k for k in resolved if k != "hydra"]:
            resolved[key] = OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) \
                else OmegaConf.select(cfg, key)
        cfg = OmegaConf.create(resolved)
    return OmegaConf.to_yaml(cfg)


def config_info(overrides: list[str]) -> str:
    """What Hydra's ``--info`` says of a composition: the configuration search path (first found wins), the
    defaults list as composed (each group's choice and the file it came from), and every group with its options."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    compose_raw(overrides)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=[_per_name(o) for o in overrides],
                            return_hydra_config=True)
    lines = ["Config search path (first found wins; $LEAKEXP_CONF and ~/.config/leakexp/conf before leakexp's):"]
    lines += [f"  {d}" for d in conf_dirs()]
    lines += ["", "Defaults (group: choice, from file):"]
    for group, choice in sorted(OmegaConf.to_container(cfg.hydra.runtime.choices).items()):
        if choice is not None and not group.startswith("hydra/"):
            where = conf_file(f"{group}/{choice}.yaml")
            lines.append(f"  {group}: {choice}  ({where})")
    lines += ["", "Config groups (options):"]
    lines += [f"  {g}: {', '.join(o)}" for g, o in config_groups().items()]
    lines += ["", f"Overrides: {' '.join(overrides) or '(none)'}"]
    return "\n".join(lines) + "\n"


PER_NAME = ("model_overrides.", "corpus_overrides.")


def _per_name(override: str) -> str:
    """``model_overrides.knrm.train.lr=…`` / ``corpus_overrides.core17.fixed_leak_queries=…`` set or add a value
    (``++``): these mappings start empty or partial, and a value they lack is what such an override adds."""
    return f"++{override}" if override.startswith(PER_NAME) and "=" in override else override


def _suggestion(message: str) -> str:
    """' Did you mean model=...?' for an override whose key does not exist (e.g. ``modle=knrm``)."""
    import difflib
    import re

    m = re.search(r"Could not (?:override|append to config\.) '([^']+)'", message) or \
        re.search(r"Key '([^']+)' is not in struct", message)
    if not m:
        return ""
    key = m.group(1)
    head, _, rest = key.partition(".")
    per_name = {"models": "model_overrides", "corpora": "corpus_overrides"}  # how status --why's runner paths are set
    if head in per_name and rest:
        return f"; did you mean {per_name[head]}.{rest}=...?"
    known = top_level_keys()
    close = difflib.get_close_matches(head, known, n=1, cutoff=0.6)
    if not close or close[0] == head:
        return ""
    return f"; did you mean {close[0] + ('.' + rest if rest else '')}=...?"


GROUPS = ("data", "corpus", "leakage", "model", "grid", "experiment")
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_device(device) -> None:
    device = str(device)
    if device in ("auto", "cpu"):
        return
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"device={device} but no CUDA device is visible here; use device=cpu or device=auto")
        return
    raise ConfigError(f"device={device} is unknown; use auto, cpu, cuda or cuda:N")


def validate_config(cfg: DictConfig) -> None:
    """Fail early, naming the key, on values that cannot work together. The grid, the cell and the models are
    checked here; each stage checks its own section (``Stage.check``, run by ``leakexp.runner.registry.typed``)."""
    for group in ("data", "corpus", "leakage", "model", "grid"):
        if group not in cfg:
            raise ConfigError(f"config has no '{group}'")
    # leakage.name, grid.* and detect.threshold are checked by their schemas (leakexp.runner.registry.typed);
    # the cell's seed and size are checked here, where the cell's cross-field checks below need them
    for key in ("seed", "size"):
        if not _is_int(cfg.get(key)):
            raise ConfigError(f"{key}={cfg.get(key)!r} must be an integer")
    validate_device(cfg.get("device", "auto"))
    size = cfg.size
    if not isinstance(size, int) or size <= 0 or size % 2:
        raise ConfigError(f"size={size}: must be a positive even number of instances (one pos + one neg per query)")
    for name in cfg.get("corpus_overrides") or {}:
        if name not in options("corpus"):
            raise ConfigError(f"corpus_overrides.{name} names no corpus; available: {', '.join(options('corpus'))}")
    corpus = _resolved(cfg, "corpus", cfg.corpus.name)
    fixed = {"msm": corpus.get("fixed_leak_queries"), "test": corpus.get("test_leak_queries")}
    leak = fixed.get(cfg.leakage.name) or 0
    if 2 * leak > size:
        raise ConfigError(
            f"size={size} is smaller than the {2 * leak} fixed leaked instances of corpus={cfg.corpus.name} "
            f"leakage={cfg.leakage.name}; choose size >= {2 * leak}"
        )
    if cfg.corpus.name not in cfg.data.corpora and not OmegaConf.is_missing(cfg.data, "corpora"):
        raise ConfigError(
            f"corpus={cfg.corpus.name} is not one of data.corpora={list(cfg.data.corpora)} "
            f"(data={cfg.data.name}); pick a matching data/corpus pair"
        )
    for c in cfg.grid.corpora:
        corpus_config(c)
    for m in dict.fromkeys([*cfg.grid.models, cfg.model.name]):
        model_config(m)
    for s in cfg.grid.sizes:  # their type and sign are GridSettings'; evenness is a cell's
        if _is_int(s) and s % 2:
            raise ConfigError(f"grid.sizes has {s}; sizes must be positive even numbers of instances")


def _diff(a, b):
    """Keys of ``a`` whose values differ from ``b`` (nested dicts compared key by key)."""
    out = {}
    for k, v in a.items():
        if isinstance(v, dict) and isinstance(b.get(k), dict):
            d = _diff(v, b[k])
            if d:
                out[k] = d
        elif b.get(k, object()) != v:
            out[k] = v
    return out


def _merge(*layers: dict) -> dict:
    """OmegaConf.merge of plain (resolved) containers: mappings merged key by key, any other value replaced; a
    missing value (``???``) keeps what is there."""
    out: dict = {}
    for layer in layers:
        for k, v in layer.items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = _merge(out[k], v)
            elif not (v == "???" and k in out):
                out[k] = copy.deepcopy(v)
    return out


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else copy.deepcopy(node)


def _group_plain(group: str, name: str) -> dict:
    """A group file's content as plain containers, its interpolations (environment variables) resolved now."""
    raw, interpolated = _group_raw(group, name)
    return OmegaConf.to_container(OmegaConf.create(raw), resolve=True) if interpolated else copy.deepcopy(raw)


def _resolved(cfg: DictConfig, group: str, name: str) -> dict:
    """``<group>/<name>.yaml``, then ``<group>_overrides.<name>`` of the experiment, then — for the selected
    option — what the command line changed in ``<group>.*``; plain containers, resolved (merging them as plain
    containers: ``settings`` resolves every model and corpus of the grid, and tests do for every setting)."""
    base = _group_plain(group, name)
    layers = [base]
    extra = cfg.get(f"{group}_overrides", {}) or {}
    if name in extra:
        layers.append(_plain(extra[name]))
    if cfg[group].name == name:
        layers.append(_diff(OmegaConf.to_container(cfg[group], resolve=True), base))
    return _merge(*layers)


def _resolved_model(cfg: DictConfig, name: str) -> dict:
    """What the stages read of a model: its resolved config with its recipe applied, without its ``plan:`` block
    (what ``leakexp plan`` assumes of it: ``Settings.plan_of``; a measured figure keys no artifact)."""
    out = apply_recipe(_resolved(cfg, "model", name), _group_plain("model", name), name)
    out.pop("plan", None)
    return out


def model_recipe(cfg: DictConfig, name: str) -> str | None:
    """The recipe ``name`` trains by under ``cfg`` (None: the model file names none)."""
    return _resolved(cfg, "model", name).get("recipe")


# training settings a model file's `train:` may leave to their defaults (leakexp.lib.trainer.ModelTraining), which a
# recipe may still set: a model file that does not name one keeps its artifacts' keys
RECIPE_OPTIONAL_KEYS = frozenset({"updates", "adafactor_start_step", "z_loss"})


def apply_recipe(merged: dict, base: dict, name: str) -> dict:
    """A model config whose file has ``recipes:`` trains by ``recipes[recipe]``: the file's ``train:`` values, then
    the recipe's, then whatever the experiment (``model_overrides``) or the command line set in ``train:``. The
    ``recipe`` and ``recipes`` keys are dropped from the result: the stages (and their keys) read the ``train:``
    block that results, so two recipes that train alike share their artifacts. (Plain containers in and out.)"""
    recipes = merged.get("recipes")
    if recipes is None:
        return merged
    recipe = merged.get("recipe")
    if recipe not in recipes:
        raise ConfigError(f"{name}'s recipe {recipe!r} (model_overrides.{name}.recipe, or model.recipe with "
                          f"model={name}) is unknown; available: {', '.join(recipes)} (conf/model/{name}.yaml recipes:)")
    known = set(base["train"]) | RECIPE_OPTIONAL_KEYS
    for key in recipes[recipe] or {}:
        if key not in known:
            raise ConfigError(f"models.{name}.recipes.{recipe}.{key} is not a training setting; known: "
                              f"{', '.join(sorted(known))}")
    changed = _diff(merged["train"], base["train"])
    out = _merge(merged, {"train": recipes[recipe] or {}}, {"train": changed})
    out.pop("recipe", None)
    out.pop("recipes", None)
    return out


# -- what stages read -------------------------------------------------------------------------------------
def corpus_names(cfg: DictConfig) -> list[str]:
    """Every corpus a configuration can touch: the data's, the grid's and the cell's."""
    names = [] if OmegaConf.is_missing(cfg.data, "corpora") else list(cfg.data.corpora)
    return list(dict.fromkeys([*names, *cfg.grid.corpora, cfg.corpus.name]))


def resolved_values(cfg: DictConfig) -> dict:
    """The resolved configuration as plain data (what keys hash; ``Settings`` types it): ``corpora.<name>`` and
    ``models.<name>`` hold every corpus and model config the grid or the cell uses (models as
    their files, overrides and recipes merge them: :func:`_resolved_model`), ``recipes.<name>`` the recipe each model trains by."""
    out = OmegaConf.to_container(cfg, resolve=True)
    out.pop("hydra", None)
    out["corpora"] = {n: _resolved(cfg, "corpus", n) for n in corpus_names(cfg)}
    models = list(dict.fromkeys([*cfg.grid.models, cfg.model.name]))
    out["models"] = {m: _resolved_model(cfg, m) for m in models}
    # the recipe each model trains by, by name (models.<name> holds the train: block it makes, not its name)
    out["recipes"] = {m: model_recipe(cfg, m) for m in models}
    # what `plan` assumes of each model (its file's plan: block, then model_overrides): no stage reads it
    out["plans"] = {m: _resolved(cfg, "model", m).get("plan") or {} for m in models}
    return out


def runtime(s: Settings, device: str) -> Runtime:
    """Settings that change how fast, not what, a stage computes (:class:`~leakexp.runner.stage.Runtime`)."""
    run = s.run
    return Runtime(device=device, verbose=run.verbose, threads=s.bm25.threads, loader_workers=run.loader_workers,
                   resume_every_s=run.resume_every_s, cpu_threads=run.cpu_threads, cpu_kernels=run.cpu_kernels,
                   embed_batch_size=s.detect.batch_size,
                   score_batch_size={m: score_batch_size(c, device) for m, c in s.values["models"].items()})


def score_batch_size(model: Mapping, device: str) -> int:
    """Documents per scoring batch of a model's resolved settings on ``device``: ``cuda.score_batch_size`` on CUDA
    where set, else ``train.score_batch_size`` (64 where neither is)."""
    on_cuda = (model.get("cuda") or {}).get("score_batch_size") if str(device).startswith("cuda") else None
    return int(on_cuda or (model.get("train") or {}).get("score_batch_size") or 64)


class RunSettings(Section):
    """The top-level values: the store, the cell's size and seed, the device, and per-model overrides."""

    store: Name
    size: PositiveInt
    seed: Annotated[int, Field(ge=0)]
    device: Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$")]
    verbose: bool
    loader_workers: Literal["auto"] | Annotated[int, Field(ge=0, le=256)]
    workers: Literal["auto"] | Annotated[int, Field(ge=1, le=256)] = "auto"
    resume_every_s: NonNegativeFloat = 300.0
    cpu_threads: Annotated[int, Field(ge=1, le=1024)] = 1
    cpu_kernels: Literal["portable", "native"] = "portable"
    model_overrides: dict[Name, dict]
    corpus_overrides: dict[Name, dict] = {}


@section("report")
class ReportSettings(Section):
    """``report``: the model Figure 2 shows."""

    figure_model: Name


class CollectionSize(Section):
    """A collection's size for the plan's df-table hours: documents and mean words per document."""

    docs: PositiveInt
    words_per_doc: PositiveFloat


@section("plans.*")
class ModelPlan(Section):
    """A model file's ``plan:`` block: what ``leakexp plan`` assumes of the model until ``make bench`` measures it."""

    train_instances_per_s: PositiveFloat
    rerank_docs_per_s: PositiveFloat
    job_startup_s: Annotated[float, Field(ge=0)]
    encode_docs_per_s: PositiveFloat
    data_pipeline_instances_per_s: PositiveFloat


@section("plan")
class PlanSettings(Section):
    """``plan``: assumed throughput (used until ``make bench`` measures it on the GPU) and topic counts."""

    embed_queries_per_s: PositiveFloat
    topics: dict[str, PositiveInt]
    loader_workers: PositiveInt = 4
    cells_per_job: PositiveInt = 1
    negatives_queries_per_s: PositiveFloat = 25_000
    df_words_per_s: PositiveFloat = 450_000
    collections: dict[str, CollectionSize] = {}


# -- `leakexp fetch` (leakexp.grid.fetch): what it downloads; no stage reads it ---------------------------------
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Commit = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")]


class SourceFile(Section):
    """A file of a repository at a commit: its name, its sha256 (null: not pinned, refused), and for a run the file of
    leakexp/data/runs/ that holds its top-100."""

    name: Name
    sha256: Sha256 | None
    bundled: Name | None = None


class GloveSource(Section):
    """``fetch.glove``: the GloVe 6B archive (its 50d, 100d, 200d and 300d files) and its sha256."""

    url: Name
    sha256: Sha256 | None


class Spire22Source(Section):
    """``fetch.spire22``: the SPIRE-22 authors' repository (raw files) at a commit, and the files taken from it."""

    url: Name
    commit: Commit
    annotations: list[SourceFile]
    runs: list[SourceFile]


@section("fetch")
class FetchSettings(Section):
    """``fetch``: where ``leakexp fetch`` puts files that no other setting places, and what it downloads."""

    dir: Name
    glove: GloveSource
    spire22: Spire22Source


def fetched_spire22(fs: FetchSettings) -> Path:
    """The folder ``leakexp fetch`` puts the SPIRE-22 files into (one per pinned commit, under ``fetch.dir`` as the
    setting spells it), and where a null setting that reads them looks: the one place both agree on."""
    return Path(fs.dir).expanduser() / f"SPIRE-22@{fs.spire22.commit[:7]}"


def fetched_annotations(fs: FetchSettings) -> list[Path]:
    """The study's four annotation files where ``leakexp fetch`` puts them (whether they are there or not)."""
    return [fetched_spire22(fs) / "manual-annotations" / f.name for f in fs.spire22.annotations]
