"""Nothing is recomputed by moving code: every artifact of ``experiment=demo`` keeps the record and key that the
code before the package's reorganisation (commit 43e2105) gave it, so a store built then is complete now (``status``
finds it done and ``leakexp demo`` computes nothing). ``tests/data/demo_key_records.json.gz`` holds those records.

When a stage changes on purpose (a version bump, a setting it now reads, a new artifact of the demo), regenerate
the file and review its diff — every changed record is an artifact a store recomputes::

    PYTHONPATH=. python tests/key_records.py --write
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from key_records import DATA, demo_asks, demo_runner, load

import leakexp
from leakexp.runner.stage import Ask
from leakexp.runner.store import config_hash

REGENERATE = ("if the change is deliberate (a stage's version bump, a new setting it reads), regenerate the file with "
              "`PYTHONPATH=. python tests/key_records.py --write` and review its diff: each changed record is an "
              "artifact every store recomputes")


@pytest.fixture(scope="module")
def current(tmp_path_factory):
    """The demo's runner under the current code, and key -> record of every artifact it asks for."""
    cfg, r = demo_runner(tmp_path_factory.mktemp("keys") / "store")
    return r, {r.key(a): r.record(a) for a in demo_asks(cfg, r)}


def test_the_stored_records_are_consistent():
    stored = load()
    assert len(stored) == 530
    assert all(config_hash(rec) == key for key, rec in stored.items()), f"{DATA} is damaged; {REGENERATE}"


def test_every_stored_artifact_keeps_its_record_and_key(current):
    r, _ = current
    order = list(r.stages)  # the registry's order: the stage that changed comes first, then those below it
    named = {s.key_name: s.name for s in r.stages.values()}  # a renamed stage's records hold its old name (keyed_as)
    changed = []
    for key, rec in sorted(load().items(), key=lambda kv: order.index(named[kv[1]["stage"]])):
        ask = Ask.of(named[rec["stage"]], **rec["params"])
        if r.record(ask) != rec or r.key(ask) != key:
            where = r.path(ask)
            changed.append(f"{where.relative_to(r.store.root) if where else ask} (was {key[:12]})")
    assert not changed, f"{len(changed)} artifact(s) are keyed differently: {', '.join(changed[:10])}; {REGENERATE}"


def test_the_demo_asks_for_no_artifact_the_store_lacks(current):
    _, found = current
    new = sorted(f"{rec['stage']} {rec['params']}" for key, rec in found.items() if key not in load())
    assert not new, f"the demo asks for {len(new)} artifact(s) not in {DATA.name}: {new[:10]}; {REGENERATE}"


def _strings(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def test_no_record_names_a_code_location(current):
    """A key depends on what a stage computes, never on where its code lives: moving a module must not re-key."""
    _, found = current
    package = str(Path(leakexp.__file__).resolve().parent)
    for records in (found, load()):
        bad = {s for rec in records.values() for s in _strings(rec)
               if package in s or re.search(r"\bleakexp[./]\w", s) or s.endswith(".py")}  # a module or a file of it
        assert not bad, sorted(bad)[:10]
