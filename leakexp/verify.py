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
    kinds = {(str(r.train_qid), str(r.topic_qid)): r.type for r in truth.itertuples(index=False)}
    out = []
    for r in review.itertuples(index=False):
        kind = kinds.get((str(r.train_qid), str(r.topic_qid)))
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


def verified_leaks(annotations: pd.DataFrame, topic_ids: list[str]) -> pd.DataFrame:
    """True leaks of one corpus: annotations whose topic is one of the corpus's topics.

    Core 2017 / 2018 reuse Robust04 topics, so one annotation counts for every corpus with its topic.
    """
    a = annotations[annotations.leak & annotations.topic_qid.isin({str(t) for t in topic_ids})]
    return a.drop_duplicates(["train_qid", "topic_qid"]).reset_index(drop=True)
