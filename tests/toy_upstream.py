"""The toy world's data preparation at the tests' scale (``data.queries_per_source=600``), computed once per test
run and copied into the stores of the tests that run grids on it.

The artifacts a grid builds on before any training set (the toy world, SBERT embeddings, detection, verification,
BM25 indexes, negatives, first-stage runs) cost more than the small grids themselves, and most grid tests would
compute the same ones. The store finds an artifact by its key, the hash of everything it was made from, so a copied
artifact is used exactly where the test's own configuration would have computed the same one (and ignored where a
test changes a setting it reads). The copy is a plain copy, so a test that damages its store damages only its own;
``logs/computed.tsv`` is not copied, so what a test sees computed is its own work. Under pytest-xdist the workers
share one copy: the first to need it builds it under a file lock, the others wait.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

TOY_600 = "data.queries_per_source=600"
STAGES = ("toy", "embed", "detect", "verify", "corpus-stats", "index", "negatives", "firststage")


def build(store: Path) -> None:
    """Every artifact of ``STAGES`` the toy grid at 600 queries per source asks for (small sizes: one chunk of
    negatives), in ``store``."""
    from leakexp.runner.registry import compose
    from leakexp.stages.cell import grid_cells
    from leakexp.grid.work import grid_asks
    from leakexp.runner.registry import runner

    cfg = compose([f"store={store}", TOY_600, "grid.sizes=[64]", "grid.seeds=[1]", "grid.models=[knrm]"])
    r = runner(cfg)
    asks = [a for row in grid_asks(cfg, r, []).values() for a in row] + [c.ask("build") for c in grid_cells(cfg)]
    for ask in asks:
        for up in r.upstream(ask):
            if up.stage in STAGES and r.stage(up).stored:
                r.ensure(up)


def shared_root(tmp_path_factory) -> Path:
    """The folder this test run's workers share: the run's base folder (pytest-xdist gives each worker one below)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def prepared(tmp_path_factory) -> Path:
    """The store holding the prepared artifacts, built by the first worker that asks."""
    from filelock import FileLock

    root = shared_root(tmp_path_factory) / "toy-upstream-600"
    with FileLock(str(root) + ".lock"):
        if not (root / "READY").exists():
            shutil.rmtree(root, ignore_errors=True)
            build(root / "store")
            (root / "READY").write_text("")
    return root / "store"


def seed(store: Path, prepared_store: Path) -> Path:
    """Copy the prepared artifacts into ``store`` (created if needed); returns ``store``."""
    store.mkdir(parents=True, exist_ok=True)
    for stage in STAGES:
        if (prepared_store / stage).is_dir():
            shutil.copytree(prepared_store / stage, store / stage, dirs_exist_ok=True)
    return store
