"""``leakexp diff STORE_A STORE_B``: the artifacts two stores hold under equal keys with other content, earliest in the
lineage first, from their done markers alone; older markers (no content hash, no ``upstream``) still compare.

The stores are made by the runner from a few stages declared here: ``vectors`` (stored; its bytes follow ``NOISE``,
as embeddings follow a CPU's kernels), ``pairs`` (in-process, read from the vectors), ``candidates`` (stored, from the
pairs: it differs when the vectors do) and ``counts`` (stored, from the candidates: the same whatever the noise)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from leakexp.cli.main import main
from leakexp.runner.diff import diff_stores, render
from leakexp.runner.pipeline import Runner
from leakexp.runner.stage import Ask, Stage
from leakexp.runner.store import DONE, Store, files_digest

NOISE = {"value": 0}
ORDER = ["vectors", "pairs", "candidates", "counts"]  # the stages' order, as the registry gives it


class Vectors(Stage):
    name, reads = "vectors", ("embed.dim",)

    def compute(self, ctx, tmp: Path) -> dict:
        (tmp / "vec.bin").write_bytes(bytes([1, 2, 3, 4 + NOISE["value"]]) * 256)
        (tmp / "meta.json").write_text(json.dumps({"dim": ctx.config["embed"]["dim"]}))
        return {}


class Pairs(Stage):
    name = "pairs"

    def inputs(self, p, c):
        return {"vectors": Ask.of("vectors")}

    def value(self, ctx):
        return (ctx.inputs["vectors"] / "vec.bin").read_bytes()


class Candidates(Stage):
    name = "candidates"

    def inputs(self, p, c):
        return {"pairs": Ask.of("pairs")}

    def compute(self, ctx, tmp: Path) -> dict:
        data = ctx.inputs["pairs"]
        (tmp / "cands.txt").write_text("".join(f"q{i} {b}\n" for i, b in enumerate(data[:8])))
        (tmp / "README").write_text("candidates\n")
        return {}


class Counts(Stage):
    name = "counts"

    def inputs(self, p, c):
        return {"candidates": Ask.of("candidates")}

    def compute(self, ctx, tmp: Path) -> dict:
        (tmp / "count.txt").write_text(str(len((ctx.inputs["candidates"] / "cands.txt").read_text().splitlines())))
        return {}


STAGES = [Vectors(), Pairs(), Candidates(), Counts()]


def _store(root: Path, noise: int, *, extra: bool = False) -> Path:
    NOISE["value"] = noise
    r = Runner({"embed": {"dim": 4}}, STAGES, Store(root))
    r.ensure(Ask.of("counts"))
    if extra:  # the vectors of another setting: another key
        Runner({"embed": {"dim": 8}}, STAGES, Store(root)).ensure(Ask.of("vectors"))
    return root


def _rel(root: Path, stage: str) -> str:
    (path,) = [p.parent for p in (root / stage).rglob(DONE)]
    return path.relative_to(root).as_posix()


def _strip_markers(root: Path) -> None:
    """Markers as written before the content hash and ``upstream`` were recorded."""
    for marker in root.rglob(DONE):
        data = json.loads(marker.read_text())
        data.pop("content"), data.pop("upstream")
        marker.write_text(json.dumps(data))


def test_a_marker_records_its_files_digest_and_the_stored_artifacts_it_was_made_from(tmp_path):
    root = _store(tmp_path / "a", 0)
    r = Runner({"embed": {"dim": 4}}, STAGES, Store(root))
    marker = Store.marker(r.path(Ask.of("candidates")))
    assert marker.content == files_digest(marker.files) == marker.content_or_table
    # through the in-process pairs, the stored vectors
    assert marker.upstream == (r.key(Ask.of("vectors")),)
    assert Store.marker(r.path(Ask.of("vectors"))).upstream == ()


def test_identical_stores_exit_0(tmp_path, capsys):
    a = _store(tmp_path / "a", 0)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "3 artifacts with equal keys, all with equal content" in out and "only in" not in out


def test_the_first_difference_is_listed_first_with_the_file_that_differs(tmp_path, capsys):
    a, b = _store(tmp_path / "a", 0), _store(tmp_path / "b", 1)
    vectors, candidates = _rel(a, "vectors"), _rel(a, "candidates")
    assert (vectors, candidates) == (_rel(b, "vectors"), _rel(b, "candidates"))  # equal keys
    for path in [*a.rglob("vec.bin"), *b.rglob("vec.bin")]:
        path.unlink()  # the markers say everything: no data file is read
    assert main(["diff", str(a), str(b)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("2 of 3 artifacts with equal keys differ, earliest in the lineage first; 1 of them with equal "
                        "inputs (where the stores part):")
    assert lines[3:] == [
        f"  {vectors}  (its inputs are equal: the stores part here)",
        "      vec.bin: content differs (1024 bytes)",
        f"  {candidates}  (after {vectors})",
        "      cands.txt: content differs (40 bytes)",
    ]
    # lineage, not the names: candidates sorts before vectors, and stage orders that say otherwise do not matter
    for order in ([], list(reversed(ORDER))):
        found = diff_stores(a, b, order=order)
        assert [d.rel for d in found.differ] == [vectors, candidates] and found.same == 1


def test_stores_from_before_the_files_digest_are_still_compared(tmp_path):
    a, b = _store(tmp_path / "a", 0), _store(tmp_path / "b", 1)
    same = tmp_path / "same"
    shutil.copytree(a, same)
    _strip_markers(b)
    _strip_markers(same)
    # an older marker's file table gives the same content hash as a new marker's record
    assert diff_stores(a, same, order=ORDER).differ == []
    assert [d.after for d in diff_stores(a, b, order=ORDER).differ] == [[], [_rel(a, "vectors")]]  # A's upstream
    _strip_markers(a)
    found = diff_stores(a, b, order=ORDER)
    assert [(d.rel, d.files) for d in found.differ] == [
        (_rel(a, "vectors"), ["vec.bin: content differs (1024 bytes)"]),
        (_rel(a, "candidates"), ["cands.txt: content differs (40 bytes)"])]
    # an older marker names the in-process pairs, not the vectors behind them: said so, and ordered by the stages
    first, second = found.differ
    assert first.after == [] and first.traced and second.after == [] and not second.traced
    assert "does not trace" in "\n".join(render(found))
    assert [d.rel for d in diff_stores(b, a, order=ORDER).differ] == [_rel(a, "vectors"), _rel(a, "candidates")]


def test_artifacts_only_one_store_holds_are_counted(tmp_path, capsys):
    a, b = _store(tmp_path / "a", 0), _store(tmp_path / "b", 0, extra=True)
    shutil.copytree(b / _rel(b, "counts"), b / "counts" / ".x.tmp-99")  # a killed worker's folder is no artifact
    (a / "vectors" / "damaged").mkdir()
    (a / "vectors" / "damaged" / DONE).write_text("[]")
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "only in B: 1 (vectors 1)" in out and "only in A" not in out
    assert "A: 1 DONE.json file(s) are no done marker" in out


@pytest.mark.parametrize("which", [0, 1])
def test_a_store_that_is_not_there_is_one_line(tmp_path, capsys, which):
    stores = [str(_store(tmp_path / "a", 0)), str(tmp_path / "nowhere")]
    if which:
        stores.reverse()
    assert main(["diff", *stores]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere: no such store directory" in err and "Traceback" not in err


def test_the_registry_lists_every_stage_after_the_stages_it_reads(tmp_path):
    """The order ``diff`` falls back on where older markers do not link an artifact to what it was made from."""
    from leakexp.grid import overview
    from leakexp.runner.stage import stages
    from leakexp.runner.registry import compose

    place = {s.name: i for i, s in enumerate(stages())}
    edges = overview.edges(overview.listing(compose(["experiment=demo", f"store={tmp_path}"])))
    assert len(edges) > 20
    assert [(i, s) for i, s in edges if place[i] >= place[s]] == []
