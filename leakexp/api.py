"""leakexp from Python: a store opened under its configuration, its grid's cells with their state, a trained cell's
re-ranker as a PyTerrier transformer, and a cell's run and per-topic evaluation as DataFrames (docs/python.md).

Example::

    import pyterrier as pt
    from pyterrier.measures import RR, P, nDCG

    import leakexp

    store = leakexp.open_store("store", overrides=["experiment=demo"])
    cell = store.cell(corpus="toy_core17", leakage="test", size=384, model="knrm", seed=1)
    bm25 = store.first_stage(cell.corpus)
    pt.Experiment([bm25, bm25 >> store.reranker(cell)], store.topics(cell.corpus), store.qrels(cell.corpus),
                  [nDCG @ 10, P @ 1, RR])

The store is read, never written: what it lacks is a ``LookupError`` naming the cell and the command that computes it.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from typing import TYPE_CHECKING

from leakexp.runner.registry import compose, runner as make_runner
from leakexp.grid.work import counted
from leakexp.runner.pipeline import Runner
from leakexp.runner.schema import Settings
from leakexp.runner.stage import Ask, stages
from leakexp.stages.cell import Cell, grid_cells

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


CELL_FIELDS = ("corpus", "leakage", "size", "model", "seed")


def open_store(path: str | Path | None = None, overrides: Sequence[str] = ()) -> "GridStore":
    """The store at ``path`` (default: the configuration's, ``LEAKEXP_STORE`` or ``./store``) read under the
    configuration ``overrides`` compose, the same overrides the store was computed with (``experiment=paper``,
    ``grid.seeds=[1,2]``): an artifact is found by the key its configuration gives it.

    Example::

        store = leakexp.open_store("store", overrides=["experiment=demo"])
    """
    given = [f"store={Path(path).expanduser().resolve()}"] if path is not None else []
    r = make_runner(compose([*overrides, *given]), readonly=True)
    if not r.store.root.is_dir():
        raise FileNotFoundError(f"no store at {r.store.root}; give the folder a run wrote (store= or LEAKEXP_STORE)")
    return GridStore(r, [*overrides])


class GridStore:
    """A store read under one configuration: its cells, their artifacts and the data they were computed on."""

    def __init__(self, runner: Runner, overrides: list[str]):
        self.runner, self.overrides = runner, overrides

    @property
    def root(self) -> Path:
        return self.runner.store.root

    @property
    def settings(self) -> Settings:
        """The configuration's typed settings (``store.settings.evaluate.mfr``)."""
        return self.runner.settings

    def __repr__(self) -> str:
        return f"GridStore({str(self.root)!r}, overrides={self.overrides!r})"

    # -- cells -------------------------------------------------------------------------------------------------
    def cells(self) -> pd.DataFrame:
        """The configured grid's cells, one row each (corpus, leakage, size, model, seed) with the state of its
        train, rerank and evaluate artifacts: done, missing, running, failed, damaged, stale or data missing."""
        import pandas as pd

        per_cell = [st.name for st in stages() if st.per_cell]  # a cell's own stages: train, rerank, evaluate
        rows = [[*(getattr(c, f) for f in CELL_FIELDS), *(self.runner.state(c.ask(s))[0] for s in per_cell)]
                for c in grid_cells(self.settings)]
        return pd.DataFrame(rows, columns=[*CELL_FIELDS, *per_cell])

    def cell(self, cell: Cell | str | Mapping | object | None = None, **fields) -> Cell:
        """A cell from keywords (``corpus=…, leakage=…, size=…, model=…, seed=…``), a row of :meth:`cells`, a
        :class:`~leakexp.stages.cell.Cell` or its path ``corpus/leakage/size/model/seed-N``; any cell, in the grid or
        not."""
        import pandas as pd

        if isinstance(cell, Cell):
            return cell
        if isinstance(cell, str):
            parts = cell.strip("/").split("/")
            if len(parts) != 5 or not parts[4].startswith("seed-"):
                raise ValueError(f"cell {cell!r}: give corpus/leakage/size/model/seed-N, e.g. toy_core17/test/384/knrm/seed-1")
            fields = dict(zip(CELL_FIELDS, [*parts[:4], parts[4].removeprefix("seed-")]))
        elif cell is not None:  # a row of cells() (its "size" is a column, not the Series' size), a dict, a record
            fields = {f: cell[f] if isinstance(cell, (Mapping, pd.Series)) else getattr(cell, f) for f in CELL_FIELDS}
        missing = [f for f in CELL_FIELDS if f not in fields]
        if missing:
            raise ValueError(f"a cell needs {', '.join(CELL_FIELDS)}; {', '.join(missing)} not given")
        return Cell(str(fields["corpus"]), str(fields["leakage"]), int(fields["size"]), str(fields["model"]),
                    int(fields["seed"]))

    def _done(self, cell: Cell, stage: str) -> Path:
        """The folder of ``cell``'s finished artifact of ``stage``, or a LookupError saying how to compute it."""
        state, path, _ = self.runner.state(cell.ask(stage))
        if state != "done":
            command = shlex.join(["leakexp", "cell", *self.overrides, f"store={self.root}",
                                  *(f"{f}={getattr(cell, f)}" for f in CELL_FIELDS)])
            raise LookupError(f"the {stage} artifact of {cell} is {state} in the store {self.root}; compute it with "
                              f"`{command}`")
        return path

    # -- what a cell's re-ranking read ------------------------------------------------------------------------
    def _collection(self, corpus: str):
        return self.runner.get(Ask.of("collection", corpus=corpus))

    def topics(self, corpus: str) -> pd.DataFrame:
        """The corpus's topics as PyTerrier topics (qid, query), the query in the field the models re-rank
        (``rerank.query_field``)."""
        return self._collection(corpus).topics_frame(self.settings.rerank.query_field)

    def qrels(self, corpus: str) -> pd.DataFrame:
        """The corpus's relevance judgments (qid, docno, label)."""
        return self._collection(corpus).qrels.copy()

    def first_stage(self, corpus: str):
        """The stored first-stage top-k of the corpus's topics (the run its cells re-rank) as a PyTerrier transformer:
        given topics, their rows (qid, query, docno, score, rank)."""
        import pandas as pd

        import pyterrier as pt

        ask = Ask.of("firststage", corpus=corpus)
        state, path, _ = self.runner.state(ask)
        if state != "done":
            raise LookupError(f"the first stage of {corpus} is {state} in the store {self.root}; compute it with "
                              f"`{shlex.join(['leakexp', 'rerank', *self.overrides, f'store={self.root}', f'corpus={corpus}'])}`")
        return pt.Transformer.from_df(pd.read_parquet(path / "run.parquet"))

    # -- a trained cell --------------------------------------------------------------------------------------
    def checkpoint(self, cell=None, **fields) -> Path:
        """The folder of the cell's trained model: what docs/models.md says each model's checkpoint holds."""
        return self._done(self.cell(cell, **fields), "train")

    def model(self, cell=None, **fields):
        """The cell's trained re-ranker (a torch module, :class:`~leakexp.models.base.Reranker`) on the CPU, with
        the idf of the corpus it re-ranks where it reads idf."""
        from leakexp.models import load_checkpoint

        c = self.cell(cell, **fields)
        model = load_checkpoint(self.checkpoint(c))
        if model.needs_idf:
            model.use_idf(self.runner.get(Ask.of("df", name=c.corpus)))
        return model

    def reranker(self, cell=None, *, batch_size: int | None = None, device: str | None = None, **fields):
        """The cell's trained model as a PyTerrier re-ranker: it scores (qid, query, docno) rows, adding each
        document's text from the cell's corpus where the input has no ``text`` column, and ranks by score with ties
        broken by ascending docno, as the re-ranking stage does (same batch size, score precision and, on CUDA,
        bf16 setting). ``device``: the configuration's (``device=auto``: CUDA where there is one) unless given."""
        import pyterrier as pt

        from leakexp.runner.jobs import resolve_device

        c = self.cell(cell, **fields)
        model = self.model(c)
        device = device or resolve_device(str(self.settings.run.device))
        model.to(device)
        docs = self._collection(c.corpus).docs
        texts = pt.apply.generic(lambda df: df if "text" in df.columns else df.assign(text=[docs[d] for d in df.docno]))
        scorer = model.transformer(batch_size=batch_size or self.runner.runtime.score_batch(c.model), device=device,
                                   bf16=device.startswith("cuda") and self.settings.precision.rerank_bf16,
                                   score_dtype=self.settings.model_of(c.model).score_dtype)
        return texts >> scorer

    def run(self, cell=None, **fields) -> pd.DataFrame:
        """The cell's stored re-ranking (qid, query, docno, score, rank), as the evaluation read it."""
        import pandas as pd

        return pd.read_parquet(self._done(self.cell(cell, **fields), "rerank") / "run.parquet")

    def evaluation(self, cell=None, **fields) -> pd.DataFrame:
        """The cell's per-topic values (qid, measure, value) as the tables average them: MFR's misses counted as
        ``evaluate.mfr_missing`` says (``leakexp.lib.measures.average`` gives a measure's reported mean)."""
        import pandas as pd

        path = self._done(self.cell(cell, **fields), "evaluate")
        return counted(self.settings, pd.read_parquet(path / "perquery.parquet"))
