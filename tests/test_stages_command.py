"""``leakexp stages``: every stage of the registry with what it reads under the configuration, and the stage graph.
The listing is resolved on the artifacts the configuration asks for, so it must agree with what the runner keys."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET

import pytest
from key_records import demo_asks, demo_runner

from leakexp.cli.main import main
from leakexp.grid import overview
from leakexp.runner.stage import stages

STAGES = stages()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's runner and its listing (on a store that does not exist: nothing is read or written)."""
    store = tmp_path_factory.mktemp("stages") / "store"
    cfg, r = demo_runner(store)
    return cfg, r, overview.listing(cfg, r), store


def test_every_stage_is_listed_in_registry_order_with_its_version_and_module(demo):
    _, _, infos, store = demo
    assert [(s.name, s.version, s.module) for s in infos] == [(s.name, s.version, s.module) for s in STAGES]
    assert all(s.used for s in infos)  # the demo asks for every stage (robustness and its extras included)
    assert not store.exists()


def test_the_renamed_stages_are_listed_with_the_name_their_keys_keep(demo):
    _, _, infos, _ = demo
    assert {s.name: s.keyed_as for s in infos if s.keyed_as} == {"build": "sets", "evaluate": "eval",
                                                                  "corpus-stats": "docstats", "pair-audit": "audit",
                                                                  "graph-audit": "graph"}
    assert ("renamed, keys unchanged: corpus-stats (was docstats), build (was sets), evaluate (was eval), pair-audit "
            "(was audit), graph-audit (was graph)") in overview.render_stages(infos)


def test_train_reads_the_model_sections_and_the_training_set_and_tokens(demo):
    cfg, _, infos, _ = demo
    t = {s.name: s for s in infos}["train"]
    assert t.module == "leakexp.stages.train" and t.version == 4 and t.stored
    assert t.reads == tuple(sorted({*(f"models.{m}" for m in cfg.grid.models), "train"}))
    assert t.inputs == ("build", "df", "t5vocab", "tokens")


def test_the_listing_is_what_the_runner_keys(demo):
    """Reads and inputs per stage are the union over every artifact of the demo, as the runner resolves them."""
    cfg, r, infos, _ = demo
    reads, inputs = {}, {}
    for a in demo_asks(cfg, r):
        reads.setdefault(a.stage, set()).update(r.config(a).declared)
        inputs.setdefault(a.stage, set()).update(b.stage for b in r.direct(a))
    assert {s.name: set(s.reads) for s in infos} == reads
    assert {s.name: set(s.inputs) for s in infos} == inputs
    assert set(overview.edges(infos)) == {(i, s) for s, names in inputs.items() for i in names}


def _svg_ids(path, prefix: str) -> set[str]:
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return {e.get("id")[len(prefix):] for e in root.iter() if (e.get("id") or "").startswith(prefix)}


def test_the_svg_draws_one_node_per_stage_and_one_arrow_per_input(demo, tmp_path):
    cfg, r, infos, _ = demo
    path = overview.draw(infos, tmp_path / "dag" / "stages.svg")
    expected = {(b.stage, a.stage) for a in demo_asks(cfg, r) for b in r.direct(a)}
    assert _svg_ids(path, "stage:") == {s.name for s in STAGES}
    assert {tuple(e.split(":")) for e in _svg_ids(path, "edge:")} == expected
    assert ("build", "train") in expected and ("tokens", "train") in expected and ("embed", "pair-audit") in expected
    assert len(expected) == 81


def test_layers_follow_the_inputs(demo):
    """Top to bottom by topological generation: every input is on a higher layer than the stage that reads it."""
    g = overview.stage_graph(demo[2])
    assert all(g.nodes[u]["layer"] < g.nodes[v]["layer"] for u, v in g.edges)
    assert g.nodes["toy"]["layer"] == 0 and g.nodes["pool"]["layer"] == 1
    assert max(d["layer"] for _, d in g.nodes(data=True)) == g.nodes["evaluate"]["layer"]


def test_the_command_marks_unused_stages_and_writes_a_png(tmp_path, capsys):
    store = tmp_path / "store"
    png = tmp_path / "stages.png"
    rc = main(["stages", f"store={store}", "robustness.enabled=false", "--graph", str(png)])
    out = capsys.readouterr().out
    assert rc == 0 and not store.exists()  # read-only: not even a store is made
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line and not line[0].isspace()}
    assert all(s.name in rows for s in STAGES), out
    assert rows["train"][1:4] == ["4", "leakexp.stages.train", "yes"]
    unused = [s for s in STAGES if s.family == "robustness"]
    for s in unused:
        assert rows[s.name][3] == "no", rows[s.name]
        if not callable(s.reads):  # a tuple: listed as declared
            assert ", ".join(s.reads) in " ".join(out.split()), s.name
    assert f"not used by this configuration ({len(unused)}): {', '.join(s.name for s in unused)};" in out
    assert out.rstrip().endswith(f"graph: {png}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 400 and height > 400


def test_a_graph_file_other_than_png_or_svg_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["stages", f"store={tmp_path / 'store'}", "--graph", str(tmp_path / "stages.pdf")])
    assert exc.value.code == 2 and "give a file ending in .png or .svg" in capsys.readouterr().err
    assert not (tmp_path / "stages.pdf").exists()
