"""The robustness tables (``robustness_<corpus>.{md,tex,csv}``) and the DR_query figure of the ``robustness/*`` stages (``leakexp.stages.robustness``)
(Wu et al.), written from the finished robustness artifacts only: nothing is computed here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

from leakexp.models import MODEL_LABEL
from leakexp.lib.report import LEAKAGE_LABEL, incomplete_note, latex_table, markdown_table, save_figure
from leakexp.lib.stats import bonferroni, paired_t
from leakexp.runner.schema import Settings
from leakexp.runner.store import atomic_write_text
from leakexp.stages.cell import Cell
from leakexp.lib import robustness_stats
from leakexp.lib.robustness_stats import paired_randomization
from leakexp.stages.robustness.family import Robustness, docs_ask, queries_ask, robustness_settings
from leakexp.stages.robustness.family import parts as robustness_parts
from leakexp.tables.captions import core_test_leak_note
from leakexp.tables.captions import recipe_note
from leakexp.stages.verify import stored_leaking_topics
from leakexp.toolkit.attacks import defined_by_wu as wu

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


SUBSETS = ("all", "leaked", "other")



def stored_values(s: Settings, runner, cells: list[Cell]) -> tuple[pd.DataFrame, dict[Cell, str]]:
    """Per-topic values of every finished robustness part: columns corpus, leakage, size, model, seed, part,
    kind (own, ood, query, doc), target (the ranked corpus), qid, measure, value, original (query attacks),
    applied (query attacks: the attack changed the topic), shared (OOD: the topic is also a topic of the model's
    own corpus), relevant_target (stuffing: the stuffed document is judged relevant). Document parts give TC and
    KT per topic, stuffing also ``gain`` (ranks climbed) and ``top10`` (1 if the stuffed document reaches the top
    10). Also the state of every cell lacking a part. Reads finished artifacts only."""
    import pandas as pd

    measure = robustness_settings(s).measure
    frames, states = [], {}
    for cell in cells:
        parts = {name: runner.state(ask) for name, ask in robustness_parts(s, cell).items()}
        st = next((x for x in ("failed", "damaged", "stale", "running", "missing", "data missing")
                   if x in {v[0] for v in parts.values()}), "done")
        if st != "done":
            states[cell] = st
        for name, (state, path, _) in parts.items():
            if state != "done":
                continue
            pq = pd.read_parquet(path / "perquery.parquet")
            if name == "own":
                f = pq.assign(kind="own", target=cell.corpus, applied=True)
            elif name.startswith("ood-"):
                f = pq.assign(kind="ood", target=name[4:], applied=True)
            elif name.startswith("doc-"):
                if pq.empty:
                    continue
                if "gain" in pq:
                    pq = pq.assign(top10=(pq.rank_after < 10).astype(float), relevant_target=pq.relevant)
                ms = [m for m in ("TC", "KT", "gain", "top10") if m in pq]
                keep = ["qid"] + (["relevant_target"] if "relevant_target" in pq else [])
                f = pd.concat([pq[keep].assign(measure=m, value=pq[m].astype(float)) for m in ms])
                f = f.assign(kind="doc", target=cell.corpus, applied=True)
            else:
                f = pq.rename(columns={"attacked": "value"}).assign(kind="query", target=cell.corpus, measure=measure)
            frames.append(f.assign(part=name, corpus=cell.corpus, leakage=cell.leakage, size=cell.size,
                                   model=cell.model, seed=cell.seed))
    if not frames:
        return pd.DataFrame(columns=VALUE_COLUMNS), states
    out = pd.concat(frames, ignore_index=True).reindex(columns=VALUE_COLUMNS)
    out["qid"] = out.qid.astype(str)
    return out, states


VALUE_COLUMNS = ["corpus", "leakage", "size", "model", "seed", "part", "kind", "target", "qid", "measure", "value",
                 "original", "applied", "shared", "relevant_target"]


def _cube(frame: pd.DataFrame, cols: list[str], seeds: list, qids: list[str]) -> np.ndarray:
    """(seeds, topics, len(cols)) array of ``frame``'s columns (rows: seed, qid), NaN where a value is missing."""
    out = np.full((len(seeds), len(qids), len(cols)), np.nan)
    if frame.empty:
        return out
    si = {s: i for i, s in enumerate(seeds)}
    qi = {q: i for i, q in enumerate(qids)}
    f = frame[frame.qid.isin(qi) & frame.seed.isin(si)]
    for k, c in enumerate(cols):
        out[f.seed.map(si).to_numpy(), f.qid.map(qi).to_numpy(), k] = f[c].to_numpy(dtype=float)
    return out


def _by_measure(frame: pd.DataFrame, measure: str) -> pd.DataFrame:
    return frame[frame.measure == measure]


# statistics over the topic axis (-2) of (..., topics, k) arrays; every one NaN-aware
def _mean(x):
    return np.nanmean(x[..., 0], axis=-1)


def _median(x):
    return np.nanmedian(x[..., 0], axis=-1)


def _vnap(x):
    a = x[..., 0]
    m = np.nanmean(a, axis=-1, keepdims=True)
    nap = np.where(m == 0, np.nan, a / m)
    return np.nanmean((nap - np.nanmean(nap, axis=-1, keepdims=True)) ** 2, axis=-1)


def _pct_no(x):
    a = x[..., 0]
    return 100.0 * np.nanmean(np.where(np.isnan(a), np.nan, a == 0), axis=-1)


def _gmap(eps):
    return lambda x: np.exp(np.nanmean(np.log(x[..., 0] + eps), axis=-1)) - eps


def _drop(x):  # (..., topics, 2): reference, new
    ref = np.nanmean(x[..., 0], axis=-1)
    return (np.nanmean(x[..., 1], axis=-1) - ref) / np.where(ref == 0, np.nan, ref)


def _drop_ood(own, ood):
    ref = np.nanmean(own[..., 0], axis=-1)
    return (np.nanmean(ood[..., 0], axis=-1) - ref) / np.where(ref == 0, np.nan, ref)


@dataclass
class Figure:
    """One robustness figure of one model: its per-topic arrays, the statistic, how two models are compared."""

    arrays: list  # (seeds, topics, k) arrays, each over its own topics
    qids: list  # the topics of arrays[0]
    statistic: Callable
    terms: Callable | None = None  # per-topic values of arrays[0] whose paired t-test compares two models
    randomization: Callable | None = None  # (..., topics) -> (...): compared by a paired randomization test

    def per_topic(self) -> pd.Series | None:
        """Seed-mean per-topic terms (t-test) or values (randomization test), by qid."""
        import pandas as pd

        fn = self.terms if self.terms is not None else (lambda x: x[..., 0]) if self.randomization else None
        if fn is None:
            return None
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return pd.Series(np.nanmean(fn(self.arrays[0]), axis=0), index=self.qids)


def figures(values: pd.DataFrame, s: Robustness.Settings, leaked: set[str] | None = None, subset: str = "all") -> dict[str, Figure]:
    """The figures of one (corpus, size, model, leakage) -> {column: Figure}, on all topics or (``subset``
    leaked / other) on the topics with verified leaks (``leaked``) or the others. An OOD target's topic counts as
    leaked when it is shared with the own corpus (:func:`leakexp.lib.robustness_stats.shared_topics`) and its id leaked."""
    seeds = sorted(values.seed.unique())
    out: dict[str, Figure] = {}

    def keep(f: pd.DataFrame, ood: bool = False) -> pd.DataFrame:
        if subset == "all":
            return f
        hit = f.qid.isin(leaked or set()) & (f.shared.fillna(False).astype(bool) if ood else True)
        return f[hit] if subset == "leaked" else f[~hit]

    def fig(col, frame, cols, statistic, **kw):
        qids = sorted(frame.qid.unique())
        if qids:
            out[col] = Figure([_cube(frame, cols, seeds, qids)], qids, statistic, **kw)

    own = keep(values[values.kind == "own"])
    m = s.measure
    eff = _by_measure(own, m)
    fig(m, eff, ["value"], _mean, terms=lambda x: x[..., 0])
    fig("VNAP", _by_measure(own, "AP"), ["value"], _vnap)
    fig("%no", _by_measure(own, "P@10"), ["value"], _pct_no, terms=lambda x: 100.0 * (x[..., 0] == 0))
    fig("gMAP", _by_measure(own, "AP"), ["value"], _gmap(s.gmap_epsilon),
        terms=lambda x: np.log(x[..., 0] + s.gmap_epsilon))
    for frac in s.worst:
        fig(worst_column(frac), eff, ["value"], lambda x, f=frac: robustness_stats.own_worst_stat(f)(x[..., 0]),
            randomization=robustness_stats.own_worst_stat(frac))
    ood_all = values[values.kind == "ood"]
    for target in sorted(ood_all.target.unique()):
        o = keep(_by_measure(ood_all[ood_all.target == target], m), ood=True)
        if s.ood_topics == "disjoint":
            o = o[~o.shared.astype(bool)]
        fig(f"OOD {target}", o, ["value"], _mean, terms=lambda x: x[..., 0])
        if f"OOD {target}" in out and m in out:
            out[f"DR_OOD {target}"] = Figure([out[m].arrays[0], out[f"OOD {target}"].arrays[0]], out[m].qids,
                                             _drop_ood)
    for part, q in values[values.kind == "query"].groupby("part"):
        q = keep(q[q.applied.astype(bool)]).rename(columns={"value": "attacked"})
        fig(f"DR {part}", q, ["original", "attacked"], _drop,
            terms=lambda x: (x[..., 1] - x[..., 0]) / np.nanmean(x[..., 0], axis=-1, keepdims=True))
    for part, d in values[values.kind == "doc"].groupby("part"):
        kind = part[4:]
        d = keep(d)
        if kind == "stuff" and (d.measure == "gain").any():
            rel = d.relevant_target.astype(bool)
            other, relevant = d[~rel], d[rel]
            fig("gain stuff", _by_measure(other, "gain"), ["value"], _mean, terms=lambda x: x[..., 0])
            fig("median gain stuff", _by_measure(other, "gain"), ["value"], _median)
            fig("top-10 stuff", _by_measure(other, "top10"), ["value"], _mean, terms=lambda x: x[..., 0])
            fig("gain stuff (relevant)", _by_measure(relevant, "gain"), ["value"], _mean, terms=lambda x: x[..., 0])
        for me in ("TC", "KT"):
            fig(f"{me} {kind}", _by_measure(d, me), ["value"], _mean, terms=lambda x: x[..., 0])
    return out


def worst_column(fraction: float) -> str:
    return f"worst {round(fraction * 100):g}% (leakexp)"


def _compare(figs: dict[str, dict[str, Figure]], col: str, s: Robustness.Settings) -> dict[str, tuple[float, float, int, str]]:
    """Each leaked type against None on ``col``: (p, Bonferroni-corrected p over the leaked types, topics, test)."""
    import pandas as pd

    base = figs.get("none", {}).get(col)
    leaked = [l for l in ("msm", "test") if col in figs.get(l, {})]
    if base is None or not leaked or base.per_topic() is None:
        return {}
    raw = {}
    for l in leaked:
        a, b = figs[l][col].per_topic(), base.per_topic()
        both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
        if base.randomization is not None:
            raw[l] = (paired_randomization(both.a.to_numpy(), both.b.to_numpy(), base.randomization, s.bootstrap,
                                           s.seed), len(both), "randomization")
        else:
            raw[l] = (*paired_t(a, b), "t")
    corrected = dict(zip(leaked, bonferroni([raw[l][0] for l in leaked])))
    return {l: (raw[l][0], corrected[l], raw[l][1], raw[l][2]) for l in leaked}


def robustness_frame(values: pd.DataFrame, s: Robustness.Settings, alpha: float = 0.05,
                     leaking: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """Long table: one row per (corpus, size, model, leakage, column, subset) with the mean over seeds of the
    figure, its standard deviation over seeds, the number of seeds and topics, the percentile bootstrap CI over
    topics (``robustness.bootstrap`` resamples, seeded by ``robustness.seed``; the figure recomputed on every
    resample) and the test against no leakage on the same topics: a paired t-test over per-topic values (as
    ``leakexp.lib.stats.evaluate_corpus``), or for the worst-fraction figures a paired randomization test that
    re-selects each model's own worst topics per permutation; Bonferroni over the leaked types of that model,
    column and subset. ``subset``: all topics, or (with ``leaking``, corpus -> topics with verified leaks) the
    leaked topics and the others."""
    import pandas as pd

    rows = []
    for (corpus, size, model), g in values.groupby(["corpus", "size", "model"], sort=True):
        leaked_q = {str(q) for q in (leaking or {}).get(corpus, [])} if leaking is not None else None
        for subset in (SUBSETS if leaked_q is not None else ("all",)):
            figs = {l: figures(gl, s, leaked_q, subset) for l, gl in g.groupby("leakage")}
            columns = list(dict.fromkeys(c for f in figs.values() for c in f))
            for col in columns:
                tests = _compare(figs, col, s)
                for leakage, fl in figs.items():
                    if col not in fl:
                        continue
                    f = fl[col]
                    with np.errstate(all="ignore"), warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        per_seed = np.asarray(f.statistic(*f.arrays), dtype=float)
                        lo, hi = robustness_stats.bootstrap_ci(f.arrays, f.statistic, s.bootstrap, s.seed)
                    finite = per_seed[np.isfinite(per_seed)]
                    p, pc, n, test = tests.get(leakage, (np.nan, np.nan, 0, ""))
                    rows.append({"corpus": corpus, "size": int(size), "model": model, "leakage": leakage,
                                 "column": col, "subset": subset,
                                 "mean": float(finite.mean()) if finite.size else np.nan,
                                 "std": float(finite.std(ddof=1)) if finite.size > 1 else np.nan,
                                 "seeds": int(finite.size), "topics": len(f.qids),
                                 "ci_low": lo, "ci_high": hi, "bootstrap": s.bootstrap,
                                 "p": p, "p_bonferroni": pc, "paired_topics": n, "test": test,
                                 "significant": bool(pc < alpha) if not np.isnan(pc) else False})
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


LONG_COLUMNS = ["corpus", "size", "model", "leakage", "column", "subset", "mean", "std", "seeds", "topics", "ci_low",
                "ci_high", "bootstrap", "p", "p_bonferroni", "paired_topics", "test", "significant"]


def column_order(s: Robustness.Settings, targets: list[str] = ()) -> list[str]:
    return ([s.measure, "VNAP", "%no", "gMAP"] + [worst_column(f) for f in s.worst]
            + [c for t in targets for c in (f"OOD {t}", f"DR_OOD {t}")]
            + [f"DR {a}" for a in s.query_attacks]
            + [c for k in s.doc_manipulations for c in
               ((["gain stuff", "median gain stuff", "top-10 stuff", "gain stuff (relevant)"] if k == "stuff" else [])
                + [f"TC {k}", f"KT {k}"])])


def _ordered(long: pd.DataFrame, s: Robustness.Settings) -> list[str]:
    targets = sorted({c[4:] for c in long.column if c.startswith("OOD ")})
    known = column_order(s, targets)
    return [c for c in known if c in set(long.column)] + sorted(set(long.column) - set(known))


def _fmt(col: str, v: float) -> str:
    return f"{v:.1f}" if col == "%no" or "gain" in col else f"{v:.3f}"


def wide_table(long: pd.DataFrame, s: Robustness.Settings, models: list[str], subsets: tuple[str, ...] = ("all",)) -> pd.DataFrame:
    """One row per (model, [size,] leakage[, subset]); cells "0.123 [0.101, 0.140]" (mean over seeds, bootstrap CI
    over topics) with † where the test against None is significant; "–" where no value exists."""
    import pandas as pd

    long = long[long.subset.isin(subsets)]
    sizes = sorted(long["size"].unique())
    cols = _ordered(long, s)
    rows = []
    present = [m for m in models if m in set(long.model)] + sorted(set(long.model) - set(models))
    for model in present:
        for size in sizes:
            for leakage in ("none", "msm", "test"):
                for subset in subsets:
                    sub = long[(long.model == model) & (long["size"] == size) & (long.leakage == leakage)
                               & (long.subset == subset)]
                    if sub.empty:
                        continue
                    row = {"Model": _model_label(model)}
                    if len(sizes) > 1:
                        row["Size"] = str(size)
                    row["Leakage"] = LEAKAGE_LABEL.get(leakage, leakage)
                    if len(subsets) > 1:
                        row["Topics"] = {"leaked": "with leaks", "other": "without leaks"}.get(subset, subset)
                    by = sub.set_index("column")
                    for c in cols:
                        if c not in by.index or pd.isna(by.at[c, "mean"]):
                            row[c] = "–"
                            continue
                        text = _fmt(c, by.at[c, "mean"])
                        if not pd.isna(by.at[c, "ci_low"]):
                            text += f" [{_fmt(c, by.at[c, 'ci_low'])}, {_fmt(c, by.at[c, 'ci_high'])}]"
                        row[c] = text + ("†" if by.at[c, "significant"] else "")
                    rows.append(row)
    return pd.DataFrame(rows)


def _model_label(m: str) -> str:
    return MODEL_LABEL.get(m, m)


def brittleness_notes(long: pd.DataFrame, s: Robustness.Settings) -> list[str]:
    """The answer the table gives to "does leakage make a model more brittle?": per leaked type, in how many
    (model, attack) pairs DR_query is lower (a larger drop) than without leakage, and how many significantly;
    the same for the document manipulations' KT."""
    import pandas as pd

    notes = []
    long = long[long.subset == "all"]
    for leakage in ("msm", "test"):
        for prefix, what, worse in (("DR ", "DR_query (query attacks)", "lower"),
                                    ("KT ", "KT (document manipulations)", "higher")):
            lower = sig = total = 0
            for (model, size, col), g in long[long.column.str.startswith(prefix)].groupby(["model", "size", "column"]):
                x = g.set_index("leakage")["mean"]
                if leakage not in x.index or "none" not in x.index or pd.isna(x[leakage]) or pd.isna(x["none"]):
                    continue
                total += 1
                brittle = x[leakage] < x["none"] if worse == "lower" else x[leakage] > x["none"]
                lower += int(brittle)
                sig += int(brittle and bool(g.set_index("leakage").at[leakage, "significant"]))
            if total:
                notes.append(f"{LEAKAGE_LABEL[leakage]} leakage, {what}: {worse} than without leakage (more brittle) "
                             f"in {lower} of {total} (model, {'attack' if prefix == 'DR ' else 'manipulation'}) pairs, "
                             f"significantly in {sig}")
    return notes


def figure(long: pd.DataFrame, s: Robustness.Settings, models: list[str], out: Path, caption: str) -> Path | None:
    """DR_query by leakage type per model: one panel per (corpus, attack), bars None / MSM / Test, error bars
    = standard deviation over seeds. PNG, with the plotted values as CSV."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dr = long[long.column.str.startswith("DR ") & (long.subset == "all")]
    if dr.empty:
        return None
    corpora = list(dict.fromkeys(dr.corpus))
    cols = [c for c in _ordered(dr, s)]
    present = [m for m in models if m in set(dr.model)] + sorted(set(dr.model) - set(models))
    fig, axes = plt.subplots(len(corpora), len(cols), figsize=(3.2 * len(cols) + 0.6, 2.8 * len(corpora)),
                             squeeze=False, sharey=True)
    x = np.arange(len(present))
    width = 0.27
    for r, corpus in enumerate(corpora):
        for c, col in enumerate(cols):
            ax = axes[r][c]
            sub = dr[(dr.corpus == corpus) & (dr.column == col)].groupby(["model", "leakage"])[
                ["mean", "ci_low", "ci_high"]].mean()
            for k, leakage in enumerate(("none", "msm", "test")):
                got = [(m, leakage) in sub.index for m in present]
                vals = [sub.at[(m, leakage), "mean"] if h else np.nan for m, h in zip(present, got)]
                lo = [v - sub.at[(m, leakage), "ci_low"] if h else np.nan for m, h, v in zip(present, got, vals)]
                hi = [sub.at[(m, leakage), "ci_high"] - v if h else np.nan for m, h, v in zip(present, got, vals)]
                ax.bar(x + (k - 1) * width, vals, width, yerr=np.nan_to_num([lo, hi]), label=LEAKAGE_LABEL[leakage])
            ax.axhline(0, color="black", lw=0.6)
            ax.set_xticks(x, [_model_label(m) for m in present], rotation=30, fontsize=7)
            ax.set_title(f"{corpus}: {col[3:]}", fontsize=8)
            if c == 0:
                ax.set_ylabel("DR_query")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "robustness_dr_query.png")
    plt.close(fig)
    atomic_write_text(out / "robustness_dr_query.csv", dr.to_csv(index=False))
    atomic_write_text(out / "robustness_dr_query.md",
                      f"**{caption}**\n\n![DR_query by leakage type](robustness_dr_query.png)\n")
    return out / "robustness_dr_query.png"


def _caption(s: Robustness.Settings, corpus: str, seeds: int, alpha: float, depth: int, values: pd.DataFrame,
             no_relevant: str) -> str:
    first = ("the re-ranker re-scores the original BM25 candidates for the attacked query (BM25 unchanged, as Wu et "
             "al.)" if s.first_stage == "pool" else "BM25 re-run with the attacked query (robustness.first_stage=bm25: "
             "the first stage's brittleness and the re-ranker's together)")
    worst = ", ".join(worst_column(f) for f in s.worst)
    manipulations = {"stuff": f"stuff = the query inserted {s.stuff.repeats} times into one document per topic from "
                              f"first-stage rank {s.stuff.from_rank + 1} down",
                     "noise": f"noise = one internal character edit in {s.noise.rate:.0%} of the words of every "
                              "document"}
    described = "; ".join(manipulations[k] for k in s.doc_manipulations) or "none configured"
    ood = values[(values.corpus == corpus) & (values.kind == "ood")].drop_duplicates(["target", "qid"])
    shared = "; ".join(
        f"{t}: {int(g.shared.astype(bool).sum())} of {len(g)} topics are also topics of {corpus} (same title)"
        for t, g in ood.groupby("target"))
    ood_text = (f"OOD <T> = {s.measure} of the model re-ranking corpus T's BM25 run, on "
                + ("T's topics that " + corpus + " does not have (topic-disjoint: robustness.ood_topics=disjoint)"
                   if s.ood_topics == "disjoint" else "all of T's topics (robustness.ood_topics=all)")
                + f" ({shared or 'no OOD target'}; OOD between corpora that share topics is out of distribution in "
                  "documents, not in queries: TREC Core 2017 reuses Robust04's topics), the primary OOD figure, tested "
                  f"against None; DR_OOD <T> = (OOD - P_own) / P_own (Wu et al. Eq. 11, per target, not pooled), "
                  "given with its CI only: its difference between models mixes the own-corpus gain into the OOD one")
    attacks_text = ", ".join(f"{a} ({'Wu et al.' if wu(a) else 'leakexp'})" for a in s.query_attacks) or "none"
    return (
        f"Robustness on {corpus} (Wu et al., Are Neural Ranking Models Robust?), per model and leakage type: the "
        f"figure (mean over {seeds} seed(s)) with its 95 % percentile bootstrap CI over topics (B = {s.bootstrap} "
        f"resamples, seed {s.seed}). 'Own corpus' is the test corpus the model's training set was built for (Wu et "
        f"al.'s P_I.I.D.; not an i.i.d. split: every model is trained on MS MARCO / ORCAS). Defined by Wu et al.: "
        f"VNAP = variance over topics of AP(q) / MAP (Sec. 3.2, Eqs. 5-6; lower is more robust); %no = percentage "
        f"of topics without a relevant document in the top 10 (Sec. 3.5.1, Eq. 8; lower is more robust); gMAP = "
        f"exp(mean log(AP + eps)) - eps with eps = {s.gmap_epsilon:g} (Eq. 9; higher is more robust); {ood_text}; "
        f"DR <attack> = (P_attacked - P_original) / P_original over the topics the attack changes (Sec. 5.1.2, Eq. 16; "
        f"higher = more robust), attacks: {attacks_text}, first stage: {first}; TC = share of topics whose top "
        f"document changes, KT = normalised Kendall-tau distance before / after the manipulation (Sec. 5.2.2, Eqs. "
        f"20-22; lower = more robust; {described}). leakexp's own: {s.measure} on the own corpus; {worst or 'no'} "
        f"worst-fraction = mean {s.measure} of each model's own worst topics (tested by a paired randomization test "
        f"that re-selects them per permutation, so no regression to the mean); gain stuff / median gain stuff = "
        f"ranks the stuffed document climbs, top-10 stuff = share of stuffed documents reaching the top 10, over "
        f"the stuffing targets not judged relevant (relevant targets apart: gain stuff (relevant)). {s.measure} on "
        f"the {depth} re-ranked documents; topics without a relevant judgment "
        f"{'left out' if no_relevant == 'skip' else 'counted as 0'} (evaluate.no_relevant={no_relevant}), as in "
        f"every table. Attack seed {s.seed}. † = Bonferroni-corrected (over the leaked types) significant difference "
        f"to None on the same topics (paired Student's t-test over per-topic values; randomization test for the "
        f"worst fractions; p < {alpha}); VNAP, median gain and DR_OOD have no per-topic value and no test."
    )


def _done(runner, ask) -> Path | None:
    """The artifact of ``ask`` if it is finished and intact, else None (computes nothing)."""
    state, path, _ = runner.state(ask)
    return path if state == "done" else None


def write_robustness_tables(settings: Settings, runner, out_dir: Path, cells: list[Cell]) -> list[Path]:
    """The robustness table of every corpus (``robustness_<corpus>.{md,tex,csv}``), the DR_query figure, all
    per-topic values (``robustness_perquery.csv``) and the attacked queries and stuffed documents for reading
    (``robustness_queries_<corpus>.tsv``, ``robustness_documents_<corpus>.tsv``), from the stored artifacts
    only. ``runner`` is the config's :class:`leakexp.runner.pipeline.Runner`; only its ``state`` is used. Returns the
    files written; empty when no robustness artifact of ``cells`` is stored."""
    import pandas as pd

    s = robustness_settings(settings)
    out_dir = Path(out_dir)
    values, states = stored_values(settings, runner, cells)
    if values.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    alpha = settings.evaluate.alpha
    leaking = stored_leaking_topics(runner) or None
    long = robustness_frame(values, s, alpha, leaking)
    models = list(settings.grid.models)
    written = [atomic_write_text(out_dir / "robustness_perquery.csv", values.to_csv(index=False))]
    for corpus in dict.fromkeys(c.corpus for c in cells):
        sub = long[long.corpus == corpus]
        if sub.empty:
            continue
        seeds = int(values[values.corpus == corpus].groupby(["leakage", "size", "model"]).seed.nunique().max())
        notes = brittleness_notes(sub, s)
        caption = _caption(s, corpus, seeds, alpha, settings.rerank.depth, values, settings.evaluate.no_relevant)
        split = (sub.subset != "all").any()
        if split:
            own = sub[(sub.subset != "all") & (sub.column == s.measure)]  # own-corpus topics, not OOD ones
            counts = own.groupby("subset").topics.max().to_dict()
            caption += (f" The same figures on the topics with verified leaks ({counts.get('leaked', 0)}) and the others "
                        f"({counts.get('other', 0)}): robustness_{corpus}_leaked_vs_other.md.")
        else:
            caption += " No verified leaks are stored (verify stage), so there is no leaked / other split."
        caption += " Does leakage make a model more brittle? " + (
            "; ".join(notes) + "." if notes else "no leaked model to compare.")
        caption += recipe_note(settings, models) + core_test_leak_note(settings, [corpus])
        caption += incomplete_note(states, corpus)
        wide = wide_table(sub, s, models)
        name = f"robustness_{corpus}"
        note_text = "\n".join(f"- {n}" for n in notes) or "- no leaked model to compare"
        written.append(atomic_write_text(out_dir / f"{name}.md", f"**{caption}**\n\n{markdown_table(wide)}\n"
                                         f"Does leakage make a model more brittle?\n{note_text}\n"))
        written.append(atomic_write_text(out_dir / f"{name}.tex", latex_table(wide, caption)))
        written.append(atomic_write_text(out_dir / f"{name}.csv", sub.to_csv(index=False)))
        if split:
            table = wide_table(sub, s, models, subsets=("leaked", "other"))
            written.append(atomic_write_text(
                out_dir / f"{name}_leaked_vs_other.md",
                f"**Robustness on {corpus}, on the topics with verified leaks ({counts.get('leaked', 0)}) and the "
                f"others ({counts.get('other', 0)}): does leakage change robustness where it leaked? Figures, CIs and "
                f"tests as in robustness_{corpus}.md, each on its own topics.**\n\n{markdown_table(table)}\n"))
        queries = []
        for attack in s.query_attacks:
            path = _done(runner, queries_ask(settings, corpus, attack))
            if path is not None:
                queries.append(pd.read_parquet(path / "attacks.parquet").assign(attack=attack))
        if queries:
            written.append(atomic_write_text(out_dir / f"robustness_queries_{corpus}.tsv",
                                             pd.concat(queries).to_csv(sep="\t", index=False)))
        if "stuff" in s.doc_manipulations:
            path = _done(runner, docs_ask(corpus, "stuff"))
            if path is not None:
                written.append(atomic_write_text(out_dir / f"robustness_documents_{corpus}.tsv",
                                                 (path / "documents.tsv").read_text()))
    fig = figure(long, s, models, out_dir,
                 f"DR_query by leakage type per model (data={settings.data.name}; attack seed {s.seed}; first stage: "
                 f"{'BM25 re-run with the attacked query' if s.first_stage == 'bm25' else 'original BM25 pool'}); "
                 f"bars: mean over seeds, error bars: 95 % bootstrap CI over topics (B = {s.bootstrap}). Higher "
                 f"(closer to 0) is more robust." + incomplete_note(states))
    if fig is not None:
        written.append(fig)
    return written
