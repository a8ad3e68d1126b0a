"""Adding a stage is its class and its block in conf/config.yaml: no other file of leakexp changes. Here the class lives
in this test and the block in a copy of conf/ (``LEAKEXP_CONF``); the stage's settings are checked by its own schema,
its command is listed by ``leakexp --help`` and computes its artifacts into a store folder of its name, ``status``
shows its row, ``stages`` lists it with what it reads, and a changed setting re-keys exactly its artifacts."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Literal

import pytest

from leakexp.runner.schema import Section
from leakexp.runner.stage import Ask, Config, Context, Stage, register_stage, stages, unregister_stage

ROOT = Path(__file__).resolve().parent.parent


class QueryLengths(Stage):
    """the length in words of every topic's query of a test corpus"""

    name, version = "lengths", 1
    help = "the length in words of every topic's query of the grid's corpora"
    reads = ("lengths.field",)

    class Settings(Section):
        """``lengths``: which field of a topic is its query."""

        field: Literal["title", "description"]

    def inputs(self, p: dict, c: Config) -> dict:
        return {"collection": Ask.of("collection", corpus=p["corpus"])}

    def compute(self, ctx: Context, tmp: Path) -> dict:
        field = ctx.settings("lengths").field
        lengths = {qid: len(t.text(field).split()) for qid, t in ctx.inputs["collection"].topics.items()}
        (tmp / "lengths.json").write_text(json.dumps(lengths, sort_keys=True))
        return {"topics": len(lengths), "longest": max(lengths.values())}

    def asks(self, r, cells) -> list[Ask]:
        return [Ask.of("lengths", corpus=c) for c in dict.fromkeys(r.settings.grid.corpora)]


BLOCK = """
lengths:
  field: title   # the topic field whose words are counted
"""
GRID = ["data.queries_per_source=600", "grid.corpora=[toy_core17]", "corpus=toy_core17", "grid.sizes=[128]",
        "grid.models=[knrm]", "grid.seeds=[1]"]


@pytest.fixture
def seventh(tmp_path, monkeypatch):
    """A copy of conf/ with the stage's block, and the stage registered; both gone afterwards."""
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "config.yaml").write_text((conf / "config.yaml").read_text() + BLOCK)
    monkeypatch.setenv("LEAKEXP_CONF", str(conf))
    register_stage(QueryLengths)
    yield conf
    unregister_stage("lengths")


def test_without_its_class_the_block_is_an_unknown_setting(tmp_path, monkeypatch):
    from leakexp.runner.registry import compose
    from leakexp.runner.stage import ConfigError

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "config.yaml").write_text((conf / "config.yaml").read_text() + BLOCK)
    monkeypatch.setenv("LEAKEXP_CONF", str(conf))
    assert "lengths" not in {s.name for s in stages()}
    with pytest.raises(ConfigError, match=r"^lengths is not a setting of leakexp \(known: .*\); remove it"):
        compose([f"store={tmp_path / 'store'}"])


def test_a_seventh_stage_is_its_class_and_its_block(seventh, tmp_path, seeded_store, capsys):
    from leakexp.cli.main import main
    from leakexp.runner.registry import compose, runner
    from leakexp.runner.stage import ConfigError

    store = seeded_store(tmp_path / "store")
    overrides = [f"store={store}", *GRID]

    # its schema checks its section, before any work: a value outside its domain, a misspelled key
    with pytest.raises(ConfigError, match=r"^lengths\.field: input should be 'title' or 'description' \(got 'body'\)"):
        compose([*overrides, "lengths.field=body"])
    with pytest.raises(ConfigError, match=r"^lengths\.feild is not a setting of lengths; remove it"):
        compose([*overrides, "+lengths.feild=title"])

    # its command is listed, in the pipeline's group, with its help line
    with pytest.raises(SystemExit):
        main(["--help"])
    pipeline = capsys.readouterr().out.split("pipeline (")[1].split("\ntoolkit (")[0]
    assert re.search(r"^  lengths +the length in words of every topic's query of the grid's corpora$", pipeline, re.M)

    # `leakexp lengths` computes its artifact into the store folder of its name
    assert main(["lengths", *overrides]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert folder.parent == store / "lengths" / "toy_core17" and (folder / "DONE.json").is_file()
    r = runner(compose(overrides), readonly=True)
    topics = r.get(Ask.of("collection", corpus="toy_core17")).topics
    lengths = json.loads((folder / "lengths.json").read_text())
    assert lengths == {qid: len(t.title.split()) for qid, t in topics.items()} and len(lengths) == 12
    assert r.store.marker(folder).figures == {"topics": 12, "longest": max(lengths.values())}

    # status shows its row, done
    main(["status", *overrides])
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert rows["lengths"][0] == "1" and rows["lengths"][-1] == "1"  # done, total

    # stages lists it with its module and what it reads
    assert main(["stages", *overrides]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("lengths "))
    assert row[:4] == ["lengths", "1", __name__, "yes"] and "lengths.field" in row

    # a changed setting re-keys its artifact and nothing else
    other = runner(compose([*overrides, "lengths.field=description"]), readonly=True)
    assert other.key(Ask.of("lengths", corpus="toy_core17")) != r.key(Ask.of("lengths", corpus="toy_core17"))
    assert other.key(Ask.of("evaluate", corpus="toy_core17", leakage="msm", size=128, model="knrm", seed=1,
                            target="toy_core17")) == \
        r.key(Ask.of("evaluate", corpus="toy_core17", leakage="msm", size=128, model="knrm", seed=1,
                     target="toy_core17"))
