"""The options that change only the tables (experiments/README.md) change only the tables: they re-key no artifact,
so ``leakexp tables`` with any of them reads the stored evaluations (MFR's definition and its misses are applied to
the stored first ranks at table time); a variant's tables go to a folder named by it (or ``--out``) and never
overwrite another's; a failed ``tables`` run deletes and changes nothing."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from conftest import SMALL
from key_records import demo_asks, demo_runner

from leakexp.cli.main import main
from leakexp.runner.registry import compose
from leakexp.runner.stage import Ask

# every option experiments/README.md lists as changing the tables alone, with another value
VARIANTS = [
    ["evaluate.mfr=arithmetic", "evaluate.mfr_missing=skip"], ["evaluate.mfr=arithmetic", "evaluate.mfr_missing=depth"],
    ["evaluate.mfr_missing=skip"], ["evaluate.cv_selection=max_effect"], ["evaluate.folds=3"],
    ["evaluate.fold_seed=1"], ["evaluate.alpha=0.01"], ["report.figure_model=knrm"], ["memorization.sizes=[cv]"],
    ["memorization.cv_measure=P@1"], ["memorization.enabled=false"],
]


def test_the_table_only_settings_are_the_documented_ones():
    from leakexp.tables.paper import TABLE_SETTINGS

    assert sorted(TABLE_SETTINGS) == sorted({o.split("=")[0] for v in VARIANTS for o in v})


def test_an_option_that_changes_only_the_tables_rekeys_no_artifact(tmp_path):
    from leakexp.runner.registry import runner

    cfg, base = demo_runner(tmp_path / "store")
    asks = demo_asks(cfg, base)
    keys = {a: base.key(a) for a in asks}
    for overrides in VARIANTS:
        r = runner(compose(["experiment=demo", "device=cpu", f"store={tmp_path / 'store'}", *overrides]),
                   readonly=True)
        changed = sorted({a.stage for a in asks if r.key(a) != keys[a]})
        assert changed == [], f"{' '.join(overrides)} re-keys {changed}"


def _files(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _detail(folder, cell, measure: str) -> float:
    d = pd.read_csv(folder / "detail.csv")
    row = d[(d.corpus == cell.corpus) & (d.leakage == cell.leakage) & (d["size"] == cell.size) & (d.model == cell.model)
            & (d.measure == measure)]
    return float(row["mean"].iloc[0])


def test_mfr_variants_are_computed_from_the_stored_evaluations(small_run, small_cfg, tmp_path, capsys):
    """Re-ranking the top-2 only, most topics have no relevant document within the depth: 1/MRR with misses at
    reciprocal rank 0, the arithmetic mean without them and with them at rank 3 all come from one stored evaluation
    per cell, and equal what the re-ranked runs give."""
    from leakexp.runner.registry import runner
    from leakexp.grid.work import run_cell
    from leakexp.lib.measures import per_query
    from leakexp.runner.store import DONE
    from leakexp.stages.cell import grid_cells

    r, _, _, out = small_run
    default = _files(out)
    overrides = [f"store={small_cfg.run.store}", *SMALL, "rerank.depth=2", "grid.corpora=[toy_robust]",
                 "grid.leakages=[none,msm]", "grid.sizes=[128]"]
    shallow = runner(compose(overrides))
    cells = grid_cells(shallow.settings)
    for cell in cells:
        run_cell(shallow, cell)
    evaluations = sorted(p.parent for p in (r.store.root / "evaluate").rglob(DONE))
    arithmetic = ["evaluate.mfr=arithmetic", "evaluate.mfr_missing=skip"]
    assert main(["tables", *overrides, *arithmetic]) == 0
    variant = out / "evaluate.mfr=arithmetic,evaluate.mfr_missing=skip"
    assert capsys.readouterr().out.strip() == f"tables: {variant}"
    assert "arithmetic mean rank" in (variant / "table3.md").read_text()
    assert main(["tables", *overrides, "evaluate.mfr=arithmetic", "evaluate.mfr_missing=depth", "--out",
                 str(tmp_path / "depth")]) == 0
    assert main(["tables", *overrides, "--out", str(tmp_path / "paper")]) == 0
    assert sorted(p.parent for p in (r.store.root / "evaluate").rglob(DONE)) == evaluations  # nothing evaluated
    assert _files(out) == default  # the default configuration's tables are untouched
    misses = 0
    for cell in cells:
        # the first relevant ranks, from the re-ranked run itself
        coll = r.get(Ask.of("collection", corpus=cell.corpus))
        run = pd.read_parquet(shallow.path(cell.ask("rerank")) / "run.parquet")
        ranks = per_query(run, coll.qrels, ["MFR"], mfr_missing="infinite", topics=list(coll.topics)).value
        misses += int((ranks == math.inf).sum())
        assert _detail(variant, cell, "MFR") == pytest.approx(ranks[ranks < math.inf].mean())
        assert _detail(tmp_path / "depth", cell, "MFR") == pytest.approx(ranks.clip(upper=3).mean())
        assert _detail(tmp_path / "paper", cell, "MFR") == pytest.approx(1 / (1 / ranks).mean())  # misses at RR 0
    assert misses > 0  # the definitions differ on these cells


def test_a_variants_tables_go_to_its_own_folder_or_to_out(small_run, small_cfg, tmp_path, capsys):
    _, _, _, out = small_run
    default = _files(out)
    overrides = [f"store={small_cfg.run.store}", *SMALL]
    assert main(["tables", *overrides, "evaluate.cv_selection=max_effect"]) == 0
    variant = out / "evaluate.cv_selection=max_effect"
    assert capsys.readouterr().out.strip() == f"tables: {variant}"
    assert "the largest leakage effect" in (variant / "table3.md").read_text()
    assert _files(out) == default
    assert main(["tables", *overrides, "evaluate.cv_selection=max_effect", "--out", str(tmp_path / "mine")]) == 0
    assert capsys.readouterr().out.strip() == f"tables: {tmp_path / 'mine'}"
    assert (tmp_path / "mine" / "table3.md").read_bytes() == (variant / "table3.md").read_bytes()
    # a value equal to the configuration's own is no variant
    assert main(["tables", *overrides, "evaluate.cv_selection=best"]) == 0
    assert capsys.readouterr().out.strip() == f"tables: {out}" and _files(out) == default


def test_a_failed_tables_run_deletes_and_changes_nothing(small_run, small_cfg, monkeypatch, capsys):
    from leakexp.tables import paper

    _, _, _, out = small_run
    default = _files(out)
    assert paper.TABLES_KEY in default
    # nothing of this grid is finished: refused, and the tables of the finished grid stay as they are
    assert main(["tables", f"store={small_cfg.run.store}", *SMALL, "grid.seeds=[7]"]) == 1
    assert "holds no finished cell" in capsys.readouterr().err
    assert _files(out) == default
    # a writer failing half-way: nothing of the folder changes, and no temporary folder is left beside it

    def broken(*args, **kwargs):
        raise RuntimeError("figure 2 could not be drawn")

    monkeypatch.setattr(paper, "figure2", broken)
    with pytest.raises(RuntimeError, match="figure 2"):
        paper.write_tables(compose([f"store={small_cfg.run.store}", *SMALL, "evaluate.alpha=0.01"]), out=out)
    assert _files(out) == default
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []
