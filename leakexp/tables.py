"""Regenerate the paper's result tables and Figure 2 from the store alone (no training, no re-ranking).

- ``table3``–``table5`` (one per corpus of the grid): five-fold cross-validated nDCG@10, MFR and P@1 per model
  with no / MSM / test leakage; best per column in bold, † = Bonferroni-corrected significant difference to
  no leakage (paired Student's t-test), model-order swaps induced by MSM leakage in red and listed below;
- ``figure2``: monoT5's nDCG@10 on the topics with leakage against training-set size;
- ``summary`` (mean per size, all leakage types) and ``detail`` (mean and standard deviation over seeds).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from leakexp.evaluate import LOWER_IS_BETTER, mfr_caption
from leakexp.pipeline import grid_cells, stored_results
from leakexp.report import latex_escape, markdown_table, summary, write_table
from leakexp.stats import evaluate_corpus, order_swaps, seed_average
from leakexp.store import Store, atomic_write_text

TABLE_MEASURES = ("nDCG@10", "MFR", "P@1")
LEAKAGE_LABEL = {"none": "None", "msm": "MSM", "test": "Test"}
MODEL_LABEL = {"duet": "Duet", "knrm": "KNRM", "monobert": "monoBERT", "monot5": "monoT5", "pacrr": "PACRR"}
CORPUS_LABEL = {"robust04": "Robust04", "core17": "Common Core 2017", "core18": "Common Core 2018"}


def tables_dir(cfg: DictConfig) -> Path:
    return Store(cfg.store).path("tables", cfg.data.name)


def _fmt(v: float) -> str:
    return "–" if v is None or np.isnan(v) else f"{v:.3f}"


def cv_table(summary_rows: pd.DataFrame, models: list[str]) -> tuple[pd.DataFrame, dict, list[str]]:
    """Cells of one corpus table: (frame of formatted strings for Markdown, marks for LaTeX, swap notes)."""
    s = summary_rows.set_index(["model", "measure", "leakage"])
    present = [m for m in models if m in s.index.get_level_values(0)]
    cells: dict[tuple[str, str, str], dict] = {}
    notes = []
    for measure in TABLE_MEASURES:
        lower = measure in LOWER_IS_BETTER
        for leakage in ("none", "msm", "test"):
            col = {m: s.loc[(m, measure, leakage), "mean"] if (m, measure, leakage) in s.index else np.nan for m in present}
            valid = {m: v for m, v in col.items() if not np.isnan(v)}
            best = (min if lower else max)(valid.values()) if valid else None
            for m, v in col.items():
                sig = bool(s.loc[(m, measure, leakage), "significant"]) if (m, measure, leakage) in s.index else False
                cells[(m, measure, leakage)] = {"value": v, "bold": best is not None and v == best,
                                                "dagger": sig and leakage != "none", "red": False}
        means = {m: {l: cells[(m, measure, l)]["value"] for l in ("none", "msm")} for m in present}
        for gainer, overtaken in order_swaps(means, lower_better=lower):
            cells[(gainer, measure, "msm")]["red"] = True
            notes.append(f"{measure}: {MODEL_LABEL.get(gainer, gainer)} with MSM leakage "
                         f"({_fmt(means[gainer]['msm'])}) overtakes {MODEL_LABEL.get(overtaken, overtaken)} without "
                         f"leakage ({_fmt(means[overtaken]['none'])}), which is ahead of "
                         f"{MODEL_LABEL.get(gainer, gainer)} without leakage ({_fmt(means[gainer]['none'])})")
    rows = []
    for m in present:
        row = {"Model": MODEL_LABEL.get(m, m)}
        for measure in TABLE_MEASURES:
            for leakage in ("none", "msm", "test"):
                c = cells[(m, measure, leakage)]
                text = _fmt(c["value"]) + ("†" if c["dagger"] else "")
                if c["bold"]:
                    text = f"**{text}**"
                if c["red"]:
                    text = f'<span style="color:red">{text}</span>'
                row[f"{measure} {LEAKAGE_LABEL[leakage]}"] = text
        rows.append(row)
    return pd.DataFrame(rows), {"cells": cells, "models": present}, notes


def cv_latex(marks: dict, caption: str, label: str) -> str:
    """A booktabs table with bold, \\dagger and \\textcolor{red} (needs booktabs and xcolor)."""
    lines = [r"\begin{table}", r"\centering", rf"\caption{{{latex_escape(caption)}}}", rf"\label{{{label}}}",
             r"\begin{tabular}{l" + "rrr" * len(TABLE_MEASURES) + "}", r"\toprule",
             "Model & " + " & ".join(rf"\multicolumn{{3}}{{c}}{{{latex_escape(m)}}}" for m in TABLE_MEASURES) + r" \\",
             " ".join(rf"\cmidrule(lr){{{2 + 3 * i}-{4 + 3 * i}}}" for i in range(len(TABLE_MEASURES))),
             " & " + " & ".join(["None & MSM & Test"] * len(TABLE_MEASURES)) + r" \\", r"\midrule"]
    for m in marks["models"]:
        cells = []
        for measure in TABLE_MEASURES:
            for leakage in ("none", "msm", "test"):
                c = marks["cells"][(m, measure, leakage)]
                text = _fmt(c["value"]).replace("–", "--") + (r"$^\dagger$" if c["dagger"] else "")
                if c["bold"]:
                    text = rf"\textbf{{{text}}}"
                if c["red"]:
                    text = rf"\textcolor{{red}}{{{text}}}"
                cells.append(text)
        lines.append(f"{MODEL_LABEL.get(m, m)} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def leaking_topics(cfg: DictConfig) -> dict[str, list[str]]:
    """Topics with verified leaks per corpus, from the verify artifact (empty if it is not in the store)."""
    from leakexp.pipeline import Pipeline

    try:
        path = Pipeline(cfg).verify_path() / "leaking_topics.json"
    except Exception:
        return {}
    return json.loads(path.read_text()) if path.exists() else {}


def figure2(results: pd.DataFrame, leaking: dict[str, list[str]], model: str, out: Path, caption: str) -> Path | None:
    """nDCG@10 of ``model`` on the topics with leakage vs. training-set size; one panel per corpus."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = results[(results.model == model) & (results.measure == "nDCG@10")]
    corpora = [c for c in dict.fromkeys(r.corpus) if leaking.get(c)]
    if not corpora:
        return None
    fig, axes = plt.subplots(1, len(corpora), figsize=(4.2 * len(corpora), 3.2), squeeze=False, sharey=True)
    rows = []
    for ax, corpus in zip(axes[0], corpora):
        sub = r[(r.corpus == corpus) & r.qid.isin(set(leaking[corpus]))]
        per_seed = sub.groupby(["leakage", "size", "seed"]).value.mean().reset_index()
        for leakage, style in (("none", "-o"), ("msm", "-s"), ("test", "-^")):
            g = per_seed[per_seed.leakage == leakage].groupby("size").value
            if g.ngroups == 0:
                continue
            mean, lo, hi = g.mean(), g.min(), g.max()
            ax.plot(mean.index, mean.values, style, label=LEAKAGE_LABEL[leakage], ms=4)
            ax.fill_between(mean.index, lo.values, hi.values, alpha=0.2)
            rows += [{"corpus": corpus, "leakage": leakage, "size": int(s), "mean": float(mean[s]),
                      "min": float(lo[s]), "max": float(hi[s]), "topics": len(leaking[corpus])} for s in mean.index]
        ax.set_xscale("log")
        sizes = sorted(per_seed["size"].unique())
        ax.set_xticks(sizes, [f"{s // 1000}k" if s % 1000 == 0 else str(s) for s in sizes], fontsize=8)
        ax.minorticks_off()
        ax.set_title(f"{CORPUS_LABEL.get(corpus, corpus)} ({len(leaking[corpus])} topics)", fontsize=9)
        ax.set_xlabel("training instances")
    axes[0][0].set_ylabel(f"nDCG@10 ({MODEL_LABEL.get(model, model)})")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        tmp = out / f".figure2.tmp.{ext}"
        fig.savefig(tmp, dpi=150)
        tmp.replace(out / f"figure2.{ext}")
    plt.close(fig)
    atomic_write_text(out / "figure2.csv", pd.DataFrame(rows).to_csv(index=False))
    atomic_write_text(out / "figure2.md", f"**{caption}**\n\n![Figure 2](figure2.png)\n\n" + markdown_table(pd.DataFrame(rows)))
    return out / "figure2.png"


def detail(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each cell's topic-averaged values."""
    per_seed = results.groupby(["corpus", "model", "leakage", "size", "measure", "seed"]).value.mean().reset_index()
    d = per_seed.groupby(["corpus", "model", "leakage", "size", "measure"]).value.agg(["mean", "std", "count"])
    return d.reset_index().rename(columns={"count": "seeds"})


def write_tables(cfg: DictConfig) -> Path:
    """Write every table the stored results support and return the folder."""
    store = Store(cfg.store)
    results = stored_results(store, grid_cells(cfg))
    out = tables_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    if len(results) == 0:
        return out
    e = cfg.evaluate
    selection = e.get("cv_selection", "best")
    mfr = mfr_caption(e.mfr_missing, int(cfg.rerank.depth))
    seeds = sorted(results.seed.unique())
    write_table(summary(results), out, "summary",
                f"Mean effectiveness per corpus, model and training-set size (data={cfg.data.name}); columns are "
                f"measure x leakage type, averaged over topics and over {len(seeds)} seed(s). {mfr}; lower MFR is better.")
    write_table(detail(results), out, "detail",
                f"Mean and standard deviation over {len(seeds)} seed(s) of each cell's topic-averaged value "
                f"(data={cfg.data.name}). {mfr}.")
    atomic_write_text(out / "perquery.csv", results.to_csv(index=False))

    avg = seed_average(results)
    models = [m for m in cfg.grid.models]
    all_rows, all_sizes = [], []
    for number, corpus in enumerate(dict.fromkeys(cfg.grid.corpora), start=3):
        if corpus not in set(avg.corpus):
            continue
        rows, sizes = evaluate_corpus(avg, corpus, list(TABLE_MEASURES), n_folds=int(e.get("folds", 5)),
                                      fold_seed=int(e.get("fold_seed", 0)), selection=selection,
                                      alpha=float(e.get("alpha", 0.05)))
        all_rows.append(rows)
        all_sizes.append(sizes)
        n_topics = avg[avg.corpus == corpus].qid.nunique()
        name = CORPUS_LABEL.get(corpus, corpus)
        caption = (
            f"Table {number}. Effectiveness on {name} (data={cfg.data.name}, {n_topics} topics, {len(seeds)} seed(s) "
            f"averaged per topic) as nDCG@10, MFR (mean first rank of a relevant document; lower is better) and P@1 "
            f"in five-fold cross-validation over training-set sizes (size chosen per fold: "
            f"{'best on the training folds' if selection == 'best' else 'largest leakage effect on the training folds (None: best)'}). "
            f"Models trained with no leakage (None), MS MARCO / ORCAS leakage (MSM) or test leakage (Test). Highest "
            f"scores in bold; † marks Bonferroni-corrected significant differences to None (paired Student's t-test, "
            f"p < {e.get('alpha', 0.05)}); model order swaps induced by MSM leakage in red. {mfr}."
        )
        table, marks, notes = cv_table(rows, models)
        stem = f"table{number}"
        note_text = "\n".join(f"- {n}" for n in notes) if notes else "- none"
        atomic_write_text(out / f"{stem}.md", f"**{caption}**\n\n{markdown_table(table)}\nModel order swaps induced by MSM leakage:\n{note_text}\n")
        atomic_write_text(out / f"{stem}.tex", cv_latex(marks, caption, f"tab:{corpus}"))
        atomic_write_text(out / f"{stem}.csv", rows.to_csv(index=False))
    if all_rows:
        atomic_write_text(out / "cv_sizes.csv", pd.concat(all_sizes).to_csv(index=False))

    leaking = leaking_topics(cfg)
    model = cfg.get("report", {}).get("figure_model", "monot5")
    if model not in set(results.model):
        model = models[0]
    figure2(results, leaking, model, out,
            f"Figure 2. Effectiveness of {MODEL_LABEL.get(model, model)} as nDCG@10 on the topics with leakage "
            f"(data={cfg.data.name}), against training-set size; mean over {len(seeds)} seed(s), band = min-max over "
            f"seeds. No leakage (None), MS MARCO / ORCAS leakage (MSM), test leakage (Test).")
    return out


def write_table1(cfg: DictConfig, pipeline) -> Path:
    """Table 1 from the candidate table (computing detection if the store lacks it)."""
    from leakexp.detect import table1, table1_wide
    from leakexp.report import write_table as write

    cands = pipeline.candidates()
    corpora = {c: list(pipeline.collection(c).topics) for c in pipeline.corpora}
    wide = table1_wide(table1(cands, corpora, float(cfg.detect.threshold)))
    caption = (f"Table 1. Topics (T) and training queries (Q) with a Sentence-BERT similarity > {cfg.detect.threshold} "
               f"to a searched topic field, for MS MARCO (MSM) and MS MARCO + ORCAS (+ORC); fields searched: "
               f"{', '.join(cfg.detect.fields)}"
               f"{'' if 'variant' in cfg.detect.fields else ' (query variants not searched: their row is empty)'}; "
               f"data={cfg.data.name}, model={cfg.detect.sbert}, top-{cfg.detect.k} exact neighbours per field.")
    out = tables_dir(cfg)
    write(wide, out, "table1", caption)
    return out / "table1.md"


def write_table2(cfg: DictConfig, pipeline) -> Path:
    """Table 2 (a) and (b) from the verify artifact's annotations."""
    from leakexp.report import write_table as write
    from leakexp.verify import table2

    ann = pipeline.annotations()
    a, b = table2(ann, {c: list(pipeline.collection(c).topics) for c in pipeline.corpora})
    out = tables_dir(cfg)
    source = "the toy world's ground truth" if cfg.verify.annotations == "truth" else "the annotation files"
    write(a, out, "table2a", f"Table 2 (a). Reviewed leakage candidates (top-{cfg.verify.review_top_k} per topic above "
          f"{cfg.detect.threshold}) judged by {source}: true and false candidates as queries and topics per corpus.")
    write(b, out, "table2b", "Table 2 (b). Annotated query reformulation types (queries; all corpora and per corpus).")
    return out / "table2a.md"
