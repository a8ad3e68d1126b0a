"""Regenerate the paper's result tables and Figure 2 from the store alone (no training, no re-ranking).

- ``table3``–``table5`` (one per corpus of the grid): five-fold cross-validated nDCG@10, MFR and P@1 per model
  with no / MSM / test leakage; best per column in bold, † = Bonferroni-corrected significant difference to
  no leakage (paired Student's t-test), model-order swaps induced by MSM leakage in red and listed below;
- ``figure2``: monoT5's nDCG@10 on the topics with leakage against training-set size;
- ``summary`` (mean per size, all leakage types) and ``detail`` (mean and standard deviation over seeds).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

from leakexp.lib.decisions import MEAN_DECIMALS, SIMILARITY_DECIMALS, SIMILARITY_STEP, rounded
from leakexp.lib.measures import LOWER_IS_BETTER, mfr_caption, no_relevant_note
from leakexp.models import MODEL_LABEL
from leakexp.lib.report import (CORPUS_LABEL, LEAKAGE_LABEL, TABLE_MEASURES, incomplete_note, latex_escape,
                                markdown_table, save_figure, seed_spread, summary, write_table, write_table as write)
from leakexp.lib.stats import evaluate_corpus, order_swaps, seed_average
from leakexp.runner.schema import Settings
from leakexp.runner.stage import Ask
from leakexp.runner.store import Store, atomic_write_text, config_hash
from leakexp.stages.cell import grid_cells
from leakexp.lib.candidates import leak_pairs, near_threshold, table1, table1_wide
from leakexp.stages.firststage import first_stage_caption
from leakexp.stages.robustness.family import robustness_cells
from leakexp.grid.work import grid_asks, stored_results
from leakexp.runner.registry import compose, runner as make_runner
from leakexp.tables.captions import core_test_leak_note
from leakexp.lib.trainer import read_history
from leakexp.tables.captions import recipe_note
from leakexp.stages.verify import stored_leaking_topics
from leakexp.toolkit.annotations import table2
from leakexp.tables import memorization as memorization_tables, robustness as robustness_tables
from leakexp.toolkit.split_eval import split_eval

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


def table_number(corpus: str, position: int) -> int:
    """The paper's number of a corpus's effectiveness table: 3 Robust04, 4 Core 2017, 5 Core 2018 (toy
    counterparts alike); other corpora by their position in the grid."""
    for key, number in (("robust", 3), ("core17", 4), ("core18", 5)):
        if key in corpus:
            return number
    return position


def tables_dir(s: Settings) -> Path:
    """The data's tables folder in the store: ``<store>/tables/<data.name>``."""
    return Store(s.run.store).path("tables", s.data.name)


# the settings that change the tables alone (experiments/README.md lists them): no stage reads them, so the tables of
# any of their values come from the same stored artifacts (tests/test_table_variants.py: none re-keys an artifact)
TABLE_SETTINGS = ("evaluate.mfr", "evaluate.mfr_missing", "evaluate.cv_selection", "evaluate.folds",
                  "evaluate.fold_seed", "evaluate.alpha", "report.figure_model", "memorization.sizes",
                  "memorization.cv_measure", "memorization.enabled")


def _leaf(s: Settings, dotted: str):
    node = s.values
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _text(value) -> str:
    """A setting's value in a folder name: lists joined by '+', booleans as YAML writes them, nothing a shell
    or a file system minds."""
    if isinstance(value, list):
        return "+".join(_text(v) for v in value)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^\w.@+-]", "-", text)


def variant(s: Settings, overrides: Sequence[str]) -> str:
    """The name of the tables that ``overrides`` ask for where they set table-only settings (:data:`TABLE_SETTINGS`)
    to other values than the same command line without them: ``evaluate.mfr=arithmetic,evaluate.mfr_missing=skip``,
    as Hydra names a run's overrides; '' for the configuration's own tables."""
    own = [o for o in overrides if o.partition("=")[0].lstrip("+~") not in TABLE_SETTINGS]
    if len(own) == len(overrides):
        return ""
    base = compose(own)
    return ",".join(f"{leaf}={_text(_leaf(s, leaf))}" for leaf in TABLE_SETTINGS
                    if _leaf(s, leaf) != _leaf(base, leaf))


def tables_out(s: Settings, overrides: Sequence[str], out: str | Path | None = None) -> Path:
    """Where a command writes the tables: ``out`` where given, else the data's tables folder, in a folder named by
    the variant (:func:`variant`) when the overrides set table-only settings: a variant never overwrites another's."""
    if out is not None:
        return Path(out)
    name = variant(s, overrides)
    return tables_dir(s) / name if name else tables_dir(s)


def _fmt(v: float) -> str:
    return "–" if v is None or np.isnan(v) else f"{v:.3f}"


def cv_table(summary_rows: pd.DataFrame, models: list[str]) -> tuple[pd.DataFrame, dict, list[str]]:
    """Cells of one corpus table: (frame of formatted strings for Markdown, marks for LaTeX, swap notes).

    Under ``max_effect`` selection (the summary's ``selection`` column) a leaked cell also shows, in
    parentheses, its difference to None at the same sizes (``effect``): that is what its † is about.
    """
    import pandas as pd

    s = summary_rows.set_index(["model", "measure", "leakage"])
    present = [m for m in models if m in s.index.get_level_values(0)]
    show_effect = "selection" in s.columns and "effect" in s.columns and (s["selection"] == "max_effect").any()
    cells: dict[tuple[str, str, str], dict] = {}
    notes = []
    for measure in TABLE_MEASURES:
        lower = measure in LOWER_IS_BETTER
        for leakage in ("none", "msm", "test"):
            col = {m: s.loc[(m, measure, leakage), "mean"] if (m, measure, leakage) in s.index else np.nan for m in present}
            valid = {m: float(rounded(v, MEAN_DECIMALS)) for m, v in col.items() if not np.isnan(v)}
            best = (min if lower else max)(valid.values()) if valid else None
            for m, v in col.items():
                row = s.loc[(m, measure, leakage)] if (m, measure, leakage) in s.index else None
                sig = bool(row["significant"]) if row is not None else False
                effect = float(row["effect"]) if show_effect and row is not None and leakage != "none" else None
                cells[(m, measure, leakage)] = {"value": v, "bold": best is not None and valid.get(m) == best,
                                                "dagger": sig and leakage != "none", "red": False, "effect": effect}
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
                if c["effect"] is not None and not np.isnan(c["effect"]):
                    text += f" ({c['effect']:+.3f})"
                if c["red"]:
                    text = f'<span style="color:red">{text}</span>'
                row[f"{measure} {LEAKAGE_LABEL[leakage]}"] = text
        rows.append(row)
    return pd.DataFrame(rows), {"cells": cells, "models": present}, notes


def cv_latex(marks: dict, caption: str, label: str) -> str:
    """A booktabs table (pandas ``Styler.to_latex``) with bold, $^\\dagger$ and \\textcolor{red}
    (needs booktabs and xcolor); measures span their three leakage columns."""
    import pandas as pd

    columns = pd.MultiIndex.from_product([TABLE_MEASURES, [LEAKAGE_LABEL[l] for l in ("none", "msm", "test")]],
                                         names=["Model", ""])
    body = []
    for m in marks["models"]:
        row = []
        for measure in TABLE_MEASURES:
            for leakage in ("none", "msm", "test"):
                c = marks["cells"][(m, measure, leakage)]
                text = _fmt(c["value"]).replace("–", "--") + (r"$^\dagger$" if c["dagger"] else "")
                if c["bold"]:
                    text = rf"\textbf{{{text}}}"
                if c.get("effect") is not None and not np.isnan(c["effect"]):
                    text += f" ({c['effect']:+.3f})"
                if c["red"]:
                    text = rf"\textcolor{{red}}{{{text}}}"
                row.append(text)
        body.append(row)
    frame = pd.DataFrame(body, columns=columns, index=[latex_escape(MODEL_LABEL.get(m, m)) for m in marks["models"]])
    styler = frame.style.format_index(latex_escape, axis=1)
    tex = styler.to_latex(caption=latex_escape(caption), label=label, hrules=True, position_float="centering",
                          multicol_align="c", column_format="l" + "rrr" * len(TABLE_MEASURES))
    # a rule under each measure's spanning header
    rules = " ".join(rf"\cmidrule(lr){{{2 + 3 * i}-{4 + 3 * i}}}" for i in range(len(TABLE_MEASURES)))
    head, sep, rest = tex.partition(r"\multicolumn")
    first, newline, rest = rest.partition("\n")
    return head + sep + first + newline + rules + "\n" + rest


def figure2(results: pd.DataFrame, leaking: dict[str, list[str]], model: str, out: Path, caption: str) -> Path | None:
    """nDCG@10 of ``model`` on the topics with leakage vs. training-set size; one panel per corpus."""
    import pandas as pd

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
        save_figure(fig, out / f"figure2.{ext}")
    plt.close(fig)
    atomic_write_text(out / "figure2.csv", pd.DataFrame(rows).to_csv(index=False))
    atomic_write_text(out / "figure2.md", f"**{caption}**\n\n![Figure 2](figure2.png)\n\n" + markdown_table(pd.DataFrame(rows)))
    return out / "figure2.png"


def write_leaked_vs_other(heldout: pd.DataFrame, leaking: dict[str, list[str]], out: Path, s: Settings,
                          incomplete: str) -> Path | None:
    """Tables 3-5 split into the topics with verified leaks and the others (DuReader-retrieval's Table 6):
    the same cross-validated per-topic values, each leakage type tested against None on each group."""
    with_none = heldout.groupby(["corpus", "model"]).leakage.transform(lambda l: (l == "none").any())
    heldout = heldout[with_none]  # a model without its None results has nothing to be tested against
    if heldout.empty:
        return None
    t = split_eval(heldout, leaking, systems=["corpus", "model", "leakage"], by=["corpus", "model"],
                   baseline={"leakage": "none"}, leaked_key="corpus", alpha=s.evaluate.alpha, mfr=s.evaluate.mfr)
    counts = ", ".join(f"{CORPUS_LABEL.get(c, c)} {len(leaking.get(c, []))} of {heldout[heldout.corpus == c].qid.nunique()}"
                       for c in dict.fromkeys(heldout.corpus))
    write_table(t, out, "leaked_vs_other",
                f"Effectiveness on the topics with verified leaking training queries (leaked) and on the others "
                f"(other), data={s.data.name}: the cross-validated per-topic values of Tables 3-5, averaged per "
                f"group; delta and the paired t-test (Bonferroni-corrected over the leakage types) against the same "
                f"model without leakage on the same topics. Topics with leaks: {counts}. "
                f"{mfr_caption(s.evaluate.mfr_missing, s.rerank.depth, s.evaluate.mfr)}." + incomplete)
    return out / "leaked_vs_other.md"


def write_training_curves(runner, cells: list, out: Path) -> list[Path]:
    """Loss and learning rate along every stored training run, one figure per model (``training_curves_<model>``)
    and all runs in ``training_curves.csv``, so a reader sees whether and how each model learned."""
    import pandas as pd

    by_model: dict[str, dict[str, pd.DataFrame]] = {}
    for cell in cells:
        state, path, _ = runner.state(cell.ask("train"))
        if state != "done" or not (path / "history.csv").exists():
            continue
        label = f"{cell.corpus} {LEAKAGE_LABEL.get(cell.leakage, cell.leakage)} {cell.size} s{cell.seed}"
        by_model.setdefault(cell.model, {})[label] = read_history(path / "history.csv")
    written = []
    for model, histories in by_model.items():
        written.append(plot_histories(histories, out / f"training_curves_{model}.png",
                                      title=f"{MODEL_LABEL.get(model, model)}: training loss and learning rate"))
    if by_model:
        frame = pd.concat([h.assign(model=m, run=label) for m, hs in by_model.items() for label, h in hs.items()],
                          ignore_index=True)
        atomic_write_text(out / "training_curves.csv", frame.to_csv(index=False))
    return written


def detail(results: pd.DataFrame, *, mfr: str) -> pd.DataFrame:
    """Mean and standard deviation over seeds of each cell's topic-averaged values."""
    d = seed_spread(results, ["corpus", "model", "leakage", "size", "measure"], mfr=mfr)
    return d.rename(columns={"count": "seeds"})


def plot_histories(histories: Mapping[str, pd.DataFrame], path: str | Path, *, title: str | None = None) -> Path:
    """Loss and learning rate against the update, one line per labelled history, as one PNG (atomic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not histories:
        raise ValueError("plot_histories: no histories to plot")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_loss, ax_lr) = plt.subplots(1, 2, figsize=(10, 3.6))
    for label, h in histories.items():
        ax_loss.plot(h["step"], h["loss"], label=label, linewidth=1)
        ax_lr.plot(h["step"], h["lr"], label=label, linewidth=1)
    ax_loss.set(xlabel="update", ylabel="training loss")
    ax_lr.set(xlabel="update", ylabel="learning rate")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    if len(histories) <= 12:
        ax_loss.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
    return path


class NoResults(RuntimeError):
    """The store holds no finished cell of the configured grid; the message says what to run."""


TABLES_KEY = "tables.key.json"


def _tables_key(s: Settings, runner) -> str:
    """What the tables are made of: the settings, the state and key of every artifact of the grid they read, and
    the code of the table writers. Equal keys: the tables on disk are the ones this run would write."""
    asks = [a for v in grid_asks(s, runner).values() for a in v]
    here, lib = Path(__file__).parent, Path(__file__).parents[1] / "lib"
    code = {f.name: f.read_text(encoding="utf-8") for f in (here / "paper.py", here / "memorization.py",
                                                             here / "robustness.py", lib / "report.py", lib / "stats.py")}
    return config_hash({"settings": runner.values, "code": config_hash(code),
                        "artifacts": sorted({(str(a), runner.key(a), runner.state(a)[0]) for a in asks})})


def _up_to_date(out: Path, key: str) -> bool:
    try:
        recorded = json.loads((out / TABLES_KEY).read_text())
    except (OSError, ValueError):
        return False
    files = recorded.get("files", {}) if isinstance(recorded, dict) else {}
    return recorded.get("key") == key and bool(files) and all(
        (out / f).is_file() and (out / f).stat().st_size == size for f, size in files.items())


FOLD_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def cv_folds_text(n_folds: int, n_topics: int) -> str:
    """The cross-validation a caption names: as many folds as were used (``evaluate.folds``, or one per topic when a
    corpus has fewer topics, as :func:`leakexp.lib.stats.assign_folds` deals them)."""
    k = min(n_folds, n_topics)
    text = f"{FOLD_WORDS.get(k, k)}-fold cross-validation"
    if k < n_folds:
        text += f" (one topic per fold: {n_topics} topics for evaluate.folds={n_folds})"
    return text


def write_tables(s: Settings, runner=None, *, out: str | Path | None = None) -> Path:
    """Write every table the stored results support into ``out`` (default: the data's tables folder) and return it
    (reads finished artifacts only). Tables already written from the same artifacts, settings and table code are kept
    as they are. The tables are written into a temporary folder beside ``out`` and moved into it once all are
    written: a run that fails changes nothing there."""
    runner = runner or make_runner(s, readonly=True)
    out = Path(out) if out is not None else tables_dir(s)
    key = _tables_key(s, runner)
    if _up_to_date(out, key):
        return out
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _write_tables(s, runner, staging)
        files = {p.relative_to(staging).as_posix(): p.stat().st_size for p in sorted(staging.rglob("*")) if p.is_file()}
        for name in files:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    atomic_write_text(out / TABLES_KEY, json.dumps({"key": key, "files": files}, indent=1, sort_keys=True) + "\n")
    return out


def _write_tables(s: Settings, runner, out: Path) -> Path:
    import pandas as pd

    cells = grid_cells(s)
    results, states = stored_results(runner, cells)
    if len(results) == 0:
        raise NoResults(f"the store {runner.store.root} holds no finished cell of this configuration's grid "
                        f"({len(cells)} cells: {incomplete_note(states).strip() or 'none'}); run `make demo` "
                        "(toy world) or `make grid` first, or check the overrides")
    out.mkdir(parents=True, exist_ok=True)
    incomplete = incomplete_note(states)
    atomic_write_text(out / "incomplete.csv", pd.DataFrame(
        [{"corpus": c.corpus, "leakage": c.leakage, "size": c.size, "model": c.model, "seed": c.seed, "state": st}
         for c, st in sorted(states.items(), key=lambda kv: str(kv[0]))],
        columns=["corpus", "leakage", "size", "model", "seed", "state"]).to_csv(index=False))
    e = s.evaluate
    selection = e.cv_selection
    mfr = mfr_caption(e.mfr_missing, s.rerank.depth, e.mfr)
    seeds = sorted(results.seed.unique())
    models = [m for m in s.grid.models]
    trained = recipe_note(s, [m for m in models if m in set(results.model)])
    sizes_note = core_test_leak_note(s, [c for c in dict.fromkeys(s.grid.corpora) if c in set(results.corpus)])
    write_table(summary(results, mfr=e.mfr), out, "summary",
                f"Mean effectiveness per corpus, model and training-set size (data={s.data.name}); columns are "
                f"measure x leakage type, averaged over topics and over {len(seeds)} seed(s). {mfr}; lower MFR is better."
                + trained + sizes_note + incomplete)
    write_table(detail(results, mfr=e.mfr), out, "detail",
                f"Mean and standard deviation over {len(seeds)} seed(s) of each cell's topic-averaged value "
                f"(data={s.data.name}). {mfr}." + trained + sizes_note + incomplete)
    atomic_write_text(out / "perquery.csv", results.to_csv(index=False))

    avg = seed_average(results, mfr=e.mfr)
    all_rows, all_sizes, heldout = [], [], []
    for position, corpus in enumerate(dict.fromkeys(s.grid.corpora), start=3):
        if corpus not in set(avg.corpus):
            continue
        number = table_number(corpus, position)
        rows, sizes = evaluate_corpus(avg, corpus, list(TABLE_MEASURES), n_folds=e.folds, fold_seed=e.fold_seed,
                                      selection=selection, alpha=e.alpha, heldout=heldout, mfr=e.mfr)
        all_rows.append(rows)
        all_sizes.append(sizes)
        n_topics = avg[avg.corpus == corpus].qid.nunique()
        name = CORPUS_LABEL.get(corpus, corpus)
        if selection == "max_effect":
            chosen = ("None: the size best on the training folds, i.e. the best model without leakage; MSM and Test: "
                      "the size with the largest leakage effect on the training folds, i.e. the largest difference to "
                      "None at the same size")
            tested = ("to None at the sizes chosen for MSM / Test (not to the None column), "
                      "whose difference is given in parentheses")
        else:
            chosen = "the size best on the training folds"
            tested = "to None"
        caption = (
            f"Table {number}. Effectiveness on {name} (data={s.data.name}, {n_topics} topics, {len(seeds)} seed(s) "
            f"averaged per topic) as nDCG@10, MFR (first rank of a relevant document; lower is better) and P@1 "
            f"in {cv_folds_text(e.folds, n_topics)} over training-set sizes (size chosen per fold: "
            f"{chosen}). "
            f"Models trained with no leakage (None), MS MARCO / ORCAS leakage (MSM) or test leakage (Test). Highest "
            f"scores in bold; † marks Bonferroni-corrected significant differences {tested} (paired Student's "
            f"t-test, p < {e.alpha}); model order swaps induced by MSM leakage in red. {mfr}. "
            f"{first_stage_caption(s, corpus)}." + trained + core_test_leak_note(s, [corpus])
        )
        left_out = sorted({q for c in cells if c.corpus == corpus and c not in states
                           for q in runner.store.marker(runner.path(c.ask("evaluate"))).figures.get("without_relevant", [])})
        caption += (" " + no_relevant_note(left_out, e.no_relevant) + "." if left_out else "")
        caption += incomplete_note(states, corpus)
        table, marks, notes = cv_table(rows, models)
        stem = f"table{number}"
        note_text = "\n".join(f"- {n}" for n in notes) if notes else "- none"
        atomic_write_text(out / f"{stem}.md", f"**{caption}**\n\n{markdown_table(table)}\nModel order swaps induced by MSM leakage:\n{note_text}\n")
        atomic_write_text(out / f"{stem}.tex", cv_latex(marks, caption, f"tab:{corpus}"))
        atomic_write_text(out / f"{stem}.csv", rows.to_csv(index=False))
    if all_rows:
        atomic_write_text(out / "cv_sizes.csv", pd.concat(all_sizes).to_csv(index=False))

    memorization_tables.write_memorization_tables(s, runner, out, cells, pd.concat(all_sizes) if all_sizes else None)
    robustness_tables.write_robustness_tables(s, runner, out, robustness_cells(s))
    write_training_curves(runner, cells, out)

    leaking = stored_leaking_topics(runner)
    if heldout and leaking:
        write_leaked_vs_other(pd.concat(heldout, ignore_index=True), leaking, out, s, incomplete)
    model = s.report.figure_model
    if model not in set(results.model):
        model = models[0]
    figure2(results, leaking, model, out,
            f"Figure 2. Effectiveness of {MODEL_LABEL.get(model, model)} as nDCG@10 on the topics with leakage "
            f"(data={s.data.name}), against training-set size; mean over {len(seeds)} seed(s), band = min-max over "
            f"seeds. No leakage (None), MS MARCO / ORCAS leakage (MSM), test leakage (Test)."
            + recipe_note(s, [model]) + sizes_note + incomplete)
    return out


def _topic_ids(s: Settings, runner) -> dict[str, list[str]]:
    return {c: list(runner.get(Ask.of("collection", corpus=c)).topics) for c in s.data.corpora}


def write_table1(s: Settings, runner) -> Path:
    """Table 1 from the candidate table (computing detection if the store lacks it)."""
    d = s.detect
    cands = runner.get(Ask.of("detect"))
    corpora = _topic_ids(s, runner)
    wide = table1_wide(table1(cands, corpora, d.threshold))
    near = len(near_threshold(cands, d.threshold))
    caption = (f"Table 1. Topics (T) and training queries (Q) with a Sentence-BERT similarity > {d.threshold} "
               f"to a searched topic field, for MS MARCO (MSM) and MS MARCO + ORCAS (+ORC); fields searched: "
               f"{', '.join(d.fields)}"
               f"{'' if 'variant' in d.fields else ' (query variants not searched: their row is empty)'}; "
               f"data={s.data.name}, model={d.sbert}, top-{d.k} exact neighbours per field; similarities rounded to "
               f"{SIMILARITY_DECIMALS} decimals before the threshold, "
               + (f"{near} candidate(s) within {SIMILARITY_STEP:g} of it (another CPU's float noise could decide "
                  f"them otherwise; verify's near_threshold.parquet lists them)." if near else
                  f"none within {SIMILARITY_STEP:g} of it."))
    out = tables_dir(s)
    write(wide, out, "table1", caption)
    return out / "table1.md"


def write_table2(s: Settings, runner) -> Path:
    """Table 2 (a) and (b) from the verify artifact's annotations."""
    ann = runner.get(Ask.of("verify"))
    pairs = leak_pairs(runner.get(Ask.of("detect")), s.detect.threshold)
    a, b = table2(ann, _topic_ids(s, runner), pairs)
    out = tables_dir(s)
    source = "the toy world's ground truth" if s.verify.annotations == "truth" else "the annotation files"
    write(a, out, "table2a", f"Table 2 (a). Reviewed leakage candidates (top-{s.verify.review_top_k} per topic above "
          f"{s.detect.threshold}) judged by {source}: true and false candidates as queries and topics per corpus; "
          "a query annotated for two topics counts for each.")
    write(b, out, "table2b", "Table 2 (b). Annotated query reformulation types (queries; all corpora and per corpus).")
    return out / "table2a.md"
