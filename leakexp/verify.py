"""Manual verification of leakage candidates, in the study's published annotation format.

One JSON object per line: ``id``, ``data`` (training query), ``label`` (list), ``title``, ``topic``,
``variant``, ``narrative``, ``description``, ``ms-marco-qid``, ``cosine_similarity``. A candidate is a true
leak unless its labels include ``Different Topic``; its reformulation type is its ``Title-…`` label.
In the toy world the generator's ground truth fills in the labels, through the same import path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from leakexp.data.files import DataFormatError
from leakexp.data.types import Collection

LABELS = (
    "Title-Identical", "Title-Specialization", "Title-Generalization", "Title-Reformulation",
    "Variant-Identical", "Variant-Specialization", "Variant-Generalization", "Variant-Reformulation",
    "Different Topic",
)
DIFFERENT = "Different Topic"
REQUIRED = ("id", "data", "label", "topic", "ms-marco-qid")
ANNOTATION_COLUMNS = ["id", "train_qid", "query", "topic_qid", "labels", "leak", "type", "similarity", "file"]


def review_candidates(pairs: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """The ``top_k`` most similar candidates per topic (pairs = one row per query-topic, above threshold)."""
    ranked = pairs.sort_values(["topic_qid", "similarity", "train_qid"], ascending=[True, False, True], kind="mergesort")
    return ranked.groupby("topic_qid", sort=False).head(top_k).reset_index(drop=True)


def to_annotation_records(review: pd.DataFrame, collections: list[Collection], labels: list[list[str]] | None = None) -> list[dict]:
    """Candidates as records in the published format (labels empty unless given)."""
    topics = {}
    for c in collections:
        for t in c.topics.values():
            topics.setdefault(t.qid, t)
    records = []
    for n, r in enumerate(review.itertuples(index=False)):
        t = topics[r.topic_qid]
        variant = t.variants[int(r.variant_index)] if r.field == "variant" and int(r.variant_index) >= 0 else ""
        records.append({
            "id": n, "data": r.query, "label": labels[n] if labels else [], "title": t.title,
            "topic": str(r.topic_qid), "variant": variant, "narrative": t.narrative,
            "description": t.description, "ms-marco-qid": str(r.train_qid),
            "cosine_similarity": round(float(r.similarity), 6),
        })
    return records


def write_annotations(path: Path, records: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")


def truth_labels(review: pd.DataFrame, truth: pd.DataFrame) -> list[list[str]]:
    """The toy world's ground truth as annotator labels: Title-<type> for planted leaks, else Different Topic."""
    # keyed by source too where both name it: one query id may name different MS MARCO and ORCAS queries
    cols = ["train_qid", "topic_qid"] + (["source"] if "source" in review and "source" in truth else [])
    key = lambda r: tuple(str(getattr(r, c)) for c in cols)  # noqa: E731
    kinds = {key(r): r.type for r in truth.itertuples(index=False)}
    out = []
    for r in review.itertuples(index=False):
        kind = kinds.get(key(r))
        out.append([f"Title-{kind}"] if kind and kind != DIFFERENT else [DIFFERENT])
    return out


def read_annotations(paths: list[Path]) -> pd.DataFrame:
    """Read annotation files into one set; later files must not repeat earlier ids."""
    rows, seen = [], {}
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path}: annotation file not found")
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{n}"
                try:
                    rec = json.loads(line)
                except ValueError as exc:
                    raise DataFormatError(f"{where}: not valid JSON ({exc.msg})") from None
                if not isinstance(rec, dict):
                    raise DataFormatError(f"{where}: expected a JSON object")
                missing = [k for k in REQUIRED if k not in rec]
                if missing:
                    raise DataFormatError(f"{where}: missing field(s) {', '.join(missing)}")
                labels = rec["label"]
                if not isinstance(labels, list) or not labels:
                    raise DataFormatError(f"{where}: 'label' must be a non-empty list of strings")
                unknown = [x for x in labels if x not in LABELS]
                if unknown:
                    raise DataFormatError(f"{where}: unknown label(s) {unknown}; expected some of {list(LABELS)}")
                try:
                    ident = int(rec["id"])
                except (TypeError, ValueError):
                    raise DataFormatError(f"{where}: 'id' must be an integer, got {rec['id']!r}") from None
                if ident in seen:
                    raise DataFormatError(f"{where}: id {ident} already annotated in {seen[ident]}")
                seen[ident] = where
                leak = DIFFERENT not in labels
                title_types = [x.split("-", 1)[1] for x in labels if x.startswith("Title-")]
                rows.append({
                    "id": ident, "train_qid": str(rec["ms-marco-qid"]), "query": rec["data"],
                    "topic_qid": str(rec["topic"]), "labels": labels, "leak": leak,
                    "type": title_types[0] if leak and title_types else (DIFFERENT if not leak else ""),
                    "similarity": float(rec.get("cosine_similarity", float("nan"))), "file": str(path),
                })
    return pd.DataFrame(rows, columns=ANNOTATION_COLUMNS)


def verified_leaks(annotations: pd.DataFrame, topic_ids: list[str], *, corpus: str | None = None,
                   pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """True leaks of one corpus: annotations whose topic is one of the corpus's topics.

    Core 2017 / 2018 reuse Robust04 topics, so one annotation counts for every corpus with its topic, unless a
    corpus uses the id with another text: given the ``corpus`` name and the candidate ``pairs`` of
    :func:`leakexp.detect.leak_pairs` (with their ``corpora``), an annotated pair that is a candidate counts
    only for the corpora whose text of the topic it matched (by training query id, query text and topic).
    """
    a = annotations[annotations.leak & annotations.topic_qid.isin({str(t) for t in topic_ids})]
    if corpus is not None and pairs is not None and "corpora" in pairs.columns and len(a):
        exact, by_id = {}, {}
        for r in pairs.itertuples(index=False):
            names = set(str(r.corpora).split("|"))
            exact.setdefault((str(r.train_qid), r.query, str(r.topic_qid)), set()).update(names)
            by_id.setdefault((str(r.train_qid), str(r.topic_qid)), set()).update(names)
        keep = []
        for qid, query, topic in zip(a.train_qid.astype(str), a["query"], a.topic_qid.astype(str)):
            names = exact.get((qid, query, topic), by_id.get((qid, topic)))
            keep.append(names is None or corpus in names)  # not a candidate here: attributed by topic id
        a = a[keep]
    return a.drop_duplicates(["train_qid", "topic_qid"]).reset_index(drop=True)


# -- calibration -------------------------------------------------------------------------------------
def stratified_sample(pairs: pd.DataFrame, *, n: int, lower: float, bins: int = 4, seed: int = 0) -> pd.DataFrame:
    """``n`` query-topic pairs above ``lower``, equally many from each similarity bin (paper: 100 > 0.8).

    Bins split (lower, max] evenly; a bin with too few pairs gives its share to the others.
    """
    import numpy as np

    above = pairs[pairs.similarity > lower].reset_index(drop=True)
    if len(above) <= n:
        return above
    edges = np.linspace(lower, float(above.similarity.max()) + 1e-9, bins + 1)
    which = np.clip(np.searchsorted(edges, above.similarity.values, side="left") - 1, 0, bins - 1)
    rng = np.random.default_rng(seed)
    groups = [list(rng.permutation(np.flatnonzero(which == b))) for b in range(bins)]
    picked: list[int] = []
    while len(picked) < n and any(groups):  # round robin over bins = equal shares, spill-over included
        for g in groups:
            if g and len(picked) < n:
                picked.append(int(g.pop()))
    return above.iloc[sorted(picked)].reset_index(drop=True)


def calibrate(judged: pd.DataFrame, target: float) -> tuple[float | None, pd.DataFrame]:
    """Lowest threshold t such that judged pairs with similarity > t have precision >= ``target``.

    ``judged`` has columns similarity and leak (bool). Returns (threshold or None, curve) where the curve
    lists, for each candidate threshold (just below each judged similarity), precision and recall.
    """
    j = judged.sort_values("similarity", kind="mergesort").reset_index(drop=True)
    total_true = int(j.leak.sum())
    rows = []
    sims = sorted(set(j.similarity.round(6)))
    for s in sims:
        t = s - 1e-6  # "similarity > t" keeps s itself
        kept = j[j.similarity > t]
        tp = int(kept.leak.sum())
        rows.append({"threshold": round(t, 6), "kept": len(kept), "true": tp,
                     "precision": tp / len(kept) if len(kept) else float("nan"),
                     "recall": tp / total_true if total_true else float("nan")})
    curve = pd.DataFrame(rows)
    ok = curve[curve.precision >= target]
    return (float(ok.threshold.min()) if len(ok) else None), curve


# -- annotation statistics ---------------------------------------------------------------------------
TYPES = ("Identical", "Specialization", "Generalization", "Reformulation", DIFFERENT)


def table2(annotations: pd.DataFrame, corpora: dict[str, list[str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(a) true / false candidates as queries and topics per corpus; (b) queries per reformulation type."""
    rows_a, per_corpus = [], {}
    for corpus, topic_ids in corpora.items():
        a = annotations[annotations.topic_qid.isin({str(t) for t in topic_ids})]
        a = a.drop_duplicates(["train_qid", "topic_qid"])
        per_corpus[corpus] = a
        for flag in (True, False):
            s = a[a.leak == flag]
            rows_a.append({"corpus": corpus, "candidates": "true" if flag else "false",
                           "queries": len(s), "topics": s.topic_qid.nunique()})
    all_ann = annotations.drop_duplicates(["train_qid", "topic_qid"])
    rows_b = []
    for t in TYPES:
        row = {"type": t, "queries": int((all_ann.type == t).sum())}
        for corpus, a in per_corpus.items():
            row[corpus] = int((a.type == t).sum())
        rows_b.append(row)
    return pd.DataFrame(rows_a), pd.DataFrame(rows_b)


def cohen_kappa(a: list, b: list) -> float:
    """Cohen's kappa of two aligned label lists."""
    if len(a) != len(b) or not a:
        raise ValueError("kappa needs two non-empty label lists of the same length")
    n = len(a)
    labels = sorted(set(a) | set(b), key=str)
    po = sum(x == y for x, y in zip(a, b)) / n
    pe = sum((a.count(l) / n) * (b.count(l) / n) for l in labels)
    return 1.0 if pe == 1 else (po - pe) / (1 - pe)


def kappa(first: pd.DataFrame, second: pd.DataFrame) -> dict:
    """Agreement of two annotators on the candidates both judged (joined on training query and topic)."""
    m = first.merge(second, on=["train_qid", "topic_qid"], suffixes=("_a", "_b"))
    if m.empty:
        raise ValueError("the two annotation files share no (ms-marco-qid, topic) candidate")
    return {
        "candidates": len(m),
        "kappa_leak": cohen_kappa(m.leak_a.tolist(), m.leak_b.tolist()),
        "kappa_type": cohen_kappa(m.type_a.tolist(), m.type_b.tolist()),
    }


def detection_quality(pairs: pd.DataFrame, truth: pd.DataFrame) -> dict:
    """Recall and precision of candidate pairs (above the threshold) against the toy world's planted leaks."""
    planted = {(str(r.train_qid), str(r.topic_qid)) for r in truth.itertuples(index=False) if r.type != DIFFERENT}
    found = {(str(a), str(b)) for a, b in zip(pairs.train_qid, pairs.topic_qid)}
    hit = len(planted & found)
    return {"planted": len(planted), "candidates": len(found), "true_positives": hit,
            "recall": hit / len(planted) if planted else float("nan"),
            "precision": hit / len(found) if found else float("nan")}
