"""leakexp from Python (``leakexp.open_store``): a finished store's cells, a trained cell's re-ranker as a PyTerrier
transformer that scores as the re-ranking stage did, its run and per-topic evaluation as the tables read them, and
docs/python.md's example run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SMALL

ROOT = Path(__file__).resolve().parents[1]
CELL = dict(corpus="toy_core17", leakage="test", size=256, model="knrm", seed=1)


@pytest.fixture(scope="module")
def store(small_run, small_store):
    import leakexp

    return leakexp.open_store(small_store, overrides=SMALL)


def test_import_leakexp_stays_light_and_names_the_api_lazily():
    code = ("import sys, leakexp\nlight = 'torch' not in sys.modules and 'leakexp.api' not in sys.modules\n"
            "print(light, callable(leakexp.open_store), 'leakexp.api' in sys.modules)\n"
            "try:\n    leakexp.nothing\nexcept AttributeError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == ["True True True", "module 'leakexp' has no attribute 'nothing'"], proc.stderr


def test_cells_lists_the_grid_with_each_stages_state(small_run, small_store):
    import leakexp

    _, cells, _, _ = small_run
    store = leakexp.open_store(small_store, overrides=[*SMALL, "grid.seeds=[1,2]"])
    table = store.cells()
    assert list(table.columns) == ["corpus", "leakage", "size", "model", "seed", "train", "rerank", "evaluate"]
    assert len(table) == 2 * len(cells)
    done, missing = table[table.seed == 1], table[table.seed == 2]
    assert set(map(tuple, done[["corpus", "leakage", "size", "model"]].values)) == \
        {(c.corpus, c.leakage, c.size, c.model) for c in cells}
    assert (done[["train", "rerank", "evaluate"]] == "done").all().all()
    assert (missing[["train", "rerank", "evaluate"]] == "missing").all().all()


def test_the_reranker_scores_the_first_stage_as_the_stored_run(store):
    """``first_stage >> reranker`` on the corpus's topics gives the re-ranking stage's scores and ranks."""
    bm25, reranker = store.first_stage(CELL["corpus"]), store.reranker(**CELL)
    ours = (bm25 >> reranker)(store.topics(CELL["corpus"]))
    stored = store.run(**CELL)
    assert {"qid", "query", "docno", "score", "rank"} <= set(stored.columns) and len(ours) == len(stored) > 0
    both = stored.merge(ours, on=["qid", "docno"], suffixes=("", "_api"))
    assert len(both) == len(stored)
    assert (both.score - both.score_api).abs().max() < 1e-6
    assert (both["rank"] == both["rank_api"]).all()


def test_pt_experiment_with_the_reranker_gives_the_stores_evaluation(store):
    """pt.Experiment over the corpus's topics and qrels: its per-topic nDCG@10 and P@1 are the evaluate stage's
    wherever the re-ranked top 10 has no tied scores (pytrec_eval orders ties by descending docno, the store by
    ascending docno)."""
    import pyterrier as pt
    from pyterrier.measures import P, nDCG

    corpus = CELL["corpus"]
    bm25, reranker = store.first_stage(corpus), store.reranker(**CELL)
    per = pt.Experiment([bm25, bm25 >> reranker], store.topics(corpus), store.qrels(corpus), [nDCG @ 10, P @ 1],
                        names=["BM25", "KNRM"], perquery=True)
    ours = per[per.name == "KNRM"].set_index(["qid", "measure"]).value
    evaluation = store.evaluation(**CELL).set_index(["qid", "measure"]).value
    run = store.run(**CELL)
    top = run[run["rank"] < 10]
    untied = set(top.qid) - set(top[top.duplicated(["qid", "score"], keep=False)].qid)
    checked = [(q, m) for (q, m) in evaluation.index if q in untied and m in ("nDCG@10", "P@1")]
    assert len(checked) >= 20
    for key in checked:
        assert ours[key] == pytest.approx(evaluation[key], abs=1e-9), key


def test_evaluation_is_what_the_tables_average(small_run, store):
    from leakexp.lib.measures import average
    from leakexp.stages.cell import Cell

    _, _, means, _ = small_run
    per = store.evaluation(**CELL)
    assert set(per.columns) == {"qid", "measure", "value"}
    mfr = store.settings.evaluate.mfr
    for m, values in per.groupby("measure").value:
        assert average(values, m, mfr) == pytest.approx(means[Cell(**CELL)][m], abs=1e-12), m


def test_a_cell_is_named_by_keywords_a_row_a_cell_or_its_path(store):
    from leakexp.stages.cell import Cell

    row = store.cells().query("corpus == 'toy_core17' and leakage == 'test' and size == 256").iloc[0]
    expected = Cell(**CELL)
    assert store.cell(**CELL) == store.cell(row) == store.cell(expected) == store.cell(str(expected)) == expected
    with pytest.raises(ValueError, match="corpus/leakage/size/model/seed-N"):
        store.cell("toy_core17/test/256")


def test_what_the_store_lacks_is_one_error_naming_the_cell_and_the_command(small_run, small_store):
    import leakexp

    store = leakexp.open_store(small_store, overrides=[*SMALL, "grid.seeds=[1,2]"])
    cell = dict(CELL, seed=2)
    for get in (store.reranker, store.run, store.evaluation, store.checkpoint):
        with pytest.raises(LookupError) as info:
            get(**cell)
        message = str(info.value)
        assert len(message.splitlines()) == 1 and "toy_core17/test/256/knrm/seed-2" in message
        assert "is missing" in message and "`leakexp cell " in message, message
        assert "corpus=toy_core17 leakage=test size=256 model=knrm seed=2`" in message, message
    with pytest.raises(FileNotFoundError, match="no store at"):
        leakexp.open_store(small_store / "nothing-here", overrides=SMALL)


def test_the_checkpoint_is_the_trained_cells_folder(store):
    from leakexp.models import load_checkpoint

    path = store.checkpoint(**CELL)
    assert (path / "model.json").is_file() and (path / "DONE.json").is_file()
    assert type(load_checkpoint(path)).__name__ == type(store.model(**CELL)).__name__


def python_blocks(text: str) -> list[str]:
    """The ```python code blocks of a Markdown text."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_docs_python_example_runs_on_a_finished_store(small_run, small_store, monkeypatch):
    """docs/python.md's example, as written, on the small finished grid: its store and overrides replaced by the
    small store's, every other line run as is."""
    text = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    blocks = python_blocks(text)
    assert len(blocks) >= 1
    code = "\n".join(blocks)
    opened = 'leakexp.open_store("store", overrides=["experiment=demo"])'
    assert opened in code
    code = code.replace(opened, f"leakexp.open_store({str(small_store)!r}, overrides={SMALL!r})")
    monkeypatch.chdir(small_store.parent)
    namespace: dict = {}
    exec(compile(code, "docs/python.md", "exec"), namespace)
    results = namespace["results"]
    assert list(results.name) == ["BM25", "BM25 >> KNRM"]
    assert {"nDCG@10", "P@1", "RR"} <= set(results.columns)
    cell = namespace["cell"]
    evaluation = namespace["store"].evaluation(cell)
    assert results.set_index("name").loc["BM25 >> KNRM", "P@1"] == pytest.approx(
        evaluation[evaluation.measure == "P@1"].value.mean(), abs=0.05)  # pytrec_eval's tie order aside


def test_a_model_that_reads_idf_scores_as_the_stored_run(seeded_store, tmp_path):
    """Duet reads the idf of the collection it ranks: the API gives it the corpus's df table, as the stage does."""
    import leakexp
    from leakexp.runner.registry import runner
    from leakexp.grid.work import run_cell
    from leakexp.runner.registry import compose

    store_dir = seeded_store(tmp_path / "store")
    overrides = [*SMALL, "grid.models=[duet]", "grid.corpora=[toy_core17]", "grid.leakages=[test]", "grid.sizes=[128]"]
    from leakexp.stages.cell import Cell

    cell = Cell("toy_core17", "test", 128, "duet", 1)
    run_cell(runner(compose([f"store={store_dir}", *overrides])), cell)
    store = leakexp.open_store(store_dir, overrides=overrides)
    assert store.model(cell).needs_idf
    ours = (store.first_stage(cell.corpus) >> store.reranker(cell))(store.topics(cell.corpus))
    both = store.run(cell).merge(ours, on=["qid", "docno"], suffixes=("", "_api"))
    assert len(both) == len(ours) > 0 and (both.score - both.score_api).abs().max() < 1e-6
