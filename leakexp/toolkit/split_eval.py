"""Effectiveness on the leaked and on the other test queries (DuReader-retrieval, Qiu et al. 2022, Sec. 3.4, Table
6): per system and group the mean, the difference to a baseline and a paired t-test against it, Bonferroni-corrected
over the other systems; ``leakexp split-eval`` re-scores run files on an audit's leaked queries."""

from __future__ import annotations

from pathlib import Path
from typing import Collection as CollectionT, Hashable, Mapping, Sequence, TYPE_CHECKING

import numpy as np

from leakexp.lib.measures import average, mean_by, mfr_caption, per_query
from leakexp.lib.report import write_table
from leakexp.lib.stats import bonferroni, paired_t
from leakexp.lib.trec import read_run
from leakexp.toolkit.queries import read_qrels_file, source_name

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


LEAK_RULES = ("semantic", "exact", "label", "any")


def split_eval(
    perquery: pd.DataFrame,
    leaked_qids: CollectionT[str] | Mapping[Hashable, CollectionT[str]],
    *,
    systems: Sequence[str] | None = None,
    by: Sequence[str] = (),
    baseline: Mapping[str, object] | None = None,
    leaked_key: str | None = None,
    alpha: float = 0.05,
    mfr: str = "reciprocal_of_mrr",
) -> pd.DataFrame:
    """Every system on the leaked topics, the other topics and all topics, with paired t-tests.

    ``perquery`` has columns qid, measure, value and the columns that name a system (``systems``; default:
    all others), e.g. model and leakage; repeated rows (seeds) are averaged. Within each family (``by``,
    e.g. corpus and model) every system is compared with the family's ``baseline`` (a column -> value
    mapping, e.g. ``{"leakage": "none"}``; default: its first system in the order of ``perquery``) by a paired t-test on the topics of
    the group, Bonferroni-corrected over the family's other systems per measure and group, as Tables 3-5
    and pt.Experiment do. ``leaked``: the leaked qids, or a mapping from a value of ``leaked_key`` (e.g. a
    corpus) to its leaked qids. DuReader-retrieval reports its re-rankers this way (Table 6). MFR's first ranks
    are averaged and tested as ``mfr`` says (``evaluate.mfr``; ``leakexp.lib.measures.average``); its delta is
    the difference of the reported means.
    """
    import pandas as pd

    df = perquery.copy()
    df["qid"] = df["qid"].astype(str)
    systems = list(systems) if systems is not None else [c for c in df.columns if c not in ("qid", "measure", "value")]
    missing = [c for c in [*systems, *by] if c not in df.columns] + ([leaked_key] if leaked_key and leaked_key not in df.columns else [])
    if missing:
        raise ValueError(f"split_eval: per-query results have no column {missing[0]!r} (columns: {list(df.columns)})")
    if not set(by) <= set(systems):
        raise ValueError(f"split_eval: by={list(by)} must be among the system columns {systems}")
    if leaked_key:
        sets = {key: {str(q) for q in qids} for key, qids in dict(leaked_qids).items()}
        df["group"] = [("leaked" if q in sets.get(key, ()) else "other") for q, key in zip(df.qid, df[leaked_key])]
    else:
        sets = {str(q) for q in leaked_qids}
        df["group"] = np.where(df.qid.isin(sets), "leaked", "other")
    keys = [*systems, "measure", "qid", "group"]
    rest = [c for c in systems if c not in by]
    given = {n: i for i, n in enumerate(dict.fromkeys(map(tuple, df[rest].itertuples(index=False))))} if rest else {}
    df = mean_by(df, keys, mfr)  # sorted by the systems: their order as given is ``given``
    rows = []
    families = df.groupby(list(by), sort=False) if by else [((), df)]
    for fam_key, fam in families:
        fam_key = fam_key if isinstance(fam_key, tuple) else (fam_key,)
        names = sorted(dict.fromkeys(map(tuple, fam[rest].itertuples(index=False))), key=given.get) if rest else [()]
        base = names[0]
        if baseline:
            match = [n for n in names if all(dict(zip(rest, n)).get(k, dict(zip(by, fam_key)).get(k)) == v
                                              for k, v in baseline.items())]
            if not match:
                raise ValueError(f"split_eval: no system matches baseline {dict(baseline)} in {dict(zip(by, fam_key))}")
            base = match[0]
        for measure in dict.fromkeys(fam.measure):
            m = fam[fam.measure == measure]
            for group in ("leaked", "other", "all"):
                g = m if group == "all" else m[m.group == group]
                vals = {}
                for n in names:
                    sel = g
                    for c, v in zip(rest, n):
                        sel = sel[sel[c] == v]
                    vals[n] = sel.set_index("qid").value
                others = [n for n in names if n != base]
                # fewer than two paired queries: no test (NaN), not the p = 1.0 paired_t returns
                tests = [paired_t(vals[n], vals[base], measure, mfr) for n in others]
                raw = [p if n_pairs >= 2 else float("nan") for p, n_pairs in tests]
                tested = [i for i, p in enumerate(raw) if not np.isnan(p)]
                fixed = bonferroni([raw[i] for i in tested])
                corrected = {n: float("nan") for n in others} | {others[i]: p for i, p in zip(tested, fixed)}
                raw = dict(zip(others, raw))
                for n in names:
                    v = vals[n]
                    row = dict(zip(by, fam_key)) | dict(zip(rest, n))
                    shared = v.dropna().index.intersection(vals[base].dropna().index)
                    row.update({
                        "measure": measure, "group": group, "queries": int(v.notna().sum()),
                        "mean": average(v, measure, mfr),
                        "delta": (average(v[shared], measure, mfr) - average(vals[base][shared], measure, mfr)
                                  if n != base and len(shared) else float("nan")),
                        "p": raw.get(n, float("nan")), "p_bonferroni": corrected.get(n, float("nan")),
                        "significant": bool(corrected.get(n, float("nan")) < alpha),
                    })
                    rows.append(row)
    cols = [*by, *rest, "measure", "group", "queries", "mean", "delta", "p", "p_bonferroni", "significant"]
    return pd.DataFrame(rows, columns=cols)


def read_leaked(audit_dir: Path, *, rule: str = "semantic", source: str | None = None) -> set[str]:
    """The test qids an audit found leaked: by ``semantic`` similarity, ``exact`` duplicate, ``label`` overlap,
    or ``any`` of them; ``source`` picks one test source when qids repeat across sources."""
    import pandas as pd

    path = Path(audit_dir) / "per_query.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no audit here; run `leakexp audit ... --out {audit_dir}` first")
    per = pd.read_csv(path, dtype={"qid": str, "source": str}, keep_default_na=False)
    if rule not in LEAK_RULES:
        raise ValueError(f"--leaked-by {rule}: use one of {', '.join(LEAK_RULES)}")
    if source is not None:
        if source not in set(per.source):
            raise ValueError(f"--source {source}: the audit's test sources are {sorted(set(per.source))}")
        per = per[per.source == source]
    elif per.qid.duplicated().any():
        raise ValueError(f"{path}: qids repeat across test sources {sorted(set(per.source))}; pick one with --source")
    columns = {"semantic": ["leaked"], "exact": ["exact_duplicate"], "label": ["label_overlap"],
               "any": ["leaked", "exact_duplicate", "label_overlap"]}[rule]
    have = [c for c in columns if c in per.columns]
    if not have:
        raise ValueError(f"{path}: the audit has no {rule} overlap (columns {columns[0]!r} missing)")
    flags = np.zeros(len(per), dtype=bool)
    for c in have:
        flags |= per[c].astype(str).str.lower().eq("true").to_numpy()
    return set(per.qid[flags])


def baseline_run(names: Sequence[str], baseline: str | None = None) -> tuple[str, str]:
    """The run the others are tested against, and why: ``--baseline``, else the run named None (the paper's
    No-Leakage column; any case), else the first run given."""
    if baseline is not None:
        if baseline not in names:
            raise ValueError(f"--baseline {baseline}: not one of the runs {list(names)}")
        return baseline, "--baseline"
    named = [n for n in names if n.lower() == "none"]
    return (named[0], "the run named None") if named else (names[0], "the first run given")


class NothingToCompare(ValueError):
    """split-eval on an audit whose leaked group is empty: no figure to print."""


def run_split_eval(
    runs: Sequence[str], *, qrels: Path, audit_dir: Path, measures: Sequence[str] = ("nDCG@10", "P@1", "MFR"),
    baseline: str | None = None, leaked_by: str = "semantic", source: str | None = None, out: Path | None = None,
    mfr_missing: str = "infinite", depth: int = 100, alpha: float = 0.05, mfr: str = "reciprocal_of_mrr",
) -> pd.DataFrame:
    """``leakexp split-eval``: re-score TREC runs on the audit's leaked vs other test queries."""
    import pandas as pd

    leaked = read_leaked(audit_dir, rule=leaked_by, source=source)
    judgments = read_qrels_file(qrels, "--qrels")
    if not leaked & set(judgments.qid.astype(str)):
        raise NothingToCompare(
            f"split-eval: nothing to compare: the audit in {audit_dir} has no leaked test query ({leaked_by}) among "
            f"the {judgments.qid.nunique()} queries of {qrels}"
            + ("" if leaked_by == "any" else "; --leaked-by any counts every kind of overlap"))
    frames, names = [], []
    for spec in runs:
        name, target = source_name(spec)
        if name in names:
            raise ValueError(f"two runs are named {name!r}; name them NAME=PATH")
        names.append(name)
        frames.append(per_query(read_run(Path(target)), judgments, list(measures), mfr_missing=mfr_missing,
                                depth=depth).assign(run=name))
    base, why = baseline_run(names, baseline)
    table = split_eval(pd.concat(frames, ignore_index=True), leaked, systems=["run"], baseline={"run": base},
                       alpha=alpha, mfr=mfr)
    out = Path(out) if out else Path(audit_dir) / "split-eval"
    write_table(table, out, "split_eval",
                f"Runs on the {len(leaked)} leaked ({leaked_by}) and the other test queries; p: paired t-test "
                f"against {base}, Bonferroni-corrected over the other runs; empty where a group has "
                f"fewer than two queries (no test)." + (f" {mfr_caption(mfr_missing, depth, mfr)}." if "MFR" in measures
                                                        else ""))
    table.attrs["baseline"] = f"{base} ({why})"
    return table
