"""What the robustness stages measure, as pure functions on per-topic values and rankings (Wu et al., "Are Neural
Ranking Models Robust?", ACM TOIS 2022): VNAP, %no and gMAP (Sec. 3), drop rates (Sec. 4.2, 5.1), Top Change and
Kendall-tau distance (Sec. 5.2), and leakexp's own worst-fraction means, the stuffed document's rank gain, bootstrap
intervals and a paired randomization test."""

from __future__ import annotations

import math
from typing import Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd
    from scipy import stats as sps


def vnap(ap: Sequence[float]) -> float:
    """Variance of normalised average precision over test queries (Wu et al., Section 3.2, Eqs. 5-6):
    NAP(q) = AP(q) / mean AP, VNAP = E[(NAP - E[NAP])^2], the expectation uniform over queries (population
    variance, ddof 0). Lower is more robust. NaN without queries or when every AP is 0."""
    a = np.asarray(list(ap), dtype=float)
    if a.size == 0 or a.mean() == 0:
        return float("nan")
    nap = a / a.mean()
    return float(np.mean((nap - nap.mean()) ** 2))


def pct_no(precision_at_10: Sequence[float]) -> float:
    """%no (Wu et al., Section 3.5.1, Eq. 8, after Voorhees [86]): the percentage of queries with no relevant
    document (label >= 1) in the top 10, 100 * mean_q prod_{n<=10} delta(y_qn = 0). A query has no relevant
    document in its top 10 exactly when its P@10 is 0 (a ranking shorter than 10 counts its missing ranks as
    non-relevant, as P@10 does), so the per-query input is P@10. Lower is more robust; NaN without queries."""
    p = np.asarray(list(precision_at_10), dtype=float)
    p = p[~np.isnan(p)]
    return float(100.0 * np.mean(p == 0)) if p.size else float("nan")


def gmap(ap: Sequence[float], epsilon: float) -> float:
    """gMAP (Wu et al., Section 3.5.1, Eq. 9, after Voorhees [86, 87]): exp(mean_q log(AP(q) + eps)) - eps, the
    geometric mean of AP with a small positive ``epsilon`` (``robustness.gmap_epsilon``) so that a query with AP 0
    does not send it to 0. Higher is more robust; NaN without queries."""
    if not epsilon > 0:
        raise ValueError(f"gMAP needs epsilon > 0, got {epsilon}")
    a = np.asarray(list(ap), dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return float("nan")
    return float(np.exp(np.mean(np.log(a + epsilon))) - epsilon)


def own_worst_mean(values: Sequence[float], fraction: float) -> float:
    """Mean of a model's ceil(fraction * n) lowest per-topic values, chosen on its *own* values (leakexp's own
    worst-fraction figure; Wu et al. define %no and gMAP, not this). Selecting on one model's values and
    measuring another's on those topics would compare a regression to the mean; here every model is measured
    on its own worst topics, as %no and gMAP are, and a comparison of two models is tested by
    :func:`paired_randomization` with the selection redone in every permutation."""
    if not 0 < fraction <= 1:
        raise ValueError(f"worst-query fraction {fraction} must be in (0, 1]")
    v = np.sort(np.asarray(list(values), dtype=float)[~np.isnan(np.asarray(list(values), dtype=float))])
    if v.size == 0:
        return float("nan")
    return float(v[:math.ceil(fraction * v.size)].mean())


def rank_gain(rank_before: Sequence[int], rank_after: Sequence[int]) -> np.ndarray:
    """Ranks a stuffed document climbs (0-based rank before minus rank after; positive = promoted): the figure
    that says what query stuffing (Section 5.2's manipulation, simulated) achieves, where Top Change and
    Kendall-tau distance, with one moved document, say little."""
    return np.asarray(list(rank_before), dtype=float) - np.asarray(list(rank_after), dtype=float)


def normalised_text(text: str) -> str:
    return " ".join(str(text).lower().split())


def shared_topics(source: pd.DataFrame, target: pd.DataFrame) -> set[str]:
    """Topics (qid) of ``target`` that ``source`` also has: the same id with the same query text, or the same
    query text under another id (case and spacing ignored). TREC Core 2017 reuses Robust04's topics (and Core
    2018 some of them), so "OOD" from Robust04 to those topics is out of distribution in documents but not in
    queries; the topic-disjoint rest is the default OOD evaluation (``robustness.ood_topics``). A reused id with
    another text is another topic. Both frames have columns qid, query."""
    src = dict(zip(source.qid.astype(str), source["query"].map(normalised_text)))
    texts = set(src.values())
    return {str(q) for q, t in zip(target.qid.astype(str), target["query"].map(normalised_text))
            if src.get(q) == t or t in texts}


def bootstrap_ci(arrays: Sequence[np.ndarray], statistic, B: int, seed: int,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap confidence interval over topics: ``B`` resamples (with replacement, seeded
    ``numpy.random.default_rng(seed)``) of the topics of each array independently (an array is (seeds, topics,
    k): its k values of a topic move together, e.g. a topic's original and attacked value), ``statistic`` of the
    resampled arrays per seed, averaged over seeds. NaN bounds when any array has no topic."""
    if any(a.shape[1] == 0 for a in arrays):
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    samples = [a[:, rng.integers(0, a.shape[1], size=(B, a.shape[1]))] for a in arrays]  # (S, B, n, k)
    with np.errstate(all="ignore"):
        values = np.nanmean(statistic(*samples), axis=0) if samples[0].shape[0] > 1 else statistic(*samples)[0]
    values = values[np.isfinite(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def paired_randomization(a: np.ndarray, b: np.ndarray, statistic, B: int, seed: int) -> float:
    """Two-sided paired randomization test (Fisher; Smucker et al., CIKM 2007) of statistic(a) - statistic(b)
    for two systems' values on the same topics (``a[i]``, ``b[i]`` of topic i): each permutation swaps the two
    values of every topic with probability 1/2, seeded, ``B`` permutations; p = (1 + #|T*| >= |T|) / (B + 1).
    ``statistic`` maps an array (..., topics) to (...); it is recomputed on every permutation, so a statistic
    that selects topics (:func:`own_worst_mean`) selects again and the test carries no selection bias."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if a.size < 2:
        return 1.0
    observed = float(statistic(a[None])[0] - statistic(b[None])[0])
    swap = np.random.default_rng(seed).random((B, a.size)) < 0.5
    pa, pb = np.where(swap, b, a), np.where(swap, a, b)
    null = statistic(pa) - statistic(pb)
    return float((1 + np.sum(np.abs(null) >= abs(observed) - 1e-12)) / (B + 1))


def own_worst_stat(fraction: float):
    """:func:`own_worst_mean` vectorised over leading axes: (..., topics) -> (...), NaN topics left out."""
    def stat(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        s = np.sort(np.where(np.isnan(x), np.inf, x), axis=-1)
        n = np.sum(~np.isnan(x), axis=-1)
        k = np.ceil(fraction * n).astype(int)
        take = np.arange(x.shape[-1]) < k[..., None]
        with np.errstate(all="ignore"):
            return np.where(k > 0, np.sum(np.where(take, s, 0.0), axis=-1) / k, np.nan)
    return stat


def worst_queries(values: pd.Series, fraction: float) -> list[str]:
    """The ceil(fraction * n) topics with the lowest values (ties by qid) of one model (its own poorly-performing
    topics; Wu et al., Section 3.5, measure them by %no and gMAP instead)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"worst-query fraction {fraction} must be in (0, 1]")
    v = values.dropna()
    k = math.ceil(fraction * len(v))
    order = sorted(v.index, key=lambda q: (v[q], str(q)))
    return [str(q) for q in order[:k]]


def drop_rate(new: float, reference: float) -> float:
    """(P_new - P_ref) / P_ref: DR_OOD (Wu et al., Section 4.1.2, Eq. 11; P_new = P_OOD, P_ref = P_I.I.D.) and
    DR_query (Section 5.1.2, Eq. 16; P_new = P_t on attacked, P_ref = P_o on original queries). Negative is a
    drop; higher is more robust. NaN when P_ref is 0 (no drop rate exists)."""
    if reference == 0 or np.isnan(reference) or np.isnan(new):
        return float("nan")
    return float((new - reference) / reference)


def drop_contributions(new: pd.Series, reference: pd.Series | float) -> pd.Series:
    """Per-topic terms whose mean is the drop rate: (new(q) - ref(q)) / mean(ref), or (new(q) - P_ref) / P_ref
    for a scalar reference (DR_OOD). They give the paired tests of leaked vs. no leakage a per-topic value."""
    import pandas as pd

    if isinstance(reference, pd.Series):
        ref_mean = float(reference.mean())
        diff = new - reference
    else:
        ref_mean = float(reference)
        diff = new - ref_mean
    if ref_mean == 0 or np.isnan(ref_mean):
        return diff * np.nan
    return diff / ref_mean


def strict_ranking(run: pd.DataFrame) -> list[str]:
    """Docnos of one topic's run by score descending, ties by docno ascending (the pipeline's order)."""
    return run.sort_values(["score", "docno"], ascending=[False, True], kind="mergesort").docno.astype(str).tolist()


def rescored_rankings(run: pd.DataFrame, before: dict[str, float],
                      after: dict[str, float]) -> tuple[list[str], list[str]]:
    """One topic's ranking before and after a document manipulation: the stored scores (docno, score), with
    the manipulated documents' scores replaced by their re-scored original (``before``) and manipulated
    (``after``) text. Both rankings hold the same documents."""
    if set(after) != set(before) or not set(before) <= set(run.docno):
        raise ValueError("before and after must re-score the same documents of the run")
    b = run[["docno", "score"]].copy()
    a = b.copy()
    b["score"] = [before.get(d, s) for d, s in zip(b.docno, b.score)]
    a["score"] = [after.get(d, s) for d, s in zip(a.docno, a.score)]
    return strict_ranking(b), strict_ranking(a)


def top_change(before: Sequence[str], after: Sequence[str]) -> int:
    """TC (Wu et al., Section 5.2.2, Eq. 20, after Goren et al. [27]): 1 if the top document differs."""
    if not before or not after:
        raise ValueError("top change needs two non-empty rankings")
    return int(before[0] != after[0])


def kendall_tau_distance(before: Sequence[str], after: Sequence[str]) -> float:
    """Normalised Kendall-tau distance KT (Wu et al., Section 5.2.2, Eqs. 21-22): discordant pairs of two
    rankings of the *same* documents over n(n-1)/2.

    Both rankings are strict orders (the pipeline breaks score ties by docno), so no pair is tied and
    scipy's tau-b equals (C - D) / (n(n-1)/2) with C + D = n(n-1)/2, hence KT = (1 - tau) / 2 exactly.
    NaN for fewer than two documents (no pairs)."""
    from scipy import stats as sps

    b, a = list(before), list(after)
    if len(set(b)) != len(b) or len(set(a)) != len(a):
        raise ValueError("a ranking lists a document twice")
    if set(b) != set(a):
        raise ValueError(f"Kendall-tau distance needs rankings of the same documents; only in one: "
                         f"{sorted(set(b) ^ set(a))[:5]}")
    n = len(b)
    if n < 2:
        return float("nan")
    pos = {d: i for i, d in enumerate(a)}
    tau = sps.kendalltau(np.arange(n), [pos[d] for d in b])[0]
    return float((1.0 - tau) / 2.0)


def manipulation_effects(run: pd.DataFrame, pairs: pd.DataFrame, relevant: set[tuple[str, str]],
                         kind: str) -> pd.DataFrame:
    """Per topic of the re-ranked ``run``, what re-scoring its manipulated documents did (``pairs``: qid, docno and
    their scores ``before`` and ``after`` the manipulation; every other document keeps its stored score): Top
    Change (TC) and the normalised Kendall-tau distance (KT) of the two rankings (Wu et al. 2022, Eqs. 20-22), and
    for stuffing the stuffed document's ranks, its gain and whether it is judged relevant (``relevant``: (qid,
    docno) pairs)."""
    import pandas as pd

    rows = []
    for qid, g in run.groupby("qid", sort=True):
        changed = pairs[pairs.qid == qid]
        if changed.empty:
            continue
        rb, ra = rescored_rankings(g, dict(zip(changed.docno, changed.before)), dict(zip(changed.docno, changed.after)))
        row = {"qid": qid, "documents": len(g), "manipulated": len(changed),
               "TC": top_change(rb, ra), "KT": kendall_tau_distance(rb, ra), "before_is_stored": rb == strict_ranking(g)}
        if kind == "stuff":
            d = str(changed.docno.iloc[0])
            row.update(docno=d, rank_before=rb.index(d), rank_after=ra.index(d), relevant=(str(qid), d) in relevant)
            row["gain"] = row["rank_before"] - row["rank_after"]
        rows.append(row)
    return pd.DataFrame(rows)


def attack_effects(before: pd.Series, after: pd.Series, applied: set) -> pd.DataFrame:
    """Per topic (``before``: the measure per qid on the stored run; ``after``: on the run with the attacked topics
    re-scored), whether the attack changed its query and the measure before and after."""
    import pandas as pd

    return pd.DataFrame({"qid": before.index, "applied": before.index.isin(applied),
                         "original": before.values, "attacked": after.reindex(before.index).values})

