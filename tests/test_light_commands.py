"""The commands that compute nothing start without the libraries that compute: ``--help``, ``status``, ``plan``,
``check``, ``stages``, ``measure`` and ``tables`` of a finished store import neither torch nor transformers (nor
SBERT, Faiss or PyTerrier; SciPy's statistics only for the tables; ``--help``, ``stages`` and ``status`` not even
pandas), each run in a fresh process as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import SMALL

NEVER = ("torch", "transformers", "sentence_transformers", "faiss", "pyterrier")
# what only writing the tables needs (their t-tests); the other light commands start without it too
ONLY_TABLES = ("scipy.stats",)
# what reads runs, tables and data: the commands that read only the configuration and the done markers start without it
ONLY_DATA = ("pandas",)

# leakexp's main in a fresh interpreter; at exit it prints which of the modules named in LEAKEXP_WATCHED it imported
WRAPPER = """import os, sys
from leakexp.cli.main import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
finally:
    print('heavy', ','.join(m for m in os.environ['LEAKEXP_WATCHED'].split(',') if m in sys.modules))
sys.exit(rc or 0)
"""


def leakexp(argv: list[str], watched: tuple[str, ...]) -> tuple[int, str, list[str]]:
    """``leakexp ARGV`` in a fresh interpreter: exit code, output, and the ``watched`` modules it imported."""
    env = dict(os.environ, LEAKEXP_WATCHED=",".join(watched))
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, timeout=300, env=env)
    last = [line for line in proc.stdout.splitlines() if line.startswith("heavy ")][-1:]
    assert last, proc.stdout + proc.stderr
    return proc.returncode, proc.stdout + proc.stderr, [m for m in last[0].removeprefix("heavy ").split(",") if m]


def has_command(name: str) -> bool:
    from leakexp.cli.main import main

    try:
        main([name, "--help"])
    except SystemExit as exc:
        return exc.code == 0
    return True


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A run of 100 topics and its qrels, for ``measure``."""
    d = tmp_path_factory.mktemp("measure")
    (d / "a.run").write_text("".join(f"q{q} Q0 d{k} {k} {10 - k} a\n" for q in range(100) for k in range(10)))
    (d / "qrels.txt").write_text("".join(f"q{q} 0 d{q % 10} 1\n" for q in range(100)))
    return d


COMMANDS = ("help", "stages", "status", "plan", "check", "tables", "measure")


@pytest.mark.parametrize("command", COMMANDS)
def test_light_commands_import_no_torch(command, small_run, small_store, runs, tmp_path, capsys):
    if command == "check" and not has_command("check"):
        pytest.skip("leakexp check does not exist in this version")
    capsys.readouterr()
    grid = [f"store={small_store}", *SMALL]
    argv = {"help": ["--help"], "stages": ["stages", *grid], "status": ["status", *grid], "plan": ["plan", *grid],
            "check": ["check", *grid], "tables": ["tables", *grid, "--out", str(tmp_path / "tables")],
            "measure": ["measure", str(runs / "a.run"), "--qrels", str(runs / "qrels.txt"),
                        f"store={tmp_path / 'store'}"]}[command]
    watched = NEVER + (() if command == "tables" else ONLY_TABLES) + \
        (ONLY_DATA if command in ("help", "stages", "status") else ())
    rc, out, heavy = leakexp(argv, watched)
    assert heavy == [], (command, out[-3000:])
    if command != "check":  # what check finds is its own business; here only what it imports
        # status: 1, as the small grid's robustness parts were never computed
        assert rc == (1 if command == "status" else 0), out[-3000:]
    if command == "tables":
        assert any((tmp_path / "tables").rglob("*.md")), out
    if command == "status":
        assert " ".join(next(line for line in out.splitlines() if line.startswith("evaluate")).split()) == \
            "evaluate 18 0 0 0 0 0 0 18"
    if command == "measure":
        assert "nDCG@10" in out
