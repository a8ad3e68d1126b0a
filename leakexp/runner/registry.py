"""The composition root: a configuration composed, checked and typed, and its runner.

:func:`compose` is the one way in: Hydra composes the overrides, every section is checked against its schema and every
stage's own checks run, and one typed :class:`~leakexp.runner.schema.Settings` comes out, which the runner, the grid,
the tables and the command line read (nothing past it reads the composed values). Stages register where they are
declared (``leakexp.runner.stage.register_stage``), sections where their schemas are (``leakexp.runner.schema.section``);
this module names neither. A runner that may write checks first what the run needs from outside
(:func:`check_requirements`).
"""

from __future__ import annotations

from collections.abc import Iterable

from omegaconf import DictConfig

from leakexp.runner import config
from leakexp.runner.config import resolved_values, runtime
from leakexp.runner.jobs import configure_precision, resolve_device
from leakexp.runner.pipeline import Runner
from leakexp.runner.schema import SECTIONS, Section, Settings, check_files, check_sections, validate
from leakexp.runner.stage import ConfigError, DataUnavailable, fetching, reading_models, stages
from leakexp.runner.store import Store


def sections() -> dict[str, type[Section]]:
    """Every config section's schema: each stage's ``Settings`` under its section, then those registered where they
    are declared (``leakexp.runner.schema.section``: the grid, the models, plan, report, fetch)."""
    out = {s.section: s.Settings for s in stages() if s.Settings is not None}
    return {**out, **SECTIONS}


def schema_of(dotted: str) -> type[Section]:
    """The schema of a section by its dotted place in the settings: ``evaluate``, ``models.knrm``,
    ``corpora.robust04`` (``corpora.*``'s)."""
    known = sections()
    if dotted in known:
        return known[dotted]
    group, _, name = dotted.partition(".")
    if name and f"{group}.*" in known:
        return known[f"{group}.*"]
    if dotted == "corpus":  # the cell's corpus: a corpus like any other
        return known["corpora.*"]
    raise KeyError(dotted)


def _registered(leaf: str, name) -> None:
    known = [k.partition(".")[2] for k in sections() if k.startswith("models.")]
    if name not in known:
        raise ConfigError(f"{leaf}: model {name!r} has no registered class; known models: {', '.join(known)} "
                          "(a model is its class, registered with leakexp.models.register, and its "
                          f"conf/model/{name}.yaml)")


def _top_sections() -> dict:
    return {k: v for k, v in sections().items() if "." not in k}


def typed(cfg: DictConfig, overrides: Iterable[str] = ()) -> Settings:
    """The one typed :class:`~leakexp.runner.schema.Settings` of a composed configuration: every section checked
    against its schema (a ConfigError names the first bad leaf), the corpora and models the grid and the cell use
    included, then every stage's own checks, each once. Nothing past this point reads the composed values."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=True)
    model = raw.get("model") or {}
    plan = model.pop("plan", None)  # what `plan` assumes of the model (config.ModelPlan): no stage reads it
    _registered("model.name", model.get("name"))  # its schema checks the model section
    top = dict(_top_sections(), model=schema_of(f"models.{model.get('name')}"), corpus=schema_of("corpus"))
    check_sections(raw, top, top=config.RunSettings)
    if plan is not None:
        validate("model.plan", config.ModelPlan, plan)
    values = resolved_values(cfg)
    for fill in _once(st.fills for st in stages() if st.fills is not None):
        fill(values)  # e.g. the annotation files `leakexp fetch` placed, for a null verify.annotations
    cell = raw["corpus"]["name"]
    for name, corpus in values["corpora"].items():
        if name != cell or name in (raw.get("corpus_overrides") or {}):
            validate(f"corpora.{name}", schema_of(f"corpora.{name}"), corpus)
    for name, merged in values["models"].items():
        _registered("grid.models", name)
        overridden = (raw.get("model_overrides") or {}).get(name, {})
        try:
            validate(f"models.{name}", schema_of(f"models.{name}"), merged)
            validate(f"models.{name}.plan", config.ModelPlan, values["plans"][name])
        except ConfigError as exc:  # name the override that set the bad value, where one did
            leaf = str(exc).split(":")[0].split(" ")[0].removeprefix(f"models.{name}.")
            if leaf.split(".")[0] in overridden:
                raise ConfigError(f"model_overrides.{name}.{str(exc).removeprefix(f'models.{name}.')}") from None
            raise
    s = Settings(values, schema_of, config.RunSettings, overrides or ())
    for fn in _once(st.check for st in stages() if st.check is not None):
        fn(s)
    return s


def compose(overrides: list[str] | None = None) -> Settings:
    """The configuration of ``overrides`` (Hydra syntax: ``experiment=paper``, ``model=knrm``, ``evaluate.mfr=...``),
    composed by Hydra and checked: its typed settings (:func:`typed`)."""
    return typed(config.compose_raw(overrides), overrides)


def _file_entries(s: Settings, models: Iterable[str] | None = None) -> list:
    """(setting, path) of every file the configuration names: each section's, each corpus's and each model's
    (``models``: those models' only)."""
    corpora = list(dict.fromkeys([*s.grid.corpora, s.corpus.name]))
    top = [k for k in s.values if k in _top_sections() or k == "corpus"]
    cell = s.values["corpus"]["name"]
    sections = [s.section(k) for k in top]
    sections += [s.corpus_of(n) for n in s.corpus_names if n != cell or n in s.run.corpus_overrides]
    sections += [s.model_of(n) for n in (s.model_names if models is None else models)]
    return [e for x in sections for e in (x.files_for(corpora) if hasattr(x, "files_for") else x.files())]


def _requirements(needs: Iterable[str] | None) -> list:
    wanted = None if needs is None else set(needs)
    unknown = sorted((wanted or set()) - {s.name for s in stages()})
    if unknown:
        raise ValueError(f"needs names no stage: {', '.join(unknown)}")
    return _once(s.require for s in stages() if s.require is not None and (wanted is None or s.name in wanted))


def _once(hooks) -> list:
    """Each hook once: a family's stages share theirs (one method of their common class)."""
    return list({getattr(fn, "__func__", fn): fn for fn in hooks}.values())


def unreadable_files(s: Settings, models: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
    """(setting, path, the error naming both) of every file the configuration names that cannot be read
    (``models``: of those models' settings only)."""
    out = []
    for setting, path in _file_entries(s, models):
        try:
            check_files([(setting, path)])
        except ConfigError as exc:
            out.append((setting, str(path), str(exc)))
    return out


def check_requirements(s: Settings, needs: Iterable[str] | None = None, models: Iterable[str] | None = None) -> None:
    """What a run that computes needs before any work: every file the configuration names exists and is readable,
    and the stages named in ``needs`` (None: every stage) have what they require (``Stage.require``: annotation files,
    models in the Hugging Face cache, fetched first on a connected machine); ``models``: the re-rankers the run
    trains (None: every model of the configuration)."""
    models = None if models is None else list(models)
    check_files(_file_entries(s, models))
    with fetching(), reading_models(models):  # a pinned model missing from the cache is fetched now, where allowed
        for fn in _requirements(needs):
            fn(s)


def unmet_requirements(s: Settings) -> list[str]:
    """What a run of ``s`` still needs from outside the store (input files, query variants, annotations, models in
    the Hugging Face cache), one line each naming the setting: what `plan` and `status` list instead of refusing."""
    unmet = []
    for entry in _file_entries(s):
        try:
            check_files([entry])
        except ConfigError as exc:
            unmet.append(str(exc))
    for fn in _requirements(None):
        try:
            fn(s)
        except (ConfigError, DataUnavailable) as exc:
            unmet.extend(getattr(exc, "messages", [str(exc)]))  # ConfigErrors: one line each
    return list(dict.fromkeys(unmet))


def runner(s: Settings, *, readonly: bool = False, files: bool | None = None,
           needs: Iterable[str] | None = None) -> Runner:
    """The runner of the settings ``s``: its store, the device it computes on. A runner that may write (not
    ``readonly``) first checks what the run needs (:func:`check_requirements`; ``files`` decides apart); ``needs``: the stages whose
    requirements must be met (None: every stage; a command that computes only indexes or candidates needs no
    annotations and no re-ranker weights)."""
    if (not readonly) if files is None else files:
        check_requirements(s, needs)
    device = resolve_device(s.run.device)
    r = Runner(s, stages(), Store(s.run.store, create=not readonly), runtime=runtime(s, device),
               cuda=device.startswith("cuda"))
    configure_precision(s.precision.matmul, device)  # process-wide, from config, before any model runs
    return r
