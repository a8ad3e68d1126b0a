"""The state of a configured grid in the store: what is done, running, failed or missing, per stage."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from leakexp.pipeline import Cell, grid_cells
from leakexp.store import Store

STAGES = ("sets", "train", "rerank", "eval")


@dataclass
class StageStatus:
    done: int = 0
    running: int = 0
    failed: int = 0
    missing: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (artifact, last error line)

    @property
    def total(self) -> int:
        return self.done + self.running + self.failed + self.missing


def artifact_state(store: Store, path: Path) -> tuple[str, str]:
    """(state, error): done (marker), running (lock held), failed (error recorded, no marker), or missing."""
    if store.marker(path) is not None:
        return "done", ""
    if store.is_locked(path):
        return "running", ""
    failure = store.failure_path(path)
    if failure.exists():
        try:
            return "failed", json.loads(failure.read_text()).get("error", "")
        except ValueError:
            return "failed", "(unreadable failure record)"
    return "missing", ""


def grid_paths(store: Store, cells: list[Cell]) -> dict[str, list[Path]]:
    sets = list(dict.fromkeys(c.set_key for c in cells))
    return {
        "sets": [store.path("sets", *k) for k in sets],
        **{stage: [store.path(stage, *c.parts()) for c in cells] for stage in ("train", "rerank", "eval")},
    }


def grid_status(cfg: DictConfig) -> dict[str, StageStatus]:
    store = Store(cfg.store)
    out = {}
    for stage, paths in grid_paths(store, grid_cells(cfg)).items():
        st = StageStatus()
        for path in paths:
            state, error = artifact_state(store, path)
            setattr(st, state, getattr(st, state) + 1)
            if state == "failed":
                st.failures.append((str(path.relative_to(store.root)), error))
        out[stage] = st
    return out


def render_status(status: dict[str, StageStatus]) -> str:
    lines = [f"{'stage':<8}{'done':>8}{'running':>9}{'failed':>8}{'missing':>9}{'total':>8}"]
    for stage, st in status.items():
        lines.append(f"{stage:<8}{st.done:>8}{st.running:>9}{st.failed:>8}{st.missing:>9}{st.total:>8}")
    for stage, st in status.items():
        for path, error in st.failures:
            lines.append(f"FAILED {path}: {error}")
    return "\n".join(lines)


def complete(status: dict[str, StageStatus]) -> bool:
    return all(st.done == st.total for st in status.values())
