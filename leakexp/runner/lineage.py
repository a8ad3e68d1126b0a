"""Lineage: what made an artifact's key and, for a stale one, which values and inputs differ from the stored one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from leakexp.runner.pipeline import RUNNER, Runner
from leakexp.runner.stage import Ask
from leakexp.runner.store import KEY_LENGTH



def leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every leaf of nested dicts."""
    if isinstance(node, Mapping) and node:
        return [kv for k, v in node.items() for kv in leaves(v, f"{prefix}{k}.")]
    return [(prefix[:-1], node)]

def as_override(path: str) -> str:
    """A value's path as the command line sets it: the runner's ``models.<m>.…`` and ``corpora.<c>.…`` are set by
    ``model_overrides.<m>.…`` and ``corpus_overrides.<c>.…``, ``recipes.<m>`` by ``model_overrides.<m>.recipe``."""
    head, _, rest = path.partition(".")
    if head == "recipes":
        return f"model_overrides.{rest}.recipe"
    return {"models": f"model_overrides.{rest}", "corpora": f"corpus_overrides.{rest}"}.get(head, path)


def why(runner: Runner, ask: Ask, *, depth: int = 0) -> list[str]:
    """What made the key of ``ask`` and, where only other configurations' artifacts are stored, which of
    the values and inputs differ from theirs (following differing inputs upstream)."""
    ask, pad = runner.normal(ask), "  " * depth
    record, path = runner.record(ask), runner.path(ask)
    lines = [f"{pad}{ask}: key {runner.key(ask)[:KEY_LENGTH]}" + (f" at {path}" if path else " (in-process)")]
    if depth == 0:
        lines += [f"{pad}  reads {as_override(k)} = {json.dumps(v)}" for k, v in leaves(record["config"])]
        lines += [f"{pad}  input {n} = {v}" for n, v in record["inputs"].items()]
        lines += [f"{pad}  data missing: {m}" for m in runner.unavailable(ask)]
    if path is None or runner.store.marker(path) is not None:
        return lines
    for other in runner.store.others(path)[:1]:
        old = (runner.store.marker(other).config or {}) if runner.store.marker(other) else {}
        if old.get("runner") != RUNNER:
            lines.append(f"{pad}  stored {other.name}: made by an earlier store layout; its key is not comparable")
            continue
        lines.append(f"{pad}  stored {other.name} differs:")
        for k, v in leaves(record["config"]):
            was = dict(leaves(old.get("config", {}))).get(k, "(not read)")
            if was != v:
                lines.append(f"{pad}    {as_override(k)}: {json.dumps(was)} -> {json.dumps(v)}")
        for n, key in record["inputs"].items():
            if old.get("inputs", {}).get(n) != key:
                lines.append(f"{pad}    input {n}: {str(old.get('inputs', {}).get(n))[:KEY_LENGTH]} -> "
                             f"{str(key)[:KEY_LENGTH]}")
                v = runner.inputs(ask)[n]
                for a in (v if isinstance(v, list) else [v])[:3]:
                    lines += why(runner, a, depth=depth + 2)[1:] if depth < 8 else []
        for field in ("version", "params", "external", "cuda"):
            if old.get(field) != record.get(field):
                lines.append(f"{pad}    {field}: {old.get(field)} -> {record.get(field)}")
    return lines
