"""The package's structure: imports point down (no module imports one that imports it back), the runner names
no stage, stages import neither the runner nor the table writers, and ``config``/``store`` import no stage."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import leakexp
from leakexp.stages.registry import STAGES

ROOT = Path(leakexp.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(("leakexp", *path.relative_to(ROOT).with_suffix("").parts))
        out[name.removesuffix(".__init__")] = path
    return out


def import_graph() -> nx.DiGraph:
    """Module -> module it imports, counting imports inside functions too (they are dependencies all the same)."""
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for t in targets:
                if t in modules and t not in (name, "leakexp"):
                    graph.add_edge(name, t)
    return graph


def test_the_graph_sees_imports_inside_functions():
    g = import_graph()
    assert g.has_edge("leakexp.stages.registry", "leakexp.runner.pipeline")  # module level
    assert g.has_edge("leakexp.tables.paper", "leakexp.tables.memorization")  # inside write_tables


def test_no_import_circle():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == []


def _stage_modules() -> set[str]:
    import sys

    return {sys.modules[s.compute.__module__ if s.compute else s.value.__module__].__name__ for s in STAGES}


def test_stages_import_neither_runner_nor_writers_and_config_imports_no_stage():
    g = import_graph()
    stage_modules = _stage_modules()
    assert {"leakexp.stages.sets", "leakexp.stages.train", "leakexp.stages.memorization", "leakexp.stages.robustness"} <= stage_modules
    # ``report`` is the format library (Markdown, LaTeX, CSV writers) that any report-writing capability may
    # use, e.g. the graph audit; the table assemblers that read the grid's artifacts sit above every stage
    above = {"leakexp.runner.pipeline", "leakexp.stages.registry", "leakexp.stages.grid", "leakexp.tables.paper", "leakexp.tables.memorization", "leakexp.tables.robustness", "leakexp.cli.commands", "leakexp.cli.main", "leakexp.runner.lineage",
             "leakexp.cli.plan"}
    for module in stage_modules:
        assert not set(nx.descendants(g, module)) & above, (module, set(nx.descendants(g, module)) & above)
    for module in ("leakexp.runner.config", "leakexp.runner.store", "leakexp.runner.stage", "leakexp.runner.pipeline"):
        assert not set(nx.descendants(g, module)) & stage_modules, module
    assert "leakexp.runner.pipeline" not in nx.descendants(g, "leakexp.toolkit.audit")


def test_the_runner_names_no_stage_and_stays_small():
    text = (ROOT / "runner" / "pipeline.py").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for stage in STAGES:
        assert f'"{stage.name}"' not in text and f"'{stage.name}'" not in text, stage.name
