"""The robustness tables (``robustness_<corpus>.{md,tex,csv}``) and the DR_query figure of ``leakexp.robustness``
(Wu et al.), written from the finished robustness artifacts only: nothing is computed here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from leakexp.cell import Cell
from leakexp.report import LEAKAGE_LABEL, MODEL_LABEL, incomplete_note, latex_table, markdown_table
from leakexp.robustness import (Settings, docs_ask, drop_contributions, drop_rate, queries_ask, settings,
                                stored_values, vnap, worst_queries)
from leakexp.stats import bonferroni, paired_t
from leakexp.store import atomic_write_text


def _per_seed_and_topic(values: pd.DataFrame, s: Settings) -> tuple[dict, dict]:
    """For one (corpus, size, model, leakage): {column: [value per seed]} and {column: per-topic Series (seed
    mean)} for the columns that have per-topic values."""
    per_seed: dict[str, list[float]] = {}
    per_topic: dict[str, list[pd.Series]] = {}  # one Series (qid -> value) per seed
    iid = values[values.kind == "iid"]

    def add(col: str, seed_value: float, topic: pd.Series | None = None) -> None:
        per_seed.setdefault(col, []).append(seed_value)
        if topic is not None:
            per_topic.setdefault(col, []).append(topic)

    for seed in sorted(values.seed.unique()):
        v = values[values.seed == seed]
        i = iid[iid.seed == seed]
        eff = i[i.measure == s.measure].set_index("qid").value
        ap = i[i.measure == "AP"].value
        if len(eff):
            add(s.measure, float(eff.mean()), eff)
            add("VNAP", vnap(ap))
        ood = v[v.kind == "ood"]
        if len(ood) and len(eff):
            p_iid = float(eff.mean())
            add("DR_OOD", drop_rate(float(ood.value.mean()), p_iid),
                drop_contributions(ood.set_index(ood.target + "/" + ood.qid).value, p_iid))
        for part, q in v[v.kind == "query"].groupby("part"):
            q = q[q.applied.astype(bool)].set_index("qid")
            add(f"DR {part}", drop_rate(float(q.value.mean()), float(q.original.mean())) if len(q) else np.nan,
                drop_contributions(q.value, q.original) if len(q) else None)
        for part, d in v[v.kind == "doc"].groupby("part"):
            for m in ("TC", "KT"):
                x = d[d.measure == m].set_index("qid").value
                add(f"{m} {part[4:]}", float(x.mean()), x)
    topic_means = {c: pd.concat(ts, axis=1).mean(axis=1) for c, ts in per_topic.items()}
    return per_seed, topic_means


def robustness_frame(values: pd.DataFrame, s: Settings, alpha: float = 0.05) -> pd.DataFrame:
    """Long table: one row per (corpus, size, model, leakage, column) with the mean and standard deviation over
    seeds, the number of seeds and topics, and the paired t-test against no leakage (Bonferroni over the
    leaked types of that model and column, as ``leakexp.stats.evaluate_corpus`` corrects)."""
    rows = []
    for (corpus, size, model), g in values.groupby(["corpus", "size", "model"], sort=True):
        stats_by_leak = {l: _per_seed_and_topic(gl, s) for l, gl in g.groupby("leakage")}
        # worst topics: the no-leakage model's bottom fraction by the measure (mean over its seeds)
        none_iid = g[(g.leakage == "none") & (g.kind == "iid") & (g.measure == s.measure)]
        none_topic = none_iid.groupby("qid").value.mean()
        for frac in s.worst:
            col = f"worst {round(frac * 100):g}%"
            worst = set(worst_queries(none_topic, frac)) if len(none_topic) else set()
            for leakage, gl in g.groupby("leakage"):
                eff = gl[(gl.kind == "iid") & (gl.measure == s.measure) & gl.qid.isin(worst)]
                if eff.empty:
                    continue
                per_seed = eff.groupby("seed").value.mean().tolist()
                stats_by_leak[leakage][0][col] = per_seed
                stats_by_leak[leakage][1][col] = eff.groupby("qid").value.mean()
        columns = list(dict.fromkeys(c for st in stats_by_leak.values() for c in st[0]))
        for col in columns:
            tests = {}
            base = stats_by_leak.get("none", ({}, {}))[1].get(col)
            leaked = [l for l in ("msm", "test") if l in stats_by_leak and col in stats_by_leak[l][1]]
            if base is not None and leaked:
                raw = {l: paired_t(stats_by_leak[l][1][col], base) for l in leaked}
                corrected = dict(zip(leaked, bonferroni([raw[l][0] for l in leaked])))
                tests = {l: (raw[l][0], corrected[l], raw[l][1]) for l in leaked}
            for leakage, (per_seed, per_topic) in stats_by_leak.items():
                if col not in per_seed:
                    continue
                vals = np.asarray(per_seed[col], dtype=float)
                p, pc, n = tests.get(leakage, (np.nan, np.nan, 0))
                rows.append({"corpus": corpus, "size": int(size), "model": model, "leakage": leakage, "column": col,
                             "mean": float(np.nanmean(vals)) if np.isfinite(vals).any() else np.nan,
                             "std": float(np.nanstd(vals, ddof=1)) if np.isfinite(vals).sum() > 1 else np.nan,
                             "seeds": int(np.isfinite(vals).sum()),
                             "topics": int(per_topic[col].notna().sum()) if col in per_topic else np.nan,
                             "p": p, "p_bonferroni": pc, "paired_topics": n,
                             "significant": bool(pc < alpha) if not np.isnan(pc) else False})
    return pd.DataFrame(rows, columns=["corpus", "size", "model", "leakage", "column", "mean", "std", "seeds",
                                       "topics", "p", "p_bonferroni", "paired_topics", "significant"])


def column_order(s: Settings) -> list[str]:
    return ([s.measure, "VNAP"] + [f"worst {round(f * 100):g}%" for f in s.worst] + ["DR_OOD"]
            + [f"DR {a}" for a in s.query_attacks]
            + [f"{m} {k}" for k in s.doc_manipulations for m in ("TC", "KT")])


def wide_table(long: pd.DataFrame, s: Settings, models: list[str]) -> pd.DataFrame:
    """One row per (model, [size,] leakage); cells "0.123" with † where the paired test against None is
    significant; "–" where no value exists."""
    sizes = sorted(long["size"].unique())
    cols = [c for c in column_order(s) if c in set(long.column)]
    rows = []
    present = [m for m in models if m in set(long.model)] + sorted(set(long.model) - set(models))
    for model in present:
        for size in sizes:
            for leakage in ("none", "msm", "test"):
                sub = long[(long.model == model) & (long["size"] == size) & (long.leakage == leakage)]
                if sub.empty:
                    continue
                row = {"Model": _model_label(model)}
                if len(sizes) > 1:
                    row["Size"] = str(size)
                row["Leakage"] = LEAKAGE_LABEL.get(leakage, leakage)
                by = sub.set_index("column")
                for c in cols:
                    if c not in by.index or pd.isna(by.at[c, "mean"]):
                        row[c] = "–"
                        continue
                    text = f"{by.at[c, 'mean']:.3f}"
                    if not pd.isna(by.at[c, "std"]):
                        text += f" ± {by.at[c, 'std']:.3f}"
                    row[c] = text + ("†" if by.at[c, "significant"] else "")
                rows.append(row)
    return pd.DataFrame(rows)


def _model_label(m: str) -> str:
    return MODEL_LABEL.get(m, m)


def brittleness_notes(long: pd.DataFrame, s: Settings) -> list[str]:
    """The answer the table gives to "does leakage make a model more brittle?": per leaked type, in how many
    (model, attack) pairs DR_query is lower (a larger drop) than without leakage, and how many significantly;
    the same for the document manipulations' KT."""
    notes = []
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


def figure(long: pd.DataFrame, s: Settings, models: list[str], out: Path, caption: str) -> Path | None:
    """DR_query by leakage type per model: one panel per (corpus, attack), bars None / MSM / Test, error bars
    = standard deviation over seeds. PNG, with the plotted values as CSV."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dr = long[long.column.str.startswith("DR ") & (long.column != "DR_OOD")]
    if dr.empty:
        return None
    corpora = list(dict.fromkeys(dr.corpus))
    cols = [c for c in column_order(s) if c in set(dr.column)]
    present = [m for m in models if m in set(dr.model)] + sorted(set(dr.model) - set(models))
    fig, axes = plt.subplots(len(corpora), len(cols), figsize=(3.2 * len(cols) + 0.6, 2.8 * len(corpora)),
                             squeeze=False, sharey=True)
    x = np.arange(len(present))
    width = 0.27
    for r, corpus in enumerate(corpora):
        for c, col in enumerate(cols):
            ax = axes[r][c]
            sub = dr[(dr.corpus == corpus) & (dr.column == col)].groupby(["model", "leakage"])[["mean", "std"]].mean()
            for k, leakage in enumerate(("none", "msm", "test")):
                vals = [sub.at[(m, leakage), "mean"] if (m, leakage) in sub.index else np.nan for m in present]
                errs = [sub.at[(m, leakage), "std"] if (m, leakage) in sub.index else np.nan for m in present]
                ax.bar(x + (k - 1) * width, vals, width, yerr=np.nan_to_num(errs), label=LEAKAGE_LABEL[leakage])
            ax.axhline(0, color="black", lw=0.6)
            ax.set_xticks(x, [_model_label(m) for m in present], rotation=30, fontsize=7)
            ax.set_title(f"{corpus}: {col[3:]}", fontsize=8)
            if c == 0:
                ax.set_ylabel("DR_query")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    tmp = out / ".robustness_dr_query.tmp.png"
    fig.savefig(tmp, dpi=150)
    plt.close(fig)
    tmp.replace(out / "robustness_dr_query.png")
    atomic_write_text(out / "robustness_dr_query.csv", dr.to_csv(index=False))
    atomic_write_text(out / "robustness_dr_query.md",
                      f"**{caption}**\n\n![DR_query by leakage type](robustness_dr_query.png)\n")
    return out / "robustness_dr_query.png"


def _caption(s: Settings, corpus: str, seeds: int, alpha: float, depth: int) -> str:
    first = ("BM25 re-run with the attacked query (a user's typo reaches the whole system)" if s.first_stage == "bm25"
             else "the re-ranker re-scores the original BM25 pool for the attacked query (BM25 unchanged)")
    worst = ", ".join(f"worst {round(f * 100):g}%" for f in s.worst)
    manipulations = {"stuff": f"stuff = the query inserted {s.stuff_repeats} times into one document per topic from "
                              f"first-stage rank {s.stuff_from_rank + 1} down",
                     "noise": f"noise = one internal character edit in {s.noise_rate:.0%} of the words of every "
                              "document"}
    described = "; ".join(manipulations[k] for k in s.doc_manipulations) or "none configured"
    ood = ", ".join(c for c in s.ood if c != corpus) if s.ood is not None else "the grid's other corpora"
    return (
        f"Robustness on {corpus} (Wu et al., Are Neural Ranking Models Robust?): per model and leakage type, mean "
        f"± standard deviation over {seeds} seed(s). {s.measure} on the {depth} re-ranked documents; VNAP = variance "
        f"over topics of AP(q) / MAP (Sec. 3.2; lower is more robust); {worst} = mean {s.measure} of the topics "
        f"worst for the model trained without leakage (Sec. 3.5); DR_OOD = (P_OOD - P_IID) / P_IID, the model "
        f"re-ranking the BM25 runs of {ood} (Sec. 4.2; topics pooled); DR <attack> = (P_attacked - P_original) / P_original "
        f"over the topics the attack changes (Sec. 5.1; higher = more robust), first stage: {first}; TC = share of "
        f"topics whose top document changes, KT = normalised Kendall-tau distance of the rankings before and after "
        f"the document manipulation (Sec. 5.2; lower = more robust; {described}). Attack seed {s.seed}. "
        f"† = Bonferroni-corrected "
        f"significant difference to None (paired Student's t-test over per-topic values, p < {alpha}); VNAP has no "
        f"per-topic value and no test."
    )


def _done(runner, ask) -> Path | None:
    """The artifact of ``ask`` if it is finished and intact, else None (computes nothing)."""
    state, path, _ = runner.state(ask)
    return path if state == "done" else None


def write_tables(cfg: DictConfig, runner, out_dir: Path, cells: list[Cell]) -> list[Path]:
    """The robustness table of every corpus (``robustness_<corpus>.{md,tex,csv}``), the DR_query figure, all
    per-topic values (``robustness_perquery.csv``) and the attacked queries and stuffed documents for reading
    (``robustness_queries_<corpus>.tsv``, ``robustness_documents_<corpus>.tsv``), from the stored artifacts
    only. ``runner`` is the config's :class:`leakexp.pipeline.Runner`; only its ``state`` is used. Returns the
    files written; empty when no robustness artifact of ``cells`` is stored."""
    s = settings(cfg)
    out_dir = Path(out_dir)
    values, states = stored_values(cfg, runner, cells)
    if values.empty:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    alpha = float(cfg.evaluate.get("alpha", 0.05))
    long = robustness_frame(values, s, alpha)
    models = list(cfg.grid.models)
    written = [atomic_write_text(out_dir / "robustness_perquery.csv", values.to_csv(index=False))]
    for corpus in dict.fromkeys(c.corpus for c in cells):
        sub = long[long.corpus == corpus]
        if sub.empty:
            continue
        seeds = int(values[values.corpus == corpus].groupby(["leakage", "size", "model"]).seed.nunique().max())
        notes = brittleness_notes(sub, s)
        caption = _caption(s, corpus, seeds, alpha, int(cfg.rerank.depth))
        caption += " Does leakage make a model more brittle? " + (
            "; ".join(notes) + "." if notes else "no leaked model to compare.")
        caption += incomplete_note(states, corpus)
        wide = wide_table(sub, s, models)
        name = f"robustness_{corpus}"
        note_text = "\n".join(f"- {n}" for n in notes) or "- no leaked model to compare"
        written.append(atomic_write_text(out_dir / f"{name}.md", f"**{caption}**\n\n{markdown_table(wide)}\n"
                                         f"Does leakage make a model more brittle?\n{note_text}\n"))
        written.append(atomic_write_text(out_dir / f"{name}.tex", latex_table(wide, caption)))
        written.append(atomic_write_text(out_dir / f"{name}.csv", sub.to_csv(index=False)))
        queries = []
        for attack in s.query_attacks:
            path = _done(runner, queries_ask(cfg, corpus, attack))
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
                 f"DR_query by leakage type per model (data={cfg.data.name}; attack seed {s.seed}; first stage: "
                 f"{'BM25 re-run with the attacked query' if s.first_stage == 'bm25' else 'original BM25 pool'}); "
                 f"bars: mean over seeds, error bars: standard deviation over seeds. Higher (closer to 0) is more "
                 f"robust." + incomplete_note(states))
    if fig is not None:
        written.append(fig)
    return written
