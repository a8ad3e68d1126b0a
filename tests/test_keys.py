"""Every config leaf re-keys exactly the artifacts whose stages read it (directly or through their inputs).

The expectation comes from the stages' declarations (``Stage.reads`` and ``Stage.inputs``), never from a hand
list, so a setting that a stage reads without declaring it, or a key that misses an input, fails here.
"""

from __future__ import annotations

import types
import typing

import pytest
from conftest import edited, paper_env
from omegaconf import OmegaConf

from leakexp.stages.cell import grid_cells
from leakexp.runner.config import ConfigError, RunSettings, compose_raw, model_config, resolved_values
from leakexp.runner.registry import compose, typed
from leakexp.grid.work import grid_asks
from leakexp.runner.lineage import leaves as _leaves
from leakexp.models import REGISTRY
from leakexp.runner.pipeline import Runner
from leakexp.runner.stage import stages
from leakexp.runner.registry import schema_of
from leakexp.runner.schema import Settings
from leakexp.runner.store import Store


def _runner(values: dict, store, cuda: bool = False) -> Runner:
    return Runner(Settings(values, schema_of, RunSettings), stages(), store, cuda=cuda)


def _all_asks(cfg, runner) -> list:
    asks = [a for v in grid_asks(cfg, runner).values() for a in v]
    return list(dict.fromkeys(u for a in asks for u in runner.upstream(a)))


def _annotation(leaf: str):
    """The type the schemas give ``leaf`` (the cell's model: every model's schema), or None where none says."""
    parts = leaf.split(".")
    if parts[0] in ("model_overrides", "corpus_overrides"):  # per-name overrides of a model's or a corpus's file
        parts = ["models" if parts[0] == "model_overrides" else "corpora", *parts[1:]]
    width = 2 if parts[0] in ("models", "corpora") else 1
    if parts[0] == "model":  # the cell's model: the first model schema that has the leaf
        return next((a for a in (_annotation(".".join(["models", n, *parts[1:]])) for n in REGISTRY) if a), None)
    try:
        schema = schema_of(".".join(parts[:width]))
    except KeyError:
        return None
    annotation = None
    for part in parts[width:]:
        field = getattr(schema, "model_fields", {}).get(part)
        if field is None:
            return None
        annotation = field.annotation
        schema = next((a for a in (typing.get_args(annotation) or (annotation,)) if hasattr(a, "model_fields")), None)
    return annotation


def _options(annotation) -> list:
    """The alternatives of a type: the members of a Union, the values of a Literal, else the type itself."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [o for a in typing.get_args(annotation) for o in _options(a)]
    if typing.get_origin(annotation) is typing.Annotated:
        return _options(typing.get_args(annotation)[0])
    return [annotation]


def _changed(value, leaf: str = ""):
    """Another value the leaf's schema accepts: another of its named values (``Literal``), a value of its type for a
    null, else another of the same type (a list loses its last element, or its only element changes)."""
    options = _options(_annotation(leaf)) if leaf and not leaf.endswith(".name") else []
    named = [o for o in options if isinstance(o, (str, int, float)) and not isinstance(o, bool) and o != value
             and (value is None or type(o) is type(value))]
    if named and (value is None or value in options):
        return named[0]
    if value is not None and value in options and type(None) in options:  # the only value it names: null instead
        return None
    if value is None:
        for kind, new in ((float, 1.0), (int, 1), (bool, True), (str, "changed")):
            if kind in options:
                return new
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 2
    if isinstance(value, float):
        return value * 0.5 + 0.01
    if isinstance(value, str):
        return value + "-changed"
    if value is None:
        return "changed"
    if OmegaConf.is_dict(value) and not value:  # an empty mapping (corpus_overrides: {}) gains an entry
        return {"changed": "changed"}
    raise TypeError(type(value))


def _covers(read: str, leaf: str) -> bool:
    return leaf == read or leaf.startswith(read + ".") or read.startswith(leaf + ".")


def _direct(runner: Runner, ask, changed: set[str]) -> bool:
    """Whether the stage of ``ask`` reads one of the ``changed`` settings leaves (its declaration says so)."""
    reads = runner.stage(ask).read_paths(ask.params, runner.cuda)
    for leaf in changed:
        if any(_covers(r, leaf) for r in reads if not r.startswith("!")) and \
                not any(leaf == r[1:] or leaf.startswith(r[1:] + ".") for r in reads if r.startswith("!")):
            return True
    return False


def _settings_leaves(s: dict) -> dict:
    return dict(_leaves(s))


# the paper's grid with two sizes and two seeds: every stage, corpus, leakage type and model, 20x fewer cells
PAPER_SMALL = ["grid.sizes=[1000,128000]", "grid.seeds=[1,2]"]
# the demo's grid at one size: every stage, corpus, leakage type and model, half the cells
DEMO_SMALL = ["grid.sizes=[128]"]


# every leaf of the paper's grid (about 90 s) runs in make test-all; the demo's every time, as a CPU keys it and as
# CUDA keys it (the stages that run on a device read more there: precision, how a model computes on CUDA)
@pytest.mark.parametrize("experiment,cuda", [("demo", False), ("demo", True),
                                             pytest.param("paper", False, marks=pytest.mark.slow),
                                             pytest.param("paper", True, marks=pytest.mark.slow)])
def test_every_leaf_rekeys_exactly_its_readers(experiment, cuda, tmp_path, monkeypatch):
    extra = paper_env(tmp_path, monkeypatch)[1:] + PAPER_SMALL if experiment == "paper" else DEMO_SMALL
    # the composed values, each leaf changed in turn and resolved again (the runner's keys read the resolved values)
    cfg = compose_raw([f"experiment={experiment}", f"store={tmp_path / 'store'}", *extra])
    store = Store(tmp_path / "store")
    base_settings = resolved_values(cfg)
    base_leaves = _settings_leaves(base_settings)
    base = _runner(base_settings, store, cuda)
    asks = _all_asks(typed(cfg), base)
    base_keys = {a: base.key(a) for a in asks}
    inputs = {a: [base.normal(b) for v in base.inputs(a).values() for b in (v if isinstance(v, list) else [v])]
              for a in asks}
    leaves = [k for k, _ in _leaves(OmegaConf.to_container(cfg, resolve=True)) if not k.startswith("hydra.")]
    assert len(leaves) > 60
    checked, selectors = 0, []
    for leaf in leaves:
        value = OmegaConf.select(cfg, leaf)
        if leaf.endswith(".recipe"):  # a named recipe of the model's file: another of its names
            new = next(r for r in model_config(leaf.split(".")[-2])["recipes"] if r != value)
        elif isinstance(value, list) or OmegaConf.is_list(value):
            items = list(value)
            new = items[:-1] if len(items) > 1 else [_changed(items[0], leaf) if items else "changed"]
        else:
            new = _changed(value, leaf)
        try:
            with edited(cfg, leaf, new) as changed_cfg:
                s = resolved_values(changed_cfg)
        except ConfigError:  # the name of a config group's option: another name is another config file
            selectors.append(leaf)
            continue
        changed_leaves = _settings_leaves(s)
        diff = {k for k, v in changed_leaves.items() if base_leaves.get(k, object()) != v}
        diff |= {k for k in base_leaves if k not in changed_leaves}
        runner = _runner(s, store, cuda)
        got, affected = set(), {}

        def reads_changed(a) -> bool:  # the stage of ``a`` declares a changed value, or one of its inputs does
            if a not in affected:
                affected[a] = _direct(base, a, diff) or any(reads_changed(b) for b in inputs[a])
            return affected[a]

        for ask in asks:
            try:
                key = runner.key(ask)
            except Exception:  # a changed path that no longer exists: the artifact is re-keyed (cannot be made)
                key = None
            if key != base_keys[ask]:
                got.add(ask)
        expected = {a for a in asks if reads_changed(a)}
        assert got == expected, (f"{leaf}: re-keyed but no declared reader: {sorted(map(str, got - expected))[:5]}; "
                                 f"declared reader but same key: {sorted(map(str, expected - got))[:5]}")
        checked += 1
    assert set(selectors) <= {"model.name", "corpus.name"}, selectors
    assert checked + len(selectors) == len(leaves)


def test_analysis_rekeys_training_sets_and_all_below(tmp_path):
    """The training sets' negatives come from BM25 over the training pool: its analysis is part of their key."""
    cfg = compose(["experiment=demo", f"store={tmp_path}"])
    other = compose(["experiment=demo", f"store={tmp_path}", "bm25.stemmer=porter"])
    a, b = _runner(cfg.values, Store(tmp_path)), _runner(other.values, Store(tmp_path))
    cells = grid_cells(cfg)
    for stage in ("build", "train", "rerank", "evaluate"):
        assert all(a.key(c.ask(stage)) != b.key(c.ask(stage)) for c in cells), stage
    assert a.key(cells[0].ask("build")) != b.key(cells[0].ask("build"))


def test_no_leakage_work_is_shared_by_corpora(tmp_path):
    cfg = compose(["experiment=demo", f"store={tmp_path}"])
    r = _runner(cfg.values, Store(tmp_path))
    none = [c for c in grid_cells(cfg) if c.leakage == "none"]
    by_corpus = {}
    for c in none:
        by_corpus.setdefault((c.size, c.model, c.seed), set()).add((r.path(c.ask("build")), r.path(c.ask("train"))))
    assert all(len(v) == 1 for v in by_corpus.values())
    # re-rankings stay per corpus, and leaked models stay per corpus
    assert len({r.path(c.ask("rerank")) for c in none}) == len(none)
    msm = [c for c in grid_cells(cfg) if c.leakage == "msm"]
    assert len({r.path(c.ask("train")) for c in msm}) == len(msm)
