"""Tables 6-8 of the memorization analysis and its per-instance CSV, from finished memorization artifacts only."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

from leakexp.models import MODEL_LABEL
from leakexp.lib.report import CORPUS_LABEL, LEAKAGE_LABEL, TABLE_MEASURES, incomplete_note, latex_escape, markdown_table
from leakexp.lib.stats import evaluate_corpus, seed_average
from leakexp.runner.schema import Settings
from leakexp.runner.store import atomic_write_text
from leakexp.stages.cell import Cell
from leakexp.grid.work import stored_results
from leakexp.tables.captions import core_test_leak_note
from leakexp.tables.captions import recipe_note
from leakexp.stages.memorization import FILE, Memorization, memorization_settings
from leakexp.lib.memorization import LEAKED, VARIANTS, cv_choice, macro_average, offset_increase

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)


# -- tables ---------------------------------------------------------------------------------------------
def stored_cv_sizes(s: Settings, runner, cells: list[Cell]) -> pd.DataFrame | None:
    """The cross-validation's size choices (as ``tables.paper.write_tables`` makes them for Tables 3-5) from the
    stored evaluations of ``cells``; None when none is finished. For callers outside ``tables.paper.write_tables``."""
    import pandas as pd

    results, _ = stored_results(runner, cells)
    if len(results) == 0:
        return None
    e = s.evaluate
    avg = seed_average(results, mfr=e.mfr)
    frames = [evaluate_corpus(avg, corpus, list(TABLE_MEASURES), n_folds=e.folds, fold_seed=e.fold_seed,
                              selection=e.cv_selection, alpha=e.alpha, mfr=e.mfr)[1]
              for corpus in dict.fromkeys(s.grid.corpora) if corpus in set(avg.corpus)]
    return pd.concat(frames, ignore_index=True) if frames else None


def _fmt(mean: float, std: float, digits: int, std_digits: int) -> str:
    if np.isnan(mean):
        return "–"
    return f"{mean:.{digits}f} ± " + ("–" if np.isnan(std) else f"{std:.{std_digits}f}")


def _labels():
    return CORPUS_LABEL, MODEL_LABEL


def table_rows(rows: pd.DataFrame, corpora: list[str], models: list[str]) -> dict[str, pd.DataFrame]:
    """Long numeric frames of Tables 6 (rank), 7 (score) and 8 (offset increase): one row per leakage,
    model, corpus (and variant), with mean, std, topics, leaked queries and seeds."""
    import pandas as pd

    out = {"table6": [], "table7": [], "table8": []}
    increase = offset_increase(rows) if len(rows) else pd.DataFrame(columns=["corpus", "leakage", "model", "topic", "increase"])
    for leakage in LEAKED:
        for model in models:
            for corpus in corpora:
                sel = rows[(rows.leakage == leakage) & (rows.model == model) & (rows.corpus == corpus)]
                if sel.empty:
                    continue
                info = {"leakage": leakage, "model": model, "corpus": corpus,
                        "sizes": ",".join(str(s) for s in sorted(sel["size"].unique())),
                        "leaked_queries": int(sel.groupby(["size", "seed"]).pair.nunique().max()),
                        "seeds": int(sel.seed.nunique())}
                rel = sel[sel.label == 1]
                for table, value in (("table6", "rank"), ("table7", "score")):
                    for variant in VARIANTS:
                        mean, std, n = macro_average(rel[rel.variant == variant], value)
                        out[table].append({**info, "variant": variant, "mean": mean, "std": std, "topics": n})
                inc = increase[(increase.leakage == leakage) & (increase.model == model) & (increase.corpus == corpus)]
                mean, std, n = macro_average(inc, "increase")
                out["table8"].append({**info, "variant": "increase", "mean": mean, "std": std, "topics": n})
    cols = ["leakage", "model", "corpus", "variant", "mean", "std", "topics", "leaked_queries", "seeds", "sizes"]
    return {k: pd.DataFrame(v, columns=cols) for k, v in out.items()}


def _display(long: pd.DataFrame, table: str, corpora: list[str], models: list[str]) -> pd.DataFrame:
    import pandas as pd

    corpus_label, model_label = _labels()
    idx = long.set_index(["leakage", "model", "corpus", "variant"])
    digits = (3, 2) if table == "table8" else (2, 2)

    def cell(*key) -> str:
        if key not in idx.index:
            return "–"
        r = idx.loc[key]
        return _fmt(float(r["mean"]), float(r["std"]), *digits)

    present = [m for m in models if m in set(long.model)]
    rows = []
    if table == "table8":
        for m in present:
            row = {"Model": model_label.get(m, m)}
            for leakage in LEAKED:
                for c in corpora:
                    row[f"Δ on {LEAKAGE_LABEL[leakage]} {corpus_label.get(c, c)}"] = cell(leakage, m, c, "increase")
            rows.append(row)
    else:
        for leakage in LEAKED:
            for m in present:
                if not ((long.leakage == leakage) & (long.model == m)).any():
                    continue
                row = {"Leakage": LEAKAGE_LABEL[leakage], "Model": model_label.get(m, m)}
                for c in corpora:
                    for variant in VARIANTS:
                        row[f"{corpus_label.get(c, c)} {variant.capitalize()}"] = cell(leakage, m, c, variant)
                rows.append(row)
    return pd.DataFrame(rows)


def _latex(display: pd.DataFrame, caption: str, label: str) -> str:
    def esc(v) -> str:
        return latex_escape(v).replace("±", r"$\pm$").replace("Δ", r"$\Delta$").replace("–", "--")

    lines = [r"\begin{table}", r"\centering", rf"\caption{{{esc(caption)}}}", rf"\label{{{label}}}",
             r"\begin{tabular}{" + "l" * (2 if "Leakage" in display.columns else 1)
             + "r" * (len(display.columns) - (2 if "Leakage" in display.columns else 1)) + "}",
             r"\toprule", " & ".join(esc(c) for c in display.columns) + r" \\", r"\midrule"]
    for row in display.itertuples(index=False):
        lines.append(" & ".join(esc(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _counts(long: pd.DataFrame, corpora: list[str]) -> str:
    """'toy_robust: MSM 25 topics / 60 leaked queries, Test 30 / 60; ...' (ranges where models differ)."""
    corpus_label, _ = _labels()

    def span(values) -> str:
        lo, hi = int(min(values)), int(max(values))
        return str(lo) if lo == hi else f"{lo}–{hi}"

    parts = []
    for c in corpora:
        bits = []
        for leakage in LEAKED:
            sel = long[(long.corpus == c) & (long.leakage == leakage)]
            if len(sel):
                bits.append(f"{LEAKAGE_LABEL[leakage]} {span(sel.topics)} topics / {span(sel.leaked_queries)} leaked queries")
        if bits:
            parts.append(f"{corpus_label.get(c, c)}: " + ", ".join(bits))
    return "; ".join(parts)


def _table_sets(m: Memorization.Settings, rows: pd.DataFrame, grid_sizes: list[int], cv_sizes: pd.DataFrame | None) -> list[tuple]:
    """(file suffix, sizes sentence, rows, selection of (corpus, leakage, size, model)) per table set."""
    sets, seen = [], set()
    present = sorted(int(x) for x in rows["size"].unique())
    for spec in m.sizes:
        if spec == "each" or isinstance(spec, int):
            for size in ([int(x) for x in grid_sizes] if spec == "each" else [spec]):
                if size in seen or size not in present:
                    continue
                seen.add(size)
                sets.append((f"size{size}", f"training-set size {size}", rows[rows["size"] == size],
                             lambda c, size=size: c.size == size))
        elif spec == "pooled":
            sets.append(("pooled", f"all training-set sizes pooled ({', '.join(map(str, present))}; each topic's "
                         "mean covers every size)", rows, lambda c: True))
        elif spec == "cv":
            if cv_sizes is None or len(cv_sizes) == 0:
                log.warning("memorization.sizes has cv but no cross-validation sizes are available; skipping the CV tables")
                continue
            choice = cv_choice(cv_sizes, m.cv_measure)
            if choice.empty:
                log.warning("no cross-validation size choices for %s; skipping the CV memorization tables", m.cv_measure)
                continue
            keys = set(zip(choice.corpus, choice.model, choice.leakage, choice["size"]))
            sel = rows[[k in keys for k in zip(rows.corpus, rows.model, rows.leakage, rows["size"])]]
            _, model_label = _labels()
            listed = "; ".join(f"{c} {model_label.get(m, m)} {LEAKAGE_LABEL[l]} {z} ({n}/{o} folds)"
                               for c, m, l, z, n, o in choice.itertuples(index=False))
            sets.append(("cv", f"the training-set size the cross-validation chose most often (over its folds) for "
                         f"{m.cv_measure} per corpus, model and leakage type ({listed})", sel,
                         lambda c, keys=keys: (c.corpus, c.model, c.leakage, c.size) in keys))
    return sets


def write_memorization_tables(s: Settings, runner, out_dir: Path, cells: list[Cell],
                               cv_sizes: pd.DataFrame | None) -> list[Path]:
    """Tables 6-8 per configured size selection and the per-instance CSV, from the stored memorization
    artifacts alone (no scoring). Returns the written files (none when no artifact is finished)."""
    import pandas as pd

    m = memorization_settings(s)
    if not m.enabled:
        log.info("memorization.enabled is false: Tables 6-8 are not written")
        return []
    leaked = [c for c in cells if c.leakage in LEAKED]
    frames, states = [], {}
    for cell in leaked:
        state, path, _ = runner.state(cell.ask("memorization"))
        if state == "done":
            frames.append(pd.read_parquet(path / FILE))
        else:
            states[cell] = state
    if not frames:
        log.warning("no finished memorization artifact among %d leaked cells; Tables 6-8 are not written", len(leaked))
        return []
    rows = pd.concat(frames, ignore_index=True)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out_dir / "memorization.csv", rows.sort_values(
        ["corpus", "leakage", "size", "model", "seed", "variant", "topic", "pair", "label"],
        ascending=[True] * 8 + [False], kind="mergesort").to_csv(index=False))]
    corpora = [c for c in dict.fromkeys(s.grid.corpora) if c in set(rows.corpus)]
    models = [x for x in dict.fromkeys(s.grid.models) if x in set(rows.model)]
    depth = s.rerank.depth
    for suffix, sizes_text, sel, in_set in _table_sets(m, rows, list(s.grid.sizes), cv_sizes):
        long = table_rows(sel, corpora, models)
        seeds = sorted(int(x) for x in sel.seed.unique())
        note = incomplete_note({c: st for c, st in states.items() if in_set(c)})
        common = (f"data={s.data.name}, {sizes_text}, {len(seeds)} seed(s): {', '.join(map(str, seeds))}. "
                  f"Ranks are 1-based in each model's re-ranking of the BM25 top-{depth} for the topic's "
                  f"{s.rerank.query_field} query; a leaked document outside it (every MS MARCO / ORCAS document) "
                  f"gets the hypothetical rank its score earns among the re-ranked {depth} (ties by docno), so the "
                  f"maximal rank is {depth + 1}. MSM-leaked documents are scored with "
                  + ("the topic's query" if m.msm_query == "topic" else "the training query they leaked with")
                  + f" (memorization.msm_query={m.msm_query}). Macro-averaged over topics (each topic's leaked queries and seeds "
                  f"averaged first; ± = standard deviation over topics): MSM over the topics with leaking queries in "
                  f"the training set, Test over all topics with test leakage. Topics / leaked queries: "
                  f"{_counts(long['table6'], corpora)}.")
        captions = {
            "table6": "Table 6. Mean rank of the (leaked) relevant training documents (± standard deviation) for "
                      "models trained with and without leakage from MS MARCO / ORCAS (MSM) or from the test data "
                      f"(Test); {common}",
            "table7": "Table 7. Mean retrieval score of the (leaked) relevant training documents (± standard "
                      "deviation; higher = more relevant; each model's own score scale) for models trained with and "
                      f"without leakage from MS MARCO / ORCAS (MSM) or the test data (Test); {common}",
            "table8": "Table 8. Macro-averaged increase of the rank offset between the leaked relevant and "
                      "non-relevant documents (rank of the non-relevant minus rank of the relevant; ± standard "
                      "deviation) for models trained on MSM leakage (Δ on MSM) or on test leakage (Δ on Test) over "
                      f"the no-leakage models; {common}",
        }
        for table, caption in captions.items():
            caption += recipe_note(s, models) + core_test_leak_note(s, corpora) + note
            display = _display(long[table], table, corpora, models)
            stem = f"{table}-{suffix}"
            written.append(atomic_write_text(out_dir / f"{stem}.md", f"**{caption}**\n\n{markdown_table(display)}"))
            written.append(atomic_write_text(out_dir / f"{stem}.csv", long[table].to_csv(index=False)))
            written.append(atomic_write_text(out_dir / f"{stem}.tex", _latex(display, caption, f"tab:{stem}")))
    log.info("memorization tables: %d files in %s", len(written), out_dir)
    return written
