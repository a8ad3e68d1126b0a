"""One identity for every file a stage reads from outside the store (leakexp.data.files.file_identity)."""

from __future__ import annotations

import os
import shutil

from leakexp.data import files
from leakexp.data.files import file_identity, files_identity


def test_a_copied_small_file_keeps_its_identity_and_an_edited_one_changes(tmp_path):
    a = tmp_path / "a" / "qrels.txt"
    a.parent.mkdir()
    a.write_text("301 0 FBIS3-1 1\n")
    b = tmp_path / "b" / "qrels.txt"
    b.parent.mkdir()
    shutil.copy(a, b)
    os.utime(b, ns=(1, 1))  # a copy made elsewhere: another mtime, same bytes
    assert file_identity(a) == file_identity(b) == {"size": 16, "blake2b": files.file_digest(a)}
    b.write_text("301 0 FBIS3-1 0\n")  # same size, other content
    assert file_identity(b) != file_identity(a)
    # by name, not by folder: the keys name no machine's folders
    assert files_identity(a) == {"qrels.txt": file_identity(a)}


def test_a_large_file_is_identified_by_size_mtime_and_its_first_and_last_mib(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "SMALL", 1000)
    big = tmp_path / "glove.txt"
    data = bytearray(os.urandom(3 << 20))
    big.write_bytes(data)
    first = file_identity(big)
    assert set(first) == {"size", "mtime_ns", "ends"} and first["size"] == 3 << 20
    stamp = big.stat().st_mtime_ns
    data[-1] ^= 0xFF  # the last MiB changes, size and mtime kept
    big.write_bytes(data)
    os.utime(big, ns=(stamp, stamp))
    assert file_identity(big)["ends"] != first["ends"]
    data[-1] ^= 0xFF
    data[(3 << 20) // 2] ^= 0xFF  # the middle MiB is not read: same size and mtime, same identity
    big.write_bytes(data)
    os.utime(big, ns=(stamp, stamp))
    assert file_identity(big) == first


def test_a_folder_is_its_listing_and_a_missing_path_is_none(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("1")
    listing = file_identity(tmp_path / "d")
    assert listing["folder"] and listing["files"] == 1 and listing["size"] == 1
    (tmp_path / "d" / "y").write_text("22")
    assert file_identity(tmp_path / "d")["files"] == 2
    assert file_identity(tmp_path / "absent") is None


def test_a_docstore_sidecar_written_with_fewer_identity_fields_still_matches():
    from leakexp.data.irds import _same_file

    now = {"size": 10, "mtime_ns": 5, "ends": "ab"}
    assert _same_file({"size": 10, "mtime_ns": 5}, now)  # recorded before "ends" was part of the identity
    assert not _same_file({"size": 10, "mtime_ns": 6}, now)
    assert not _same_file(None, now) and _same_file(None, None)
