"""The configured grid: its cells, the artifacts each needs, and their state in the store.

A cell is (corpus, leakage, size, model, seed). Status asks the runner for the key of each artifact of *this*
configuration, computing and writing nothing, so it also works on a read-only store and never mistakes
another configuration's result for this one's. Artifacts that several cells share (the No-Leakage sets and
models, the first-stage runs, the indexes) are counted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from leakexp.cell import Cell, cell_from_config, grid_cells
from leakexp.pipeline import Runner
from leakexp.stage import Ask


STATES = ("done", "running", "failed", "damaged", "stale", "missing")


@dataclass
class StageStatus:
    done: int = 0
    running: int = 0
    failed: int = 0
    damaged: int = 0
    stale: int = 0
    missing: int = 0
    notes: list[tuple[str, str, str]] = field(default_factory=list)  # (state, artifact, detail)

    @property
    def total(self) -> int:
        return sum(getattr(self, s) for s in STATES)

    @property
    def failures(self) -> list[tuple[str, str]]:
        return [(a, d) for s, a, d in self.notes if s == "failed"]

    def add(self, state: str, artifact: str, detail: str = "") -> None:
        setattr(self, state, getattr(self, state) + 1)
        if state in ("failed", "damaged", "running") or (state == "missing" and detail and artifact):
            self.notes.append((state, artifact, detail))


def _upstream_paths(p: Pipeline) -> dict[str, list[tuple[str, Path | None, str]]]:
    """(label, path or None, why-None) of the shared upstream artifacts: toy world, detection, verification."""
    from leakexp.data.sources import toy_world_path

    rows: dict[str, list] = {}
    if p.cfg.data.kind == "toy":
        rows["data"] = [(f"data/toy/seed-{p.cfg.data.seed}", toy_world_path(p.store, p.cfg.data), "")]
    # the training pool's index (negatives) and those of the corpora the grid re-ranks
    rows["index"] = [(f"index/{name}", p.index_path(name), "") for name in ["train", *dict.fromkeys(p.cfg.grid.corpora)]]
    rows["embed"] = [(f"embed/{p.cfg.data.name}", path, "") for path in p.embed_paths()]
    rows["detect"] = [(f"detect/{p.cfg.data.name}", p.detect_path(), "")]
    try:
        rows["verify"] = [(f"verify/{p.cfg.data.name}", p.verify_path(), "")]
    except Exception as exc:  # e.g. verify.annotations not given yet
        rows["verify"] = [(f"verify/{p.cfg.data.name}", None, str(exc).splitlines()[0])]
    return rows


def grid_status(cfg: DictConfig, *, verify: bool = False) -> dict[str, StageStatus]:
    """Per stage, how many artifacts of the configured grid are in each state (``verify``: re-read every
    finished artifact's files against their checksums)."""
    p = Pipeline(cfg, readonly=True)
    store = p.store
    out: dict[str, StageStatus] = {}

    def record(st: StageStatus, label: str, path: Path | None, why: str = "") -> None:
        state, path, detail = artifact_state(store, path)
        if state == "done" and verify:
            problems = store.verify(path)
            if problems:
                state, detail = "damaged", ", ".join(problems)
        shown = str(path.relative_to(store.root)) if path is not None else label
        st.add(state, shown, detail or why)

    for stage, rows in _upstream_paths(p).items():
        st = out.setdefault(stage, StageStatus())
        for label, path, why in rows:
            record(st, label, path, why)
    cells = grid_cells(cfg)
    st = out.setdefault("sets", StageStatus())
    for key in dict.fromkeys(c.set_key for c in cells):
        try:
            path, why = p.set_path(*key), ""
        except Exception as exc:
            path, why = None, str(exc).splitlines()[0]
        record(st, "sets/" + "/".join(map(str, key)), path, why)
    for stage in ("train", "rerank", "eval"):
        st = out.setdefault(stage, StageStatus())
        for cell in cells:
            try:
                path = p.cell_path(stage, cell)
            except Exception:
                path = None
            record(st, f"{stage}/{cell}", path)
    from leakexp import memorization

    st = out.setdefault("memorize", StageStatus())
    for cell in cells:
        if memorization.wanted(cfg, cell):
            try:
                path = memorization.memorization_path(p, cell)
            except Exception:
                path = None
            record(st, f"memorization/{cell}", path)
    if not st.total:
        del out["memorize"]
    from leakexp import robustness

    st = out.setdefault("robust", StageStatus())
    for cell in (robustness.robustness_cells(cfg) if cfg.robustness.get("enabled", False) else []):
        try:
            paths = robustness.robustness_paths(p, cell)
        except Exception:
            paths = {"all": None}
        for name, path in paths.items():
            record(st, f"robustness/{cell}/{name}", path)
    if not st.total:
        del out["robust"]
    return out


def render_status(status: dict[str, StageStatus]) -> str:
    lines = [f"{'stage':<8}" + "".join(f"{s:>9}" for s in STATES) + f"{'total':>8}"]
    for stage, st in status.items():
        lines.append(f"{stage:<8}" + "".join(f"{getattr(st, s):>9}" for s in STATES) + f"{st.total:>8}")
    for stage, st in status.items():
        for state, path, detail in st.notes:
            lines.append(f"{state.upper()} {path}: {detail}" if detail else f"{state.upper()} {path}")
    stale = sum(st.stale for st in status.values())
    if stale:
        lines.append(f"{stale} artifact(s) exist only for other configurations (stale for this one): they are "
                     "kept, and neither status nor tables use them")
    return "\n".join(lines)


def complete(status: dict[str, StageStatus]) -> bool:
    return all(st.done == st.total for st in status.values())
