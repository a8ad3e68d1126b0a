"""An artifact's bytes do not depend on where the store is: computed in two stores at different paths, the demo's
verify and audit artifacts hold the same files with the same checksums, and none names its store or its temporary
build folder."""

from __future__ import annotations

import shutil

import pytest

from leakexp.runner.stage import Ask

UPSTREAM = ("toy", "embed", "detect")  # what verify and audit read, copied from the prepared store


def _store_at(path, toy_prepared):
    for stage in UPSTREAM:
        shutil.copytree(toy_prepared / stage, path / stage, dirs_exist_ok=True)
    return path


def _files(r, ask):
    """(relative path -> checksum) of the artifact, and every file's bytes joined (to search for paths)."""
    path = r.ensure(ask)
    marker = r.store.marker(path)
    raw = b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())
    return {name: f["blake2b"] for name, f in marker.files.items()}, raw


def _two_stores(tmp_path, toy_prepared, asks):
    from leakexp.runner.registry import runner
    from leakexp.runner.registry import compose

    from conftest import SMALL

    out = []
    for where in (tmp_path / "a" / "store", tmp_path / "elsewhere" / "deeper" / "store-b"):
        store = _store_at(where, toy_prepared)
        r = runner(compose([f"store={store}", *SMALL]))
        out.append((store, [_files(r, a) for a in asks]))
    return out


def test_verify_bytes_do_not_depend_on_the_store_path(tmp_path, toy_prepared):
    (a, [(files_a, raw_a)]), (b, [(files_b, raw_b)]) = _two_stores(tmp_path, toy_prepared, [Ask.of("verify")])
    assert "annotations.parquet" in files_a and files_a == files_b
    for store, raw in ((a, raw_a), (b, raw_b)):
        assert str(store).encode() not in raw and b".tmp-" not in raw


@pytest.mark.slow  # the audit embeds and resamples the small toy world twice: ~60 s on 2 cores
def test_audit_bytes_do_not_depend_on_the_store_path(tmp_path, toy_prepared):
    (a, [(files_a, raw_a)]), (b, [(files_b, raw_b)]) = _two_stores(tmp_path, toy_prepared, [Ask.of("pair-audit")])
    assert "decontaminate/data.yaml" in files_a and files_a == files_b
    for store, raw in ((a, raw_a), (b, raw_b)):
        assert str(store).encode() not in raw and b".tmp-" not in raw
