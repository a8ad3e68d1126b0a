"""Tables from the store: Markdown, LaTeX and CSV, written atomically."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from leakexp.evaluate import MEASURE_ORDER
from leakexp.store import atomic_write_text

LEAKAGE_ORDER = ("none", "msm", "test")


def markdown_table(df: pd.DataFrame, floatfmt: str = "{:.3f}") -> str:
    """A GitHub-flavoured Markdown table (no extra dependency)."""
    def fmt(v):
        if isinstance(v, float):
            return "" if pd.isna(v) else floatfmt.format(v)
        return str(v)

    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def per_seed_means(results: pd.DataFrame) -> pd.DataFrame:
    """Mean over topics per cell and measure (NaN values, e.g. MFR misses, are left out)."""
    keys = ["corpus", "leakage", "size", "model", "seed", "measure"]
    return results.groupby(keys, as_index=False).value.mean()


def summary(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (corpus, model, size): each measure x leakage as mean over seeds (+ std, seeds)."""
    per_seed = per_seed_means(results)
    agg = per_seed.groupby(["corpus", "model", "size", "measure", "leakage"]).value.agg(["mean", "std", "count"])
    agg = agg.reset_index()
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


def latex_escape(s) -> str:
    return (str(s).replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%")
            .replace("&", r"\&").replace("#", r"\#").replace("†", r"$^\dagger$"))


def latex_table(df: pd.DataFrame, caption: str) -> str:
    """A booktabs table of a plain frame."""
    cols = "l" * len(df.columns)
    esc = latex_escape
    lines = [r"\begin{table}", r"\centering", rf"\caption{{{esc(caption)}}}", rf"\begin{{tabular}}{{{cols}}}",
             r"\toprule", " & ".join(esc(c) for c in df.columns) + r" \\", r"\midrule"]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(f"{v:.3f}" if isinstance(v, float) else esc(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
