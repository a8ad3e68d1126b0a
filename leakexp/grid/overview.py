"""Every stage of the registry as one configuration uses it: its version, its module, the settings it reads and the
stages it reads (``leakexp stages``), and their graph drawn as ``dvc dag`` does.

A stage's reads may depend on its parameters and its inputs on the settings, so both are resolved on the artifacts
the configured grid asks for (and everything upstream of them), as ``status`` keys them: nothing is computed or
written to the store. A stage the configuration never asks for is listed with the reads it declares where they do
not depend on parameters, and marked as unused.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.data.files import DataUnavailable
from leakexp.runner.pipeline import Runner
from leakexp.runner.schema import Settings
from leakexp.runner.stage import Ask, ConfigError
from leakexp.stages.cell import grid_cells
from leakexp.stages.sources import pool_source
from leakexp.grid.work import demo_asks, grid_asks
from leakexp.runner.registry import runner as make_runner
from leakexp.runner.stage import stages

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import networkx as nx


GRAPH_FORMATS = (".png", ".svg")


@dataclass(frozen=True)
class StageInfo:
    """One stage as the configuration uses it. ``reads``: the config paths it reads (None: they depend on the
    parameters of an artifact, and the configuration asks for none); ``inputs``: the stages it reads (None: unknown,
    the configuration asks for none of its artifacts); ``unresolved``: why the inputs of some of its artifacts are not
    known yet (e.g. annotation files not given), with how many artifacts each."""

    name: str
    version: int
    module: str
    stored: bool
    used: bool
    reads: tuple[str, ...] | None
    inputs: tuple[str, ...] | None
    unresolved: tuple[tuple[str, int], ...] = ()
    keyed_as: str = ""  # the name its keys were first derived under (``Stage.keyed_as``)


def configured_asks(s: Settings, runner: Runner) -> list[Ask]:
    """The artifacts the configured grid asks for (status's rows, and the demo's extras on the toy world)."""
    asks = [a for v in grid_asks(s, runner).values() for a in v]
    if pool_source(s.data).made_by:  # the demo's extras, on a generated world
        asks += demo_asks(s, runner)
    return list(dict.fromkeys(asks))


def listing(s: Settings, runner: Runner | None = None) -> list[StageInfo]:
    """Every stage of the registry, in its order, with what it reads under the settings ``s``: the union over the
    artifacts the
    grid asks for and everything upstream of them (read-only; nothing is computed)."""
    r = runner or make_runner(s, readonly=True)
    reads: dict[str, set[str]] = {}
    inputs: dict[str, set[str]] = {}
    unresolved: dict[str, dict[str, int]] = {}
    seen: set[Ask] = set()

    def visit(ask: Ask) -> None:
        ask = r.normal(ask)
        if ask in seen:
            return
        seen.add(ask)
        reads.setdefault(ask.stage, set()).update(r.config(ask).declared)
        inputs.setdefault(ask.stage, set())
        try:
            direct = r.direct(ask)
        except (ConfigError, DataUnavailable, OSError) as exc:  # what status reports as "cannot be keyed yet"
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            counts = unresolved.setdefault(ask.stage, {})
            counts[why] = counts.get(why, 0) + 1
            return
        inputs[ask.stage].update(b.stage for b in direct)
        for b in direct:
            visit(b)

    for ask in configured_asks(s, r):
        visit(ask)
    out = []
    for st in stages():
        used = st.name in reads
        static = None if callable(st.reads) else tuple(st.reads)
        out.append(StageInfo(st.name, st.version, st.module, st.stored, used,
                             tuple(sorted(reads[st.name])) if used else static,
                             tuple(sorted(inputs[st.name])) if used else None,
                             tuple(unresolved.get(st.name, {}).items()), st.keyed_as))
    return out


def edges(infos: list[StageInfo]) -> list[tuple[str, str]]:
    """(input stage, stage that reads it), as resolved."""
    return [(i, s.name) for s in infos for i in s.inputs or ()]


def stage_graph(infos: list[StageInfo]) -> nx.DiGraph:
    """One node per stage, an edge from each input stage to the stage that reads it; ``layer``: the node's
    topological generation (stages on a cycle, if any, share one)."""
    import networkx as nx

    g = nx.DiGraph()
    for s in infos:
        g.add_node(s.name, used=s.used)
    g.add_edges_from(edges(infos))
    dag = nx.condensation(g)  # a DAG of the strongly connected components: layering never fails
    for layer, members in enumerate(nx.topological_generations(dag)):
        for c in members:
            for name in dag.nodes[c]["members"]:
                g.nodes[name]["layer"] = layer
    return g


def _cell(values: tuple[str, ...] | None, unknown: str) -> str:
    return unknown if values is None else ", ".join(values) or "-"


def _inputs_cell(s: StageInfo) -> str:
    if not s.unresolved:
        return _cell(s.inputs, "(unknown: not asked for)")
    return ", ".join([*s.inputs, "(some not known yet: below)"])


def render_stages(infos: list[StageInfo], width: int = 60) -> str:
    """A table, one row per stage (long lists of reads wrapped at ``width``, of inputs at 40), then the inputs not
    resolved and the stages not used."""
    head = ("stage", "version", "module", "used", "inputs", "reads")
    rows = [(s.name, str(s.version), s.module, "yes" if s.used else "no",
             _inputs_cell(s),
             _cell(s.reads, "(depend on its parameters)")) for s in infos]
    widths_of = (None, None, None, None, 40, width)  # wrap the inputs and the reads
    wrapped = [[textwrap.wrap(c, w, break_on_hyphens=False) or [""] if w else [c] for c, w in zip(row, widths_of)]
               for row in [head, *rows]]
    widths = [max(len(line) for row in wrapped for line in row[i]) for i in range(len(head))]
    lines = []
    for row in wrapped:
        for k in range(max(len(c) for c in row)):
            parts = [(c[k] if k < len(c) else "").ljust(w) for c, w in zip(row, widths)]
            lines.append("  ".join(parts).rstrip())
    for s in infos:
        for why, n in s.unresolved:
            lines.append(f"{s.name}: the inputs of {n} artifact(s) are not known yet: {why}")
    renamed = [f"{s.name} (was {s.keyed_as})" for s in infos if s.keyed_as]
    if renamed:
        lines.append(f"renamed, keys unchanged: {', '.join(renamed)}; a store made before keeps its artifacts")
    unused = [s.name for s in infos if not s.used]
    if unused:
        lines.append(f"not used by this configuration ({len(unused)}): {', '.join(unused)}; their reads are the "
                     "declared ones ({param}: filled from an artifact's parameters)")
    return "\n".join(lines)


def draw(infos: list[StageInfo], path: Path) -> Path:
    """The stage graph as ``dvc dag`` draws it: layers top to bottom by topological generation, an arrow from each
    input to the stage that reads it, unused stages grey; PNG or SVG by ``path``'s suffix. In an SVG each arrow's
    id is ``edge:<input>:<stage>`` and each node's ``stage:<name>``."""
    import networkx as nx

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if path.suffix.lower() not in GRAPH_FORMATS:
        raise ValueError(f"{path}: a graph is written as {' or '.join(GRAPH_FORMATS)} (by the suffix)")
    g = stage_graph(infos)
    layers: dict[int, list[str]] = {}
    for name, data in g.nodes(data=True):
        layers.setdefault(data["layer"], []).append(name)
    widest = max(len(v) for v in layers.values())
    pos: dict[str, tuple[float, float]] = {}
    for layer in sorted(layers):  # each stage under the mean place of its inputs (fewer crossings), registry order else
        names = layers[layer]
        order = {n: k for k, n in enumerate(names)}
        placed = {n: [pos[u][0] for u in g.predecessors(n) if u in pos] for n in names}
        names.sort(key=lambda n: (sum(placed[n]) / len(placed[n]) if placed[n] else 0.0, order[n]))
        for k, name in enumerate(names):
            pos[name] = ((k - (len(names) - 1) / 2) * 2.2, -layer)
    fig, ax = plt.subplots(figsize=(max(6.0, 2.0 * widest), 1.0 + 0.9 * len(layers)))
    arrows = nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowstyle="-|>", arrowsize=10, edge_color="#555555",
                                    width=0.8, node_size=1200, min_source_margin=8, min_target_margin=10)
    for (u, v), arrow in zip(g.edges, arrows):
        arrow.set_gid(f"edge:{u}:{v}")
    for name, (x, y) in pos.items():
        used = g.nodes[name]["used"]
        text = ax.text(x, y, name, ha="center", va="center", fontsize=8, color="black" if used else "#777777",
                       bbox={"boxstyle": "round,pad=0.35", "facecolor": "#e8f0fb" if used else "#f2f2f2",
                             "edgecolor": "#3b6ea8" if used else "#aaaaaa", "linestyle": "-" if used else "--"})
        text.set_gid(f"stage:{name}")
    ax.set_axis_off()
    ax.margins(x=0.06, y=0.06)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fmt = path.suffix.lower()[1:]
        fig.savefig(tmp, format=fmt, dpi=120, metadata={"Date": None} if fmt == "svg" else {"Software": None})
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
