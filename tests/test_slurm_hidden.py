"""The default suite behaves as on a machine without SLURM (tests/slurm_hidden.py)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from slurm_hidden import SLURM_COMMANDS, path_without_slurm


def test_the_default_suite_sees_no_slurm_command(request):
    if "slurm" in (request.config.getoption("-m") or ""):
        pytest.skip("make test-slurm keeps SLURM's commands")
    assert [c for c in sorted(SLURM_COMMANDS) if shutil.which(c)] == []
    out = subprocess.run(["bash", "-c", "command -v sbatch srun squeue || echo none"], capture_output=True, text=True)
    assert out.stdout.strip() == "none"  # the children too (make, the grid's workers)


def test_a_folder_with_slurm_commands_keeps_everything_else(tmp_path):
    bin_dir, other = tmp_path / "bin", tmp_path / "other"
    bin_dir.mkdir(), other.mkdir()
    for name in ("srun", "sbatch", "python-tool"):
        exe = bin_dir / name
        exe.write_text("#!/bin/sh\necho " + name + "\n")
        exe.chmod(0o755)
    path = path_without_slurm(os.pathsep.join([str(bin_dir), str(other)]), tmp_path / "links")
    folders = path.split(os.pathsep)
    assert folders[1] == str(other) and folders[0] != str(bin_dir)
    assert shutil.which("srun", path=path) is None and shutil.which("sbatch", path=path) is None
    tool = shutil.which("python-tool", path=path)
    assert tool is not None and subprocess.run([tool], capture_output=True, text=True).stdout == "python-tool\n"
