"""Every stage of leakexp, one registration line each, and the runner of a configuration.

A new stage is a module that declares a :class:`~leakexp.stage.Stage` and one line in ``STAGES``; the runner
(``leakexp.pipeline``) derives its keys and paths and computes it on demand. Each stage's ``check`` validates
its own config section; :func:`runner` runs them all before anything is computed.
"""

from __future__ import annotations

from omegaconf import DictConfig

from leakexp import build, demo, detect, evaluate, memorization, rerank, retrieval, robustness, train, verify
from leakexp.data import sources
from leakexp.models import capreolus, monot5
from leakexp.pipeline import Runner

STAGES = (
    sources.TOY, sources.POOL, sources.COLLECTION,
    retrieval.INDEX, retrieval.FIRST_STAGE,
    detect.EMBED, detect.DETECT,
    verify.VERIFY, verify.LEAKS,
    build.FILLERS, build.NEGATIVES, build.SET,
    capreolus.DF, monot5.T5_VOCAB,
    train.TRAIN, rerank.RERANK, evaluate.EVAL,
    memorization.MEMORIZATION,
    *robustness.STAGES,
    demo.PAIR_AUDIT, demo.GRAPH_DEMO,
)


def check(cfg: DictConfig) -> None:
    """Every stage's own config check (each once), raising ConfigError naming the setting and the fix."""
    for fn in dict.fromkeys(s.check for s in STAGES if s.check is not None):
        fn(cfg)


def compose(overrides: list[str] | None = None) -> DictConfig:
    """The configuration of ``overrides``, composed and checked, the stages' sections included."""
    from leakexp.config import compose as compose_config

    cfg = compose_config(overrides)
    check(cfg)
    return cfg


def runner(cfg: DictConfig, *, readonly: bool = False) -> Runner:
    """The runner of ``cfg`` (checked first): its store, its resolved settings, and the device it computes on."""
    from leakexp.config import runtime, settings
    from leakexp.store import Store
    from leakexp.train import configure_precision, resolve_device

    check(cfg)
    device = resolve_device(str(cfg.get("device", "auto")))
    configure_precision(cfg.precision)  # process-wide, from config, before any model runs
    return Runner(settings(cfg), STAGES, Store(cfg.store, create=not readonly), runtime=runtime(cfg, device),
                  cuda=device.startswith("cuda"))
