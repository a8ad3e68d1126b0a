"""Which MFR did the paper compute? Every MFR cell of Tables 3-5 checked against its P@1 and the BM25 runs.

Fröbe et al. (SPIRE 2022) report "MFR" (citing Fuhr, SIGIR Forum 2017) but not how it was averaged. Two checks per
cell (``paper_tables.csv``: the published Tables 3-5), for each candidate definition:

1. **Range of one run.** With n topics, m of them without a relevant document in the re-ranked top-100 and k =
   P@1 * n at rank 1, the other h - k topics (h = n - m) have a first relevant rank between 2 and 100, so each
   definition allows an interval of MFRs. (The cross-validation picks a size per measure, so a cell's MFR and P@1
   may come from different runs: a miss here is evidence, not proof.)
2. **Prediction from the BM25 runs.** Every model re-ranks the authors' BM25 top-100 (bundled for Core 2017 and
   2018). If a model's topics that are not at rank 1 had BM25's distribution of first ranks beyond rank 1, its
   MFR would be ``P@1 + (1 - P@1) * E[r | r > 1]`` (arithmetic) or ``1 / (P@1 + (1 - P@1) * E[1/r | r > 1])``
   (1/MRR); Robust04's run was not published, so its cells use both Core runs pooled.

``python experiments/mfr_check.py`` prints the tables that experiments/README.md shows (a test keeps them equal).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from leakexp.data.files import read_qrels
from leakexp.lib.measures import per_query
from leakexp.lib.report import CORPUS_LABEL, LEAKAGE_LABEL, markdown_table
from leakexp.models import MODEL_LABEL
from leakexp.lib.trec import read_run

HERE = Path(__file__).parent
DATA = Path(__file__).parents[1] / "leakexp" / "data"
# topics with a relevant judgment (Robust04: 249 of 250, topic 672 has none) and topics whose re-ranked top-100 holds
# no relevant document (m; measured on the authors' runs, leakexp/data/runs/README.md; Robust04's run is unpublished)
TOPICS = {"robust04": 249, "core17": 50, "core18": 50}
MISSES = {"robust04": 0, "core17": 0, "core18": 1}
DEFINITIONS = {  # name -> (evaluate.mfr, evaluate.mfr_missing)
    "1/MRR, miss RR 0": ("reciprocal_of_mrr", "infinite"),
    "1/MRR, miss left out": ("reciprocal_of_mrr", "skip"),
    "arithmetic, miss left out": ("arithmetic", "skip"),
    "arithmetic, miss = 101": ("arithmetic", "depth"),
}
ROUNDING = 0.0005  # the tables print three decimals


def bm25_first_ranks() -> dict[str, np.ndarray]:
    """The first relevant rank of every topic of the authors' BM25 top-100 runs (inf: none in the top-100)."""
    out = {}
    for corpus in ("core17", "core18"):
        run = read_run(DATA / "runs" / f"{corpus}.bm25-anserini.top100.run.gz")
        qrels = read_qrels(DATA / "trec" / f"qrels.{corpus}.txt.gz")
        out[corpus] = per_query(run, qrels, ["MFR"], mfr_missing="infinite").value.to_numpy()
    return out


def one_run_range(p_at_1: float, n: int, m: int, definition: str) -> tuple[float, float]:
    """The MFRs one run with this P@1 can have: the h - k topics not at rank 1 anywhere from rank 2 to 100."""
    mfr, missing = DEFINITIONS[definition]
    h = n - m
    k = p_at_1 * n
    deep = h - k
    if mfr == "reciprocal_of_mrr":
        over = n if missing == "infinite" else h
        return over / (k + deep / 2), over / (k + deep / 100)
    if missing == "skip":
        return (k + 2 * deep) / h, (k + 100 * deep) / h
    return (k + 2 * deep + 101 * m) / n, (k + 100 * deep + 101 * m) / n


def predicted(p_at_1: float, n: int, m: int, deep_ranks: np.ndarray, definition: str) -> float:
    """The MFR of a run with this P@1 whose other found topics have BM25's first ranks beyond rank 1."""
    mfr, missing = DEFINITIONS[definition]
    h = n - m
    k = p_at_1 * n
    if mfr == "reciprocal_of_mrr":
        mrr_found = k + (h - k) * float(np.mean(1 / deep_ranks))
        return (n if missing == "infinite" else h) / mrr_found
    total = k + (h - k) * float(np.mean(deep_ranks))
    return total / h if missing == "skip" else (total + 101 * m) / n


def check(tables: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per MFR cell with each definition's range, fit and prediction; one row per definition)."""
    tables = pd.read_csv(HERE / "paper_tables.csv") if tables is None else tables
    ranks = bm25_first_ranks()
    deep = {c: r[(r > 1) & np.isfinite(r)] for c, r in ranks.items()}
    deep["robust04"] = np.concatenate([deep["core17"], deep["core18"]])
    rows = []
    for t in tables.itertuples(index=False):
        row = {"table": int(t.table), "corpus": t.corpus, "model": t.model, "leakage": t.leakage,
               "P@1": t._6, "MFR": t.MFR}
        n, m = TOPICS[t.corpus], MISSES[t.corpus]
        for d in DEFINITIONS:
            lo, hi = one_run_range(t._6, n, m, d)
            row[f"{d}: low"], row[f"{d}: high"] = lo, hi
            row[f"{d}: fits"] = bool(lo - ROUNDING <= t.MFR <= hi + ROUNDING)
            row[f"{d}: predicted"] = predicted(t._6, n, m, deep[t.corpus], d)
        rows.append(row)
    cells = pd.DataFrame(rows)
    summary = pd.DataFrame([{
        "definition": d, "evaluate.mfr": DEFINITIONS[d][0], "evaluate.mfr_missing": DEFINITIONS[d][1],
        "cells that fit one run": f"{int(cells[f'{d}: fits'].sum())} of {len(cells)}",
        "Core cells that fit": f"{int(cells.loc[cells.corpus != 'robust04', f'{d}: fits'].sum())} of "
                               f"{int((cells.corpus != 'robust04').sum())}",
        "mean |MFR - predicted|": float((cells.MFR - cells[f"{d}: predicted"]).abs().mean()),
        "Core: mean |MFR - predicted|": float((cells.MFR - cells[f"{d}: predicted"])[cells.corpus != "robust04"].abs().mean()),
        "BM25 Core 2017 / 2018": " / ".join(f"{_bm25_mfr(ranks[c], d):.3f}" for c in ("core17", "core18")),
    } for d in DEFINITIONS])
    return cells, summary


def _bm25_mfr(ranks: np.ndarray, definition: str) -> float:
    mfr, missing = DEFINITIONS[definition]
    found = ranks[np.isfinite(ranks)]
    if mfr == "reciprocal_of_mrr":
        return (len(ranks) if missing == "infinite" else len(found)) / float(np.sum(1 / found))
    return float(found.mean()) if missing == "skip" else float(np.where(np.isfinite(ranks), ranks, 101).mean())


def markdown() -> str:
    """The two tables of experiments/README.md: per definition, then per cell (the paper's and the arithmetic)."""
    cells, summary = check()
    out = [markdown_table(summary, floatfmt="{:.3f}")]
    shown = pd.DataFrame({
        "row": [f"T{t} {CORPUS_LABEL[c].replace('Common Core ', 'CC')} {MODEL_LABEL[m]} {LEAKAGE_LABEL[l]}"
                for t, c, m, l in zip(cells.table, cells.corpus, cells.model, cells.leakage)],
        "P@1": cells["P@1"], "MFR": cells.MFR,
        "1/MRR (miss RR 0): one run": [f"{lo:.3f}-{hi:.3f}" + ("" if ok else " ✗") for lo, hi, ok in zip(
            cells["1/MRR, miss RR 0: low"], cells["1/MRR, miss RR 0: high"], cells["1/MRR, miss RR 0: fits"])],
        "1/MRR: predicted": cells["1/MRR, miss RR 0: predicted"],
        "arithmetic (skip): one run": [f"{lo:.3f}-{hi:.2f}" + ("" if ok else " ✗") for lo, hi, ok in zip(
            cells["arithmetic, miss left out: low"], cells["arithmetic, miss left out: high"],
            cells["arithmetic, miss left out: fits"])],
        "arithmetic: predicted": cells["arithmetic, miss left out: predicted"],
    })
    out.append(markdown_table(shown, floatfmt="{:.3f}"))
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
