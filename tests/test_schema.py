"""Every leaf of the resolved configuration has a type and, where it has one, a domain, checked before any work.

The leaves come from the configuration itself and the out-of-domain values from the schemas' own constraints, so a
setting added without a schema, or a constraint that is declared but not enforced, fails here.
"""

from __future__ import annotations


import pytest
from conftest import edited, paper_env
from omegaconf import OmegaConf

from leakexp.runner import config as config_module
from leakexp.runner import registry as stages
from leakexp.runner.config import ConfigError, compose_raw
from leakexp.runner.registry import compose
from leakexp.runner.lineage import leaves
from leakexp.runner.registry import schema_of
from leakexp.runner.registry import sections


def _wrong_type(value):
    if isinstance(value, bool):
        return "maybe"
    if isinstance(value, (int, float)):
        return "many"
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return 5
    return {"not": "a value"}  # a null leaf: any type but a mapping would be its type


def _schema_of(cfg, section: str):
    if section == "model":
        return schema_of(f"models.{cfg.model.name}")
    if section == "corpus":
        return schema_of("corpora.*")
    return sections().get(section)


def _property(schema: dict, path: list[str]) -> dict | None:
    """The JSON-schema property at ``path`` (following $ref and picking the non-null branch of a union)."""
    defs, node = schema.get("$defs", {}), schema
    for part in path:
        node = node.get("properties", {}).get(part)
        if node is None:
            return None
        if "$ref" in node:
            node = defs[node["$ref"].split("/")[-1]]
        if "anyOf" in node:
            branches = [b for b in node["anyOf"] if b.get("type") != "null"]
            node = defs[branches[0]["$ref"].split("/")[-1]] if "$ref" in branches[0] else branches[0]
    return node


def _out_of_domain(prop: dict, value):
    """A value of the right type outside the property's declared domain (None: no domain beyond the type)."""
    cast = type(value) if isinstance(value, (int, float)) else {"integer": int}.get(prop.get("type"), float)
    if "enum" in prop or "const" in prop:
        return "not-a-choice"
    if "pattern" in prop:
        return "not a match!"
    if "minimum" in prop:
        return cast(prop["minimum"]) - 1
    if "exclusiveMinimum" in prop:
        return cast(prop["exclusiveMinimum"])
    if "maximum" in prop:
        return cast(prop["maximum"]) + 1
    if "exclusiveMaximum" in prop:
        return cast(prop["exclusiveMaximum"])
    if prop.get("type") == "array" and prop.get("minItems"):
        return []
    items = prop.get("items") or {}
    if isinstance(value, list) and value and ("enum" in items or "const" in items or "minimum" in items
                                             or "exclusiveMinimum" in items):
        return [_out_of_domain(items, value[0])]
    return None


def _rejected(cfg, leaf: str, value, store) -> str:
    with edited(cfg, leaf, value) as changed, pytest.raises(ConfigError) as err:
        stages.runner(stages.typed(changed))
    message = str(err.value)
    assert "\n" not in message, (leaf, message)
    assert not store.exists(), f"{leaf}: the store was written before the configuration error"
    return message


@pytest.mark.parametrize("experiment", ["demo", "paper"])
def test_every_leaf_has_a_type_and_its_domain_is_enforced_before_any_work(experiment, tmp_path, monkeypatch):
    store = tmp_path / "empty-store"
    extra = paper_env(tmp_path, monkeypatch) if experiment == "paper" else []
    cfg = compose_raw([f"store={store}", *extra])  # Hydra's composition, each leaf changed in turn
    stages.runner(stages.typed(cfg), readonly=True)  # the configuration as composed is valid
    assert not store.exists()
    all_leaves = [(k, v) for k, v in leaves(OmegaConf.to_container(cfg, resolve=True)) if not k.startswith("hydra.")]
    assert len(all_leaves) > 100
    with_domain = 0
    for leaf, value in all_leaves:
        if value == {} or value == []:  # an empty mapping or list has no leaf below it: its type is checked
            message = _rejected(cfg, leaf, 5, store)
            assert leaf in message, (leaf, message)
            continue
        message = _rejected(cfg, leaf, _wrong_type(value), store)
        assert leaf in message, (leaf, message)
        section, *rest = leaf.split(".")
        schema = _schema_of(cfg, section) if rest else config_module.RunSettings
        if schema is None:
            continue
        prop = _property(schema.model_json_schema(), rest or [section])
        bad = None if prop is None else _out_of_domain(prop, value)
        if bad is not None:
            message = _rejected(cfg, leaf, bad, store)
            assert leaf in message, (leaf, message)
            with_domain += 1
    assert with_domain > 40, with_domain
    print(f"{experiment}: {len(all_leaves)} leaves, {with_domain} with a domain beyond their type")


def test_a_setting_without_a_schema_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="bm25.k3 is not a setting of bm25"):
        compose([f"store={tmp_path / 's'}", "+bm25.k3=1.2", "+colour=blue"])
    with pytest.raises(ConfigError, match="colour is not a setting of leakexp"):
        compose([f"store={tmp_path / 's'}", "+colour=blue"])


def test_files_a_run_needs_are_checked_before_the_run_and_named(tmp_path):
    cfg = compose([f"store={tmp_path / 's'}", f"verify.annotations=[{tmp_path / 'missing.jsonl'}]"])
    with pytest.raises(ConfigError, match=r"verify.annotations names .*missing.jsonl, which does not exist"):
        stages.runner(cfg)
    assert not (tmp_path / "s").exists()
    stages.runner(cfg, readonly=True)  # status and plan read the store only: they need no input file
    cfg = compose([f"store={tmp_path / 's'}", f"rerank.first_stage='{tmp_path}/runs/{{corpus}}.gz'"])
    with pytest.raises(ConfigError, match=r"rerank.first_stage names .*runs/toy_robust.gz"):
        stages.runner(cfg)
    cfg = compose([f"store={tmp_path / 's'}", "model.embeddings=/nowhere/glove.6B.300d.txt"])
    with pytest.raises(ConfigError, match=r"model.embeddings names /nowhere/glove.6B.300d.txt"):
        stages.runner(cfg)
