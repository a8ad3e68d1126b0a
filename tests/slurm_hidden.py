"""The default suite runs as on a machine without SLURM: SLURM's client commands are hidden from PATH.

A machine that once ran ``make test-slurm`` has srun, sbatch and the rest in /usr/bin, where a newcomer's has none;
a test that needs them would pass on the first and fail on the second. Each PATH folder that holds a SLURM command is
replaced by a folder of links to everything else it holds.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SLURM_COMMANDS = frozenset({"srun", "sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "salloc", "sattach",
                            "sstat", "sreport", "sacctmgr", "sprio", "sshare", "sview", "strigger", "sbcast", "sdiag"})


def path_without_slurm(path: str, into: Path) -> str:
    """``path`` with every folder that holds a SLURM command replaced by a folder (under ``into``) of links to its
    other entries; other folders stay as they are."""
    out = []
    for i, folder in enumerate(p for p in path.split(os.pathsep) if p):
        try:
            names = set(os.listdir(folder))
        except OSError:
            out.append(folder)
            continue
        if not names & SLURM_COMMANDS:
            out.append(folder)
            continue
        mirror = into / f"{i}-{Path(folder).name or 'root'}"
        mirror.mkdir(parents=True, exist_ok=True)
        for name in names - SLURM_COMMANDS:
            link = mirror / name
            if not link.exists():
                link.symlink_to(Path(folder) / name)
        out.append(str(mirror))
    return os.pathsep.join(out)


def hide_slurm() -> Path:
    """Hide SLURM's commands from this process and its children; returns the folder of links (remove it after)."""
    into = Path(tempfile.mkdtemp(prefix="leakexp-no-slurm-"))
    os.environ["PATH"] = path_without_slurm(os.environ.get("PATH", ""), into)
    return into
