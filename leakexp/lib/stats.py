"""Five-fold cross-validation over training-set sizes, paired t-tests with Bonferroni correction, and
model-order swaps (paper, Section 4, Tables 3-5).

For each model, leakage type and measure, one training-set size is chosen per fold on the other four
folds' topics and that size's per-query values on the held-out fold are kept; the held-out values of all
folds together are the cross-validated result. Two ways to choose (``evaluate.cv_selection``):

- ``best`` (default): every leakage type (None too) takes the size with the best mean on the training
  folds. A leaked type is tested against None's own cross-validated values (paired per topic): "the best
  model with leakage against the best model without".
- ``max_effect`` (the paper, Section 4: "a grid search ... can choose the training set size with the
  highest leakage effect"): for a leaked type, per fold the size with the largest leakage effect on the
  training folds, i.e. the largest mean(leaked[size]) - mean(none[size]) (for MFR, where lower is better,
  the largest decrease); on the held-out fold the leaked values *and the None values at that same size*
  are kept, and the t-test pairs those. So a gain at 1k is measured against None at 1k, never against None
  at another size. The None column of a table still shows None's ``best`` cross-validation (the best
  model without leakage); the summary's ``none_mean`` and ``effect`` give the paired None mean and the
  leaked-minus-None difference that the test is about.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from typing import TYPE_CHECKING

from leakexp.lib.decisions import MEAN_DECIMALS, rounded
from leakexp.lib.measures import LOWER_IS_BETTER, SELECTIONS, average, mean_by, tested_values

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd
    from scipy import stats as sps


def assign_folds(qids: list[str], n_folds: int = 5, seed: int = 0) -> dict[str, int]:
    """Deterministic fold of every topic: a seeded permutation of the sorted ids, dealt round robin."""
    ordered = sorted(set(map(str, qids)))
    perm = np.random.default_rng(seed).permutation(len(ordered))
    return {ordered[i]: k % n_folds for k, i in enumerate(perm)}


def seed_average(results: pd.DataFrame, *, mfr: str) -> pd.DataFrame:
    """Per-query values averaged over the seeds of each cell (NaN, e.g. an MFR miss, left out); a reciprocal MFR
    as 1 / the seeds' mean reciprocal rank (``leakexp.lib.measures.mean_by``)."""
    keys = ["corpus", "model", "leakage", "size", "measure", "qid"]
    return mean_by(results, keys, mfr)


def _pick(scores: dict[int, float], lower_better: bool) -> int:
    """The size with the best score (at ``MEAN_DECIMALS``: float noise breaks no tie); ties go to the smaller
    size; NaN never wins."""
    valid = {s: float(rounded(v, MEAN_DECIMALS)) for s, v in scores.items() if not np.isnan(v)}
    if not valid:
        return min(scores)
    key = (lambda s: (valid[s], s)) if lower_better else (lambda s: (-valid[s], s))
    return min(valid, key=key)


@dataclass
class CVResult:
    values: pd.Series  # qid -> held-out value
    sizes: dict[int, int]  # fold -> chosen size
    baseline: pd.Series | None = None  # max_effect: qid -> held-out None value at the same size


def cross_validate(
    grid: pd.DataFrame, folds: dict[str, int], measure: str, *, selection: str = "best", leakage: str,
    baseline: pd.DataFrame | None = None, mfr: str,
) -> CVResult:
    """CV of one (model, leakage, measure). ``grid``: seed-averaged rows (size, qid, value) of that
    leakage; ``baseline``: the same for ``none`` (needed by ``max_effect``). Means are the reported ones
    (``leakexp.lib.measures.average``: 1/MRR for a reciprocal MFR)."""
    import pandas as pd

    if selection not in SELECTIONS:
        raise ValueError(f"evaluate.cv_selection={selection!r} is unknown; use best or max_effect")
    lower = measure in LOWER_IS_BETTER

    def _mean(values: pd.Series) -> float:
        return average(values, measure, mfr)

    wide = grid.pivot_table(index="qid", columns="size", values="value", aggfunc="mean", dropna=False)
    base = None
    if selection == "max_effect" and leakage != "none":
        if baseline is None:
            raise ValueError("max_effect selection needs the no-leakage results")
        base = baseline.pivot_table(index="qid", columns="size", values="value", aggfunc="mean", dropna=False)
        base = base.reindex(index=wide.index)  # None on the leaked type's topics (NaN where it has none)
    fold_of = pd.Series({q: folds[q] for q in wide.index if q in folds})
    held, held_base, chosen = [], [], {}
    for k in sorted(set(fold_of.values)):
        train_q = fold_of.index[fold_of != k]
        test_q = fold_of.index[fold_of == k]
        if base is not None:
            # largest improvement over none at the same size (for lower-is-better measures: largest decrease)
            scores = {s: _mean(wide.loc[train_q, s]) - _mean(base.loc[train_q, s]) if s in base.columns else np.nan
                      for s in wide.columns}
            size = _pick({s: (-v if lower else v) for s, v in scores.items()}, lower_better=False)
            held_base.append(base.loc[test_q, size] if size in base.columns else pd.Series(np.nan, index=test_q))
        else:
            size = _pick({s: _mean(wide.loc[train_q, s]) for s in wide.columns}, lower_better=lower)
        chosen[int(k)] = int(size)
        held.append(wide.loc[test_q, size])
    values = pd.concat(held).sort_index() if held else pd.Series(dtype=float)
    paired = None
    if base is not None:
        paired = pd.concat(held_base).sort_index() if held_base else pd.Series(dtype=float)
    return CVResult(values, chosen, paired)


def paired_t(a: pd.Series, b: pd.Series, measure: str | None = None, mfr: str = "reciprocal_of_mrr") -> tuple[float, int]:
    """Two-sided paired Student's t-test (scipy.stats.ttest_rel) on the queries both define; for ``measure`` MFR
    on the values its mean averages (reciprocal ranks for a reciprocal MFR, ``leakexp.lib.measures.tested_values``)."""
    import pandas as pd

    from scipy import stats as sps

    if measure is not None:
        a, b = tested_values(a, measure, mfr), tested_values(b, measure, mfr)
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    if len(both) < 2 or np.allclose(both.a.values, both.b.values):
        return 1.0, len(both)
    p = float(sps.ttest_rel(both.a.values, both.b.values).pvalue)
    return (1.0 if np.isnan(p) else p), len(both)


def bonferroni(pvalues: list[float]) -> list[float]:
    """Bonferroni-corrected p-values (statsmodels' multipletests, as pt.Experiment uses)."""
    from statsmodels.stats.multitest import multipletests

    if not pvalues:
        return []
    return [float(p) for p in multipletests(pvalues, method="bonferroni")[1]]


def evaluate_corpus(
    avg: pd.DataFrame, corpus: str, measures: list[str], *, n_folds: int = 5, fold_seed: int = 0,
    selection: str = "best", alpha: float = 0.05, heldout: list | None = None, mfr: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """CV results and tests for every model of ``corpus``.

    ``heldout``, when given, receives the cross-validated per-topic values as frames (corpus, model,
    measure, leakage, qid, value): the held-out values each mean of the summary averages.

    Returns (summary, sizes): summary has one row per (model, measure, leakage) with the mean, the mean of
    the None values it is paired with (``none_mean``: None's own cross-validation under ``best``, None at the
    same sizes under ``max_effect``), their difference (``effect``), the p-value of the paired t-test, the
    Bonferroni-corrected p-value (over the leaked types of that model and measure, as pt.Experiment
    corrects over the non-baseline systems) and a significance flag; sizes lists the chosen size per fold.
    ``mfr`` (``evaluate.mfr``): how MFR's first ranks are averaged and tested.
    """
    import pandas as pd

    a = avg[avg.corpus == corpus]
    folds = assign_folds(a.qid.unique().tolist(), n_folds, fold_seed)
    rows, size_rows = [], []
    for model in sorted(a.model.unique()):
        for measure in measures:
            m = a[(a.model == model) & (a.measure == measure)]
            if m.empty:
                continue
            base_grid = m[m.leakage == "none"]
            cv = {}
            for leakage in ("none", "msm", "test"):
                g = m[m.leakage == leakage]
                if g.empty:
                    continue
                res = cross_validate(g, folds, measure, selection=selection, leakage=leakage,
                                     baseline=base_grid if not base_grid.empty else None, mfr=mfr)
                cv[leakage] = res
                if heldout is not None:
                    heldout.append(pd.DataFrame({"corpus": corpus, "model": model, "measure": measure,
                                                 "leakage": leakage, "qid": res.values.index.astype(str),
                                                 "value": res.values.values}))
                size_rows += [{"corpus": corpus, "model": model, "measure": measure, "leakage": leakage,
                               "fold": k, "size": s} for k, s in res.sizes.items()]
            leaked = [l for l in ("msm", "test") if l in cv and "none" in cv]
            # what each leaked type is compared with: None at the same sizes (max_effect) or None's own CV
            partner = {l: cv[l].baseline if cv[l].baseline is not None else cv["none"].values for l in leaked}
            raw = [paired_t(cv[l].values, partner[l], measure, mfr)[0] for l in leaked]
            corrected = dict(zip(leaked, bonferroni(raw)))
            raw = dict(zip(leaked, raw))
            for leakage, res in cv.items():
                mean = average(res.values, measure, mfr)
                none_mean = average(partner[leakage], measure, mfr) if leakage in partner else np.nan
                rows.append({
                    "corpus": corpus, "model": model, "measure": measure, "leakage": leakage, "selection": selection,
                    "mean": mean, "queries": int(res.values.notna().sum()),
                    "none_mean": none_mean, "effect": mean - none_mean,
                    "p": raw.get(leakage, np.nan), "p_bonferroni": corrected.get(leakage, np.nan),
                    "significant": bool(corrected.get(leakage, 1.0) < alpha),
                })
    return pd.DataFrame(rows), pd.DataFrame(size_rows)


def order_swaps(means: dict[str, dict[str, float]], lower_better: bool = False) -> list[tuple[str, str]]:
    """Model pairs whose order under None reverses when one of them is trained with MSM leakage.

    ``means[model] = {"none": x, "msm": y}``. Returns (gainer, overtaken): ``gainer`` is behind
    ``overtaken`` without leakage but ahead of it (without leakage) when ``gainer`` has MSM leakage.
    """
    better = (lambda x, y: rounded(x, MEAN_DECIMALS) < rounded(y, MEAN_DECIMALS)) if lower_better else \
        (lambda x, y: rounded(x, MEAN_DECIMALS) > rounded(y, MEAN_DECIMALS))
    out = []
    for a, ma in means.items():
        for b, mb in means.items():
            if a == b or any(np.isnan(v) for v in (ma.get("none", np.nan), mb.get("none", np.nan), ma.get("msm", np.nan))):
                continue
            if better(mb["none"], ma["none"]) and better(ma["msm"], mb["none"]):
                out.append((a, b))
    return sorted(out)
