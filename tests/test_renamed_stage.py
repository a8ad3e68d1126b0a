"""A renamed stage keeps its keys and its stored artifacts (``Stage.keyed_as``): its records hash the old name, a
runner that may write moves the old folder to the new name once, and a read-only one reads it where it is."""

from __future__ import annotations

import json
from pathlib import Path

from leakexp.runner.pipeline import Runner
from leakexp.runner.stage import Ask, Stage
from leakexp.runner.store import Store

COMPUTED: list[str] = []


def _stages(name: str, keyed_as: str = "") -> list[Stage]:
    class Count(Stage):
        reads = ("count.start",)

        def compute(self, ctx, tmp: Path) -> dict:
            COMPUTED.append(ctx.stage.name)
            (tmp / "value.json").write_text(json.dumps(ctx.config["count"]["start"] + 1))
            return {"n": 1}

    Count.name, Count.keyed_as = name, keyed_as
    return [Count()]


def _runner(root: Path, name: str, keyed_as: str = "", *, writable: bool = True) -> Runner:
    return Runner({"count": {"start": 41}}, _stages(name, keyed_as), Store(root, create=writable))


def test_a_renamed_stage_keeps_its_key_and_its_stored_artifact(tmp_path):
    COMPUTED.clear()
    old = _runner(tmp_path, "eval")
    old_path = old.ensure(Ask.of("eval"))
    assert COMPUTED == ["eval"] and old_path.parent == tmp_path / "eval"

    # read-only (status, plan, tables): the artifact is found where the old name put it, and nothing moves
    reader = _runner(tmp_path, "evaluate", keyed_as="eval", writable=False)
    assert reader.key(Ask.of("evaluate")) == old.key(Ask.of("eval"))
    assert reader.record(Ask.of("evaluate"))["stage"] == "eval"
    assert reader.state(Ask.of("evaluate"))[0] == "done" and reader.path(Ask.of("evaluate")) == old_path
    assert (tmp_path / "eval").is_dir() and not (tmp_path / "evaluate").exists()

    # a runner that may write moves the folder once; nothing is recomputed
    renamed = _runner(tmp_path, "evaluate", keyed_as="eval")
    new_path = renamed.ensure(Ask.of("evaluate"))
    assert COMPUTED == ["eval"]
    assert new_path == tmp_path / "evaluate" / old_path.name and not (tmp_path / "eval").exists()
    assert json.loads((new_path / "value.json").read_text()) == 42


def test_without_keyed_as_a_new_name_is_a_new_key(tmp_path):
    """The control: a plain rename re-keys, so the old artifact would be recomputed."""
    a, b = _runner(tmp_path, "eval"), _runner(tmp_path, "evaluate")
    assert a.key(Ask.of("eval")) != b.key(Ask.of("evaluate"))


def test_a_store_holding_both_folders_keeps_the_new_one(tmp_path):
    """A store where the new folder already exists (another worker moved it, or new work began): nothing moves."""
    COMPUTED.clear()
    _runner(tmp_path, "eval").ensure(Ask.of("eval"))
    (tmp_path / "evaluate").mkdir()
    r = _runner(tmp_path, "evaluate", keyed_as="eval")
    assert (tmp_path / "eval").is_dir() and r.path(Ask.of("evaluate")).parent == tmp_path / "evaluate"
