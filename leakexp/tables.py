"""Regenerate the result tables of a configured grid from the store alone."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from leakexp.evaluate import mfr_caption
from leakexp.pipeline import grid_cells, stored_results
from leakexp.report import summary, write_table
from leakexp.store import Store


def tables_dir(cfg: DictConfig) -> Path:
    return Store(cfg.store).path("tables", cfg.data.name)


def write_tables(cfg: DictConfig) -> Path:
    """Write every table the stored results support and return the folder."""
    store = Store(cfg.store)
    cells = grid_cells(cfg)
    results = stored_results(store, cells)
    out = tables_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    if len(results) == 0:
        return out
    seeds = sorted(results.seed.unique())
    caption = (
        f"Mean effectiveness per corpus, model and training-set size (data={cfg.data.name}); columns are measure x "
        f"leakage type (none, msm, test), averaged over topics and over {len(seeds)} seed(s). "
        f"{mfr_caption(cfg.evaluate.mfr_missing, int(cfg.rerank.depth))}; lower MFR is better."
    )
    write_table(summary(results), out, "summary", caption)
    results.to_csv(out / "perquery.csv", index=False)
    return out
