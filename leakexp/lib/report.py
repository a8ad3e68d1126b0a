"""Tables from the store: Markdown, LaTeX and CSV, written atomically."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

from leakexp.lib.measures import MEASURE_ORDER, mean_by
from leakexp.runner.store import atomic_write_text

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


LEAKAGE_ORDER = ("none", "msm", "test")
TABLE_MEASURES = ("nDCG@10", "MFR", "P@1")
LEAKAGE_LABEL = {"none": "None", "msm": "MSM", "test": "Test"}
CORPUS_LABEL = {"robust04": "Robust04", "core17": "Common Core 2017", "core18": "Common Core 2018"}


def _is_missing(v) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and np.isnan(v))


def _numeric(col: pd.Series) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def markdown_table(df: pd.DataFrame, floatfmt: str = "{:.3f}") -> str:
    """A GitHub-flavoured Markdown table (pandas ``to_markdown``, pipe format).

    Cells are written as given (so ``**bold**`` and ``<span style="color:red">`` marks render); floats use
    ``floatfmt``, missing values stay empty, ``|`` is escaped and numeric columns are right-aligned.
    """
    import pandas as pd

    def fmt(v) -> str:
        if _is_missing(v):
            return ""
        if isinstance(v, (float, np.floating)):
            return floatfmt.format(v)
        return str(v).replace("|", r"\|").replace("\n", "<br>")

    if not len(df.columns):
        return ""
    cells = pd.DataFrame({i: df.iloc[:, i].map(fmt) for i in range(df.shape[1])}, index=range(len(df)))
    cells.columns = [str(c).replace("|", r"\|") for c in df.columns]
    align = ["right" if _numeric(df.iloc[:, i]) else "left" for i in range(df.shape[1])]
    return cells.to_markdown(index=False, disable_numparse=True, colalign=align) + "\n"


def per_seed_means(results: pd.DataFrame, *, mfr: str) -> pd.DataFrame:
    """Mean over topics per cell and measure (NaN values, e.g. MFR misses, are left out; MFR as ``evaluate.mfr``
    averages, ``leakexp.lib.measures.mean_by``)."""
    keys = ["corpus", "leakage", "size", "model", "seed", "measure"]
    return mean_by(results, keys, mfr)


def seed_spread(results: pd.DataFrame, keys: list[str], *, mfr: str) -> pd.DataFrame:
    """Per group of ``keys`` (which include ``measure`` but not ``seed``): ``mean`` of the seeds' topic means (for a
    reciprocal MFR 1 / the mean of the seeds' MRRs), ``std`` of the seeds' topic means, and ``count`` of seeds."""
    import pandas as pd

    per_seed = per_seed_means(results, mfr=mfr)
    spread = per_seed.groupby(keys).value.agg(["std", "count"])
    mean = mean_by(per_seed, keys, mfr).set_index(keys).value.rename("mean")
    return pd.concat([mean, spread], axis=1).reset_index()[[*keys, "mean", "std", "count"]]


def summary(results: pd.DataFrame, *, mfr: str) -> pd.DataFrame:
    """One row per (corpus, model, size): each measure x leakage as mean over seeds (+ std, seeds)."""
    import pandas as pd

    agg = seed_spread(results, ["corpus", "model", "size", "measure", "leakage"], mfr=mfr)
    measures = [m for m in MEASURE_ORDER if m in set(agg.measure)] + sorted(set(agg.measure) - set(MEASURE_ORDER))
    rows = []
    for (corpus, model, size), g in agg.groupby(["corpus", "model", "size"], sort=True):
        row = {"corpus": corpus, "model": model, "size": int(size)}
        for m in measures:
            for l in LEAKAGE_ORDER:
                hit = g[(g.measure == m) & (g.leakage == l)]
                row[f"{m} {l}"] = float(hit["mean"].iloc[0]) if len(hit) else float("nan")
        row["seeds"] = int(g["count"].max())
        rows.append(row)
    return pd.DataFrame(rows)


def write_table(df: pd.DataFrame, out_dir: Path, name: str, caption: str) -> dict[str, Path]:
    """``name``.md (with the caption), ``name``.csv and ``name``.tex in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = f"**{caption}**\n\n" + markdown_table(df)
    paths = {
        "md": atomic_write_text(out_dir / f"{name}.md", md),
        "csv": atomic_write_text(out_dir / f"{name}.csv", df.to_csv(index=False)),
        "tex": atomic_write_text(out_dir / f"{name}.tex", latex_table(df, caption)),
    }
    return paths


# LaTeX's special characters in text mode; the dagger of Tables 3-5 becomes a math superscript
LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
    ">": r"\textgreater{}", "†": r"$^\dagger$",
}


def latex_escape(s) -> str:
    """``s`` as LaTeX text: every special character escaped, one character at a time (so an escape is
    never escaped again)."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(s))


def latex_table(df: pd.DataFrame, caption: str, label: str | None = None) -> str:
    """A booktabs table of a plain frame (pandas ``Styler.to_latex``; needs booktabs).

    Cells, column names and the caption are escaped with :func:`latex_escape`; floats have three decimals.
    """
    import pandas as pd

    def fmt(v) -> str:
        if _is_missing(v):
            return ""
        if isinstance(v, (float, np.floating)):
            return f"{v:.3f}"
        return latex_escape(v)

    cells = pd.DataFrame({i: df.iloc[:, i].map(fmt) for i in range(df.shape[1])}, index=range(len(df)))
    cells.columns = [latex_escape(c) for c in df.columns]
    cols = "".join("r" if _numeric(df.iloc[:, i]) else "l" for i in range(df.shape[1]))
    styler = cells.style.hide(axis="index")
    return styler.to_latex(caption=latex_escape(caption), label=label, hrules=True, position_float="centering",
                           column_format=cols or "l")


def plot_calibration(curve, threshold, target, path: Path) -> None:
    """Precision and recall of judged pairs against the similarity threshold, as a PNG (atomic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(curve.threshold, curve.precision, label="precision")
    ax.plot(curve.threshold, curve.recall, label="recall")
    ax.axhline(target, color="grey", lw=0.8, ls="--")
    if threshold is not None:
        ax.axvline(threshold, color="black", lw=0.8, ls=":", label=f"threshold {threshold:.3f}")
    ax.set_xlabel("similarity threshold (pairs with similarity > t)")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


# matplotlib stamps its version (PNG, PDF) and the time (PDF, SVG) into figures: without them, equal figures are
# equal bytes
_NO_STAMPS = {"png": {"Software": None}, "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
              "svg": {"Creator": None, "Date": None}}


def save_figure(fig, path: Path, *, dpi: int = 150) -> Path:
    """``fig`` written to ``path`` (its suffix names the format) atomically and without time or version stamps."""
    fmt = path.suffix.lstrip(".")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.{fmt}")  # several processes may write one figure
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "leakexp"}):  # else SVG ids are random per write
        fig.savefig(tmp, format=fmt, dpi=dpi, metadata=_NO_STAMPS.get(fmt, {}))
    tmp.replace(path)
    return path


def incomplete_note(states: dict, corpus: str | None = None) -> str:
    """The caption sentence that names the grid cells a table lacks (missing, failed, stale, ...)."""
    cells = {c: s for c, s in states.items() if corpus is None or c.corpus == corpus}
    if not cells:
        return ""
    by_state: dict[str, list[str]] = {}
    for cell, state in cells.items():
        by_state.setdefault(state, []).append(str(cell))
    parts = []
    for state in ("failed", "damaged", "stale", "running", "missing", "data missing"):
        names = sorted(by_state.get(state, []))
        if names:
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            parts.append(f"{len(names)} {state} ({shown})")
    return f" INCOMPLETE: {len(cells)} grid cell(s) have no result for this configuration and are left out: " \
           + "; ".join(parts) + "."
