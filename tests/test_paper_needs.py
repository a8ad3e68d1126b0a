"""experiment=paper asks only for what its grid reads, and refuses before any work what it cannot have.

Core 2017 / 2018 re-rank the authors' bundled runs (``rerank.first_stage``): they need no index, so a finished
grid's status is complete without one and ``leakexp index`` builds none.
"""

from __future__ import annotations

import pytest
from conftest import paper_env

from leakexp.cell import grid_cells
from leakexp.cli import main
from leakexp.config import compose
from leakexp.grid import cell_asks, complete, grid_status, needed_indexes, shared_asks
from leakexp.stages import runner
from leakexp.store import Store

PAPER_TINY = ["grid.sizes=[1000]", "grid.seeds=[1]", "grid.models=[knrm]"]


@pytest.fixture
def paper(tmp_path, monkeypatch):
    return [*paper_env(tmp_path, monkeypatch), f"store={tmp_path / 'store'}", *PAPER_TINY]


def _finish(cfg, asks) -> None:
    """Mark every artifact of ``asks`` done (an empty artifact with this configuration's key): a finished grid."""
    r, store = runner(cfg, readonly=True), Store(cfg.store)
    for ask in asks:
        store.ensure(r.path(ask), r.record(ask), compute=lambda tmp: {"documents": 7})


def test_status_of_a_finished_paper_grid_is_complete_without_indexes_of_the_bundled_runs_corpora(paper, capsys):
    cfg = compose(paper)
    r = runner(cfg, readonly=True)
    assert [a.params["name"] for a in needed_indexes(cfg, r)] == ["train", "robust04"]
    rows = {**shared_asks(cfg, r), **cell_asks(cfg, grid_cells(cfg))}
    assert [a.params["name"] for a in rows["index"]] == ["train", "robust04"]
    assert [a.params["corpus"] for a in rows["firststage"]] == ["robust04", "core17", "core18"]
    _finish(cfg, [a for asks in rows.values() for a in asks])
    status = grid_status(cfg)
    assert complete(status) and status["index"].total == status["index"].done == 2
    assert main(["status", *paper]) == 0
    assert "missing" not in capsys.readouterr().out.split("\n", 1)[1].lower()
    # with leakexp's own BM25 for every corpus, each corpus needs its index
    own = compose([*paper, "rerank.first_stage=null"])
    assert [a.params["name"] for a in needed_indexes(own)] == ["train", "robust04", "core17", "core18"]


def test_index_builds_only_the_indexes_the_grid_reads(paper, capsys):
    cfg = compose(paper)
    _finish(cfg, needed_indexes(cfg))  # the two it needs are there; core17 / core18 would need their data
    assert main(["index", *paper]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["train", "robust04", "core17", "core18"]
    assert out[2] == "core17: no index needed (its first stage is the run core17.bm25-anserini.top100.run.gz)"
    assert not Store(cfg.store).path("index", "core17").exists()
