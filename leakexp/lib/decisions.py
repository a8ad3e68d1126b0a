"""Decisions on floats that CPU kernels compute, made so that another machine's float noise cannot flip them.

Two CPUs give an SBERT similarity different last bits (ATen's AVX2 / AVX-512 / default kernels, MKL's and Faiss's
BLAS cores): about 1e-7. A training query that copies a topic's title has similarity 1.0 +- a few ulp on each
machine, so an order or a cut on the raw value puts such ties in an order that the machine decides. Every order,
tie and threshold on a similarity is therefore decided on the similarity rounded to ``SIMILARITY_DECIMALS``
decimals (1e-4, three orders of magnitude above the noise), ties broken by ids: "similarity > 0.91" means a
similarity that rounds to 0.9101 or more. What lies within one rounding step of a threshold (``near``) could still
fall on the other side on another machine; the stages that cut there record it.
"""

from __future__ import annotations

import numpy as np
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


SIMILARITY_DECIMALS = 4
SIMILARITY_STEP = 10.0 ** -SIMILARITY_DECIMALS
# means of per-topic values (a table's cells, a CV fold's sizes): sums of the same values in another order differ in
# their 16th digit, so equal means compare equal at 9 decimals and the tie goes where the rule says (smaller size)
MEAN_DECIMALS = 9
ROUNDING = (f"similarities are rounded to {SIMILARITY_DECIMALS} decimals before any order, tie or threshold "
            "(another CPU's kernels move them by about 1e-7)")


def rounded(values, decimals: int = SIMILARITY_DECIMALS) -> np.ndarray:
    """``values`` as float64, rounded half to even to ``decimals`` decimals: the value decisions are made on."""
    return np.round(np.asarray(values, dtype=np.float64), decimals)


def above(values, threshold: float, decimals: int = SIMILARITY_DECIMALS) -> np.ndarray:
    """Whether each value, rounded, is above ``threshold`` (the paper's "score > 0.91")."""
    return rounded(values, decimals) > round(float(threshold), decimals)


def near(values, threshold: float, decimals: int = SIMILARITY_DECIMALS) -> np.ndarray:
    """Whether each value lies within one rounding step of ``threshold``: a decision another CPU could make
    otherwise (recorded where the cut is made)."""
    return np.abs(np.asarray(values, dtype=np.float64) - float(threshold)) <= 10.0 ** -decimals


def ranked(frame: pd.DataFrame, column: str, *, by: list[str] = (), ties: list[str] = (),
           decimals: int = SIMILARITY_DECIMALS) -> pd.DataFrame:
    """``frame`` sorted by the ``by`` columns, then by ``column`` rounded (descending), then by the ``ties`` columns
    (ids, ascending): an order that float noise in ``column`` cannot change."""
    key = "__rounded__"
    out = frame.assign(**{key: rounded(frame[column], decimals)})
    cols = [*by, key, *ties]
    out = out.sort_values(cols, ascending=[True] * len(by) + [False] + [True] * len(ties), kind="mergesort")
    return out.drop(columns=key)


def rank_rows(scores: np.ndarray, ids: np.ndarray, decimals: int | None = SIMILARITY_DECIMALS) -> np.ndarray:
    """Per row of ``scores`` (and the matching ``ids``, -1 for none): the column order by score rounded to
    ``decimals`` (descending; None: exact), then id ascending, missing ids last."""
    ids_key = np.where(ids < 0, np.iinfo(np.int64).max, ids)
    key = scores if decimals is None else rounded(scores, decimals)
    key = np.where(np.isfinite(key), key, -np.inf)
    return np.lexsort((ids_key, -key), axis=-1)
