"""experiments/README.md's answer to "Which MFR did the paper compute?" is what experiments/mfr_check.py computes
from the paper's Tables 3-5 and the authors' BM25 runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def mfr_check():
    spec = importlib.util.spec_from_file_location("mfr_check", ROOT / "experiments" / "mfr_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_shows_the_scripts_tables(mfr_check):
    assert mfr_check.markdown() in (ROOT / "experiments" / "README.md").read_text(encoding="utf-8")


def test_only_the_reciprocal_of_the_mrr_fits_every_cell_and_predicts_the_papers_numbers(mfr_check):
    cells, summary = mfr_check.check()
    assert len(cells) == 45 and set(cells.corpus) == {"robust04", "core17", "core18"}
    s = summary.set_index("definition")
    assert s.loc["1/MRR, miss RR 0", "cells that fit one run"] == "45 of 45"
    assert s.loc["arithmetic, miss left out", "cells that fit one run"] == "41 of 45"
    assert s.loc["arithmetic, miss = 101", "Core cells that fit"] == "13 of 30"
    assert s.loc["1/MRR, miss RR 0", "mean |MFR - predicted|"] < 0.12 < 3.5 < s.loc["arithmetic, miss left out",
                                                                                     "mean |MFR - predicted|"]
    assert s.loc["1/MRR, miss RR 0", "BM25 Core 2017 / 2018"] == "1.425 / 1.432"
    assert s.loc["arithmetic, miss left out", "BM25 Core 2017 / 2018"] == "4.660 / 4.388"
    pacrr = cells.set_index(["corpus", "model", "leakage"]).loc[("core17", "pacrr", "none")]
    assert pacrr["arithmetic, miss left out: low"] == pytest.approx(2 - 0.54)  # 1.46 > the published 1.390
    assert not pacrr["arithmetic, miss left out: fits"] and pacrr["1/MRR, miss RR 0: fits"]


def test_one_runs_range_is_reached_by_runs_at_its_ends(mfr_check):
    """The range's ends are real runs: 27 of 50 topics at rank 1 and the other 23 at rank 2 (or 100)."""
    from leakexp.lib.measures import average

    import pandas as pd

    for definition, mfr in (("1/MRR, miss RR 0", "reciprocal_of_mrr"), ("arithmetic, miss left out", "arithmetic")):
        lo, hi = mfr_check.one_run_range(0.54, 50, 0, definition)
        assert lo == pytest.approx(average(pd.Series([1.0] * 27 + [2.0] * 23), "MFR", mfr))
        assert hi == pytest.approx(average(pd.Series([1.0] * 27 + [100.0] * 23), "MFR", mfr))
