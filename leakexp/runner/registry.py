"""The composition root: a configuration checked against every registered section and stage, and its runner.

Stages register where they are declared (``leakexp.runner.stage.register``), sections where their schemas are
(``leakexp.runner.schema.section``); this module names neither. :func:`runner` checks a configuration against every
section and every stage's own checks before anything is computed.
"""

from __future__ import annotations

from collections.abc import Iterable

from omegaconf import DictConfig

from leakexp.runner import config
from leakexp.runner.config import compose as compose_config, resolved_values, runtime
from leakexp.runner.jobs import configure_precision, resolve_device
from leakexp.runner.pipeline import Runner
from leakexp.runner.schema import SECTIONS, Section, Settings, check_files, check_sections, validate
from leakexp.runner.stage import ConfigError, DataUnavailable, fetching, stages
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
    if f"models.{name}" not in SECTIONS:
        known = [k.partition(".")[2] for k in SECTIONS if k.startswith("models.")]
        raise ConfigError(f"{leaf}: model {name!r} has no registered class; known models: {', '.join(known)} "
                          "(a model is its class, registered with leakexp.models.register, and its "
                          f"conf/model/{name}.yaml)")


def _top_sections() -> dict:
    return {k: v for k, v in sections().items() if "." not in k}


def _schemas(cfg: DictConfig) -> list:
    """Every section of ``cfg`` validated (a ConfigError names the first bad leaf), with the corpora and models the
    grid and the cell use; returns the validated sections whose files a run reads."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=True)
    model = raw.get("model") or {}
    plan = model.pop("plan", None)  # what `plan` assumes of the model (config.ModelPlan): no stage reads it
    _registered("model.name", cfg.model.name)  # its schema checks the model section
    top = dict(_top_sections(), model=schema_of(f"models.{cfg.model.name}"), corpus=schema_of("corpora.*"))
    checked = check_sections(raw, top, top=config.RunSettings)
    if plan is not None:
        validate("model.plan", config.ModelPlan, plan)
    sections = list(checked.values())
    for name in dict.fromkeys([*cfg.grid.corpora, *config.corpus_names(cfg)]):
        if name != cfg.corpus.name or name in (raw.get("corpus_overrides") or {}):
            sections.append(validate(f"corpora.{name}", schema_of(f"corpora.{name}"),
                                     OmegaConf.to_container(config.resolved_corpus_config(cfg, name), resolve=True)))
    for name in dict.fromkeys([*cfg.grid.models, cfg.model.name]):
        _registered("grid.models", name)
        merged = OmegaConf.to_container(config.resolved_model_config(cfg, name), resolve=True)
        overridden = (raw.get("model_overrides") or {}).get(name, {})
        try:
            sections.append(validate(f"models.{name}", schema_of(f"models.{name}"), merged))
            config.model_plan(cfg, name)
        except ConfigError as exc:  # name the override that set the bad value, where one did
            leaf = str(exc).split(":")[0].split(" ")[0].removeprefix(f"models.{name}.")
            if leaf.split(".")[0] in overridden:
                raise ConfigError(f"model_overrides.{name}.{str(exc).removeprefix(f'models.{name}.')}") from None
            raise
    return sections


def check_config(cfg: DictConfig, *, files: bool = False, needs: Iterable[str] | None = None) -> None:
    """The whole configuration before any work: every section against its schema, then every stage's own
    checks (each once); with ``files`` (a run that computes), every file a run reads exists and is readable, and
    the stages named in ``needs`` (None: every stage) have what they require (``Stage.require``: annotation files,
    models in the Hugging Face cache, fetched first on a connected machine)."""
    sections = _schemas(cfg)
    typed = Settings(resolved_values(cfg), schema_of, config.RunSettings)
    for fn in _once(s.check for s in stages() if s.check is not None):
        fn(typed)
    if files:
        check_files(_file_entries(cfg, sections))
        with fetching():  # a pinned Hugging Face model missing from the cache is fetched now, where allowed
            for fn in _requirements(needs):
                fn(typed)


def _file_entries(cfg: DictConfig, sections: list) -> list:
    corpora = list(dict.fromkeys([*cfg.grid.corpora, cfg.corpus.name]))
    return [e for s in sections for e in (s.files_for(corpora) if hasattr(s, "files_for") else s.files())]


def _requirements(needs: Iterable[str] | None) -> list:
    wanted = None if needs is None else set(needs)
    unknown = sorted((wanted or set()) - {s.name for s in stages()})
    if unknown:
        raise ValueError(f"needs names no stage: {', '.join(unknown)}")
    return _once(s.require for s in stages() if s.require is not None and (wanted is None or s.name in wanted))


def _once(hooks) -> list:
    """Each hook once: a family's stages share theirs (one method of their common class)."""
    return list({getattr(fn, "__func__", fn): fn for fn in hooks}.values())


def unmet_requirements(cfg: DictConfig) -> list[str]:
    """What a run of ``cfg`` still needs from outside the store (input files, query variants, annotations, models in
    the Hugging Face cache), one line each naming the setting: what `plan` and `status` list instead of refusing."""
    unmet = []
    for entry in _file_entries(cfg, _schemas(cfg)):
        try:
            check_files([entry])
        except ConfigError as exc:
            unmet.append(str(exc))
    typed = Settings(resolved_values(cfg), schema_of, config.RunSettings)
    for fn in _requirements(None):
        try:
            fn(typed)
        except (ConfigError, DataUnavailable) as exc:
            unmet.extend(getattr(exc, "messages", [str(exc)]))  # ConfigErrors: one line each
    return list(dict.fromkeys(unmet))


def settings_of(cfg: DictConfig) -> Settings:
    """The typed settings of ``cfg`` (:class:`~leakexp.runner.schema.Settings`): how code outside a stage reads a
    setting (``settings_of(cfg).evaluate.mfr``). Every section is checked against its schema first, so a bad value
    is a ConfigError naming the setting; the stages' own checks are :func:`check_config`'s."""
    _schemas(cfg)
    return Settings(resolved_values(cfg), schema_of, config.RunSettings)


def compose_checked(overrides: list[str] | None = None) -> DictConfig:
    """The configuration of ``overrides``, composed and checked, the stages' sections included."""
    cfg = compose_config(overrides)
    check_config(cfg)
    return cfg


def runner(cfg: DictConfig, *, readonly: bool = False, files: bool | None = None,
           needs: Iterable[str] | None = None) -> Runner:
    """The runner of ``cfg`` (checked first): its store, its resolved settings, and the device it computes on.
    ``needs``: the stages whose requirements a computing command must meet before any work (None: every stage;
    a command that computes only indexes or candidates needs no annotations and no re-ranker weights)."""
    # a run that computes needs its input files, and what its stages require
    check_config(cfg, files=not readonly if files is None else files, needs=needs)
    device = resolve_device(str(cfg.get("device", "auto")))
    values = resolved_values(cfg)
    r = Runner(values, stages(), Store(cfg.store, create=not readonly), runtime=runtime(cfg, device, values),
               cuda=device.startswith("cuda"), schemas=schema_of, top=config.RunSettings)
    configure_precision(r.settings.precision.matmul)  # process-wide, from config, before any model runs
    return r
