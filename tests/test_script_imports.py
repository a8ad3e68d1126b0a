"""The scripts beside the package (benchmarks, experiments) import leakexp names inside their functions, where no
test runs them: every such import must name a module and a name that exist, so a rename inside leakexp cannot leave
``make bench`` broken until someone runs it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "experiments").glob("*.py")])


def _leakexp_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None for ``import module``) of every leakexp import anywhere in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "leakexp":
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names if alias.name.split(".")[0] == "leakexp"]
    return out


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_leakexp_import_of_a_script_resolves(path):
    missing = []
    for line, module, name in _leakexp_imports(path):
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"line {line}: {module} ({exc})")
            continue
        if name is not None and not hasattr(imported, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule: from leakexp.stages import build
            except ImportError:
                missing.append(f"line {line}: {module}.{name}")
    assert not missing, f"{path.name}: {missing}"


def test_the_check_sees_a_missing_name(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("def f():\n    from leakexp.stages import sets as build\n    from leakexp.runner.stage import Ask\n")
    assert _leakexp_imports(script) == [(2, "leakexp.stages", "sets"), (3, "leakexp.runner.stage", "Ask")]
    with pytest.raises(AssertionError, match="leakexp.stages.sets"):
        test_every_leakexp_import_of_a_script_resolves(script)
