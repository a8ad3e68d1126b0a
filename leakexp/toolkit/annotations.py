"""Annotations of leakage candidates in the study's published format: reading and writing them, the candidates to
review, the calibration of the similarity threshold, Table 2 and Cohen's kappa.

One JSON object per line: ``id``, ``data`` (training query), ``label`` (list), ``title``, ``topic``,
``variant``, ``narrative``, ``description``, ``ms-marco-qid``, ``cosine_similarity``. A candidate is a true
leak unless its labels include ``Different Topic``; its reformulation type is its ``Title-…`` label.
In the toy world the generator's ground truth fills in the labels, through the same import path.

The study's annotations (webis-de/SPIRE-22, ``src/main/resources/manual-annotations/``) are the four final
files ``query-reformulation-classification-iteration-01-annotated-by-maik-and-cakiki.jsonl``, ``-02-annotated-
by-chris``, ``-03-annotated-by-maik`` and ``-04-annotated-by-maik`` (103 + 308 + 330 + 86 = the paper's 827
candidates). The iteration-01 files of the agreement study (``annotator-agreement/…-by-maik``, ``…-by-cakiki``,
and ``…-01-annotated-by-chris``, a copy of ``…-by-cakiki``) label the same 103 ids again: they are for
:func:`kappa`, and importing two label sets for one id is an error.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from typing import TYPE_CHECKING

from leakexp.data.files import DataFormatError
from leakexp.lib.decisions import SIMILARITY_DECIMALS, SIMILARITY_STEP, above, ranked, rounded
from leakexp.data.types import Collection

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)

LABELS = (
    "Title-Identical", "Title-Specialization", "Title-Generalization", "Title-Reformulation",
    "Variant-Identical", "Variant-Specialization", "Variant-Generalization", "Variant-Reformulation",
    "Different Topic",
)
DIFFERENT = "Different Topic"
REQUIRED = ("id", "data", "label", "topic", "ms-marco-qid")
# file: the annotation file's name (not its path: an artifact's bytes do not depend on where its inputs lie)
ANNOTATION_COLUMNS = ["id", "train_qid", "query", "topic_qid", "labels", "leak", "type", "similarity", "file"]
FINAL_FILES = (
    "the study's four final files query-reformulation-classification-iteration-01-annotated-by-maik-and-cakiki.jsonl, "
    "-02-annotated-by-chris.jsonl, -03-annotated-by-maik.jsonl and -04-annotated-by-maik.jsonl"
)
FINAL_NAMES = ("query-reformulation-classification-iteration-01-annotated-by-maik-and-cakiki.jsonl",
               "query-reformulation-classification-iteration-02-annotated-by-chris.jsonl",
               "query-reformulation-classification-iteration-03-annotated-by-maik.jsonl",
               "query-reformulation-classification-iteration-04-annotated-by-maik.jsonl")
SPIRE22_ANNOTATIONS = "webis-de/SPIRE-22 src/main/resources/manual-annotations/"

log = logging.getLogger(__name__)


def review_candidates(pairs: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """The ``top_k`` most similar candidates per topic (pairs = one row per query-topic, above threshold), by
    similarity rounded as leakexp.lib.decisions says, ties by source and training query id: another CPU's float
    noise changes neither the candidates reviewed nor their order (which numbers them)."""
    ties = [c for c in ("source", "train_qid") if c in pairs.columns]
    ranked_pairs = ranked(pairs, "similarity", by=["topic_qid"], ties=ties)
    return ranked_pairs.groupby("topic_qid", sort=False).head(top_k).reset_index(drop=True)


def to_annotation_records(review: pd.DataFrame, collections: list[Collection], labels: list[list[str]] | None = None) -> list[dict]:
    """Candidates as records in the published format (labels empty unless given)."""
    topics, by_corpus = {}, {}
    for c in collections:
        for t in c.topics.values():
            topics.setdefault(t.qid, t)
            by_corpus[(c.name, t.qid)] = t
    records = []
    for n, r in enumerate(review.itertuples(index=False)):
        # a topic id that corpora use with different texts (Core reusing Robust ids): the text this candidate matched
        corpora = str(getattr(r, "corpora", "") or "").split("|")
        t = next((by_corpus[(c, r.topic_qid)] for c in corpora if (c, r.topic_qid) in by_corpus), topics[r.topic_qid])
        variant = t.variants[int(r.variant_index)] if r.field == "variant" and int(r.variant_index) >= 0 else ""
        records.append({
            "id": n, "data": r.query, "label": labels[n] if labels else [], "title": t.title,
            "topic": str(r.topic_qid), "variant": variant, "narrative": t.narrative,
            "description": t.description, "ms-marco-qid": str(r.train_qid),
            "cosine_similarity": float(rounded(r.similarity)),
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


def _annotation_lines(path: Path, allow_empty: bool = False) -> list[str]:
    """The lines of an annotation file, or a one-line error for a missing, binary or non-UTF-8 file."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: annotation file not found")
    if path.is_dir():
        raise DataFormatError(f"{path}: is a folder; pass the annotation files themselves ({FINAL_FILES})")
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        raise DataFormatError(f"{path}: is gzip-compressed; decompress it first (gunzip {path.name})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); annotation "
                              f"files are JSON lines in UTF-8, re-save it as UTF-8 or pass the right file") from None
    if "\x00" in text:
        raise DataFormatError(f"{path}: is a binary file (NUL bytes); annotation files are JSON lines in UTF-8")
    lines = text.splitlines()
    if not allow_empty and not any(line.strip() for line in lines):
        raise DataFormatError(f"{path}: holds no annotations (the file is empty); pass the annotated JSONL files "
                              f"({FINAL_FILES})")
    return lines


def read_annotations(paths: list[Path], *, allow_empty: bool = False) -> pd.DataFrame:
    """Read annotation files into one set.

    An id seen again with the same candidate and labels (in any order) is read once; an id with another
    candidate or other labels is an error naming both places (e.g. two annotators' files of the agreement
    study). A binary or non-UTF-8 file is an error, and so is an empty one unless ``allow_empty`` (the toy
    world's ground truth when no candidate passed the threshold).
    """
    import pandas as pd

    rows, seen = [], {}
    repeated = 0
    for path in map(Path, paths):
        for n, line in enumerate(_annotation_lines(path, allow_empty), 1):
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
                hint = ""
                if "label" not in rec and "text" in rec:
                    hint = f"; this looks like an unannotated candidate file: pass {FINAL_FILES}"
                raise DataFormatError(f"{where}: missing field(s) {', '.join(missing)}{hint}")
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
            candidate = (str(rec["ms-marco-qid"]), str(rec["topic"]))
            if ident in seen:
                first, first_candidate, first_labels = seen[ident]
                if first_candidate != candidate:
                    raise DataFormatError(
                        f"{where}: id {ident} is candidate (ms-marco-qid {candidate[0]}, topic {candidate[1]}) here "
                        f"but (ms-marco-qid {first_candidate[0]}, topic {first_candidate[1]}) in {first}; "
                        f"pass files whose ids name one candidate each")
                if first_labels != sorted(labels):
                    raise DataFormatError(
                        f"{where}: id {ident} is labelled {sorted(labels)} here but {first_labels} in {first}: two label "
                        f"sets for one candidate (the study's annotator-agreement files reuse ids); pass one label set "
                        f"per candidate, e.g. {FINAL_FILES}")
                repeated += 1
                continue
            seen[ident] = (where, candidate, sorted(labels))
            leak = DIFFERENT not in labels
            title_types = [x.split("-", 1)[1] for x in labels if x.startswith("Title-")]
            rows.append({
                "id": ident, "train_qid": candidate[0], "query": rec["data"],
                "topic_qid": candidate[1], "labels": labels, "leak": leak,
                "type": title_types[0] if leak and title_types else (DIFFERENT if not leak else ""),
                "similarity": float(rec.get("cosine_similarity", float("nan"))), "file": path.name,
            })
    if repeated:
        log.info("%d annotation(s) repeated with the same labels were read once", repeated)
    return pd.DataFrame(rows, columns=ANNOTATION_COLUMNS)


def corpus_annotations(annotations: pd.DataFrame, topic_ids: list[str], *, corpus: str | None = None,
                       pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The annotated candidates (true and false) of one corpus: those whose topic is one of the corpus's topics.

    Core 2017 / 2018 reuse Robust04 topics, so one annotation counts for every corpus with its topic, unless a
    corpus uses the id with another text: given the ``corpus`` name and the candidate ``pairs`` of
    :func:`leakexp.lib.candidates.leak_pairs` (with their ``corpora``), an annotated pair that is a candidate counts
    only for the corpora whose text of the topic it matched (by training query id, query text and topic).
    """
    a = annotations[annotations.topic_qid.isin({str(t) for t in topic_ids})]
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


def verified_leaks(annotations: pd.DataFrame, topic_ids: list[str], *, corpus: str | None = None,
                   pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """True leaks of one corpus (:func:`corpus_annotations` judged leaks), one per training query and topic: a
    query verified for two topics is a leak of each, as Table 2 (a) counts (Robust04: 648 leaks of 642 queries)."""
    a = corpus_annotations(annotations, topic_ids, corpus=corpus, pairs=pairs)
    return a[a.leak].reset_index(drop=True)


# -- calibration -------------------------------------------------------------------------------------
def stratified_sample(pairs: pd.DataFrame, *, n: int, lower: float, bins: int = 4, seed: int = 0) -> pd.DataFrame:
    """``n`` query-topic pairs above ``lower``, equally many from each similarity bin (paper: 100 > 0.8).

    Bins split (lower, max] evenly; a bin with too few pairs gives its share to the others.
    """
    kept = pairs[above(pairs.similarity, lower)].reset_index(drop=True)
    if len(kept) <= n:
        return kept
    sims = rounded(kept.similarity)  # bins of the rounded similarity: float noise moves no pair to another bin
    edges = np.linspace(lower, float(sims.max()) + 1e-9, bins + 1)
    which = np.clip(np.searchsorted(edges, sims, side="left") - 1, 0, bins - 1)
    rng = np.random.default_rng(seed)
    groups = [list(rng.permutation(np.flatnonzero(which == b))) for b in range(bins)]
    picked: list[int] = []
    while len(picked) < n and any(groups):  # round robin over bins = equal shares, spill-over included
        for g in groups:
            if g and len(picked) < n:
                picked.append(int(g.pop()))
    return kept.iloc[sorted(picked)].reset_index(drop=True)


def calibrate(judged: pd.DataFrame, target: float) -> tuple[float | None, pd.DataFrame]:
    """Lowest threshold t such that judged pairs with similarity > t have precision >= ``target``.

    ``judged`` has columns similarity and leak (bool). Returns (threshold or None, curve) where the curve
    lists, for each candidate threshold (one rounding step below each judged similarity, as detection rounds
    similarities: leakexp.lib.decisions), precision and recall.
    """
    import pandas as pd

    j = judged.sort_values("similarity", kind="mergesort").reset_index(drop=True)
    total_true = int(j.leak.sum())
    rows = []
    for s in sorted(set(rounded(j.similarity).tolist())):
        t = round(s - SIMILARITY_STEP, SIMILARITY_DECIMALS)  # "similarity > t" keeps s itself
        kept = j[above(j.similarity, t)]
        tp = int(kept.leak.sum())
        rows.append({"threshold": t, "kept": len(kept), "true": tp,
                     "precision": tp / len(kept) if len(kept) else float("nan"),
                     "recall": tp / total_true if total_true else float("nan")})
    curve = pd.DataFrame(rows)
    ok = curve[curve.precision >= target]
    return (float(ok.threshold.min()) if len(ok) else None), curve


# -- annotation statistics ---------------------------------------------------------------------------
TYPES = ("Identical", "Specialization", "Generalization", "Reformulation", DIFFERENT)


def table2(annotations: pd.DataFrame, corpora: dict[str, list[str]],
           pairs: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(a) true / false candidates as queries and topics per corpus; (b) queries per reformulation type.

    A query counts once per topic it was annotated for (Robust04: 648 true of 642 distinct queries, 172 topics).
    ``pairs`` (:func:`leakexp.lib.candidates.leak_pairs`) attribute a topic id that corpora use with different texts to
    the corpus whose text the candidate matched, as :func:`verified_leaks` does."""
    import pandas as pd

    rows_a, per_corpus = [], {}
    for corpus, topic_ids in corpora.items():
        a = corpus_annotations(annotations, topic_ids, corpus=corpus, pairs=pairs)
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


NO_LABEL = "(none)"  # pads the shorter of two sorted label lists in kappa_labels


def cohen_kappa(a: list, b: list) -> float:
    """Cohen's kappa of two aligned label lists (statsmodels' ``cohens_kappa`` on their contingency table).

    Two raters who both use one and the same label throughout agree perfectly (1.0; the formula is 0/0)."""
    from statsmodels.stats.inter_rater import cohens_kappa

    if len(a) != len(b) or not a:
        raise ValueError("kappa needs two non-empty label lists of the same length")
    labels = sorted(set(a) | set(b), key=str)
    if len(labels) == 1:
        return 1.0
    index = {label: i for i, label in enumerate(labels)}
    table = np.zeros((len(labels), len(labels)))
    np.add.at(table, ([index[x] for x in a], [index[y] for y in b]), 1)
    return float(cohens_kappa(table, return_results=False))


def label_positions(first: list[str], second: list[str]) -> tuple[list[str], list[str]]:
    """Two annotators' labels of one candidate as aligned ratings: each list sorted, the shorter padded with
    ``(none)``, so position i of one list is rated against position i of the other."""
    a, b = sorted(first), sorted(second)
    n = max(len(a), len(b))
    return a + [NO_LABEL] * (n - len(a)), b + [NO_LABEL] * (n - len(b))


def kappa(first: pd.DataFrame, second: pd.DataFrame) -> dict:
    """Agreement of two annotators on the candidates both judged (joined on training query and topic).

    - ``kappa_leak``: on leak or not (a candidate is a leak unless labelled Different Topic), one rating per
      candidate;
    - ``kappa_type``: on the title's reformulation type (Identical, Specialization, Generalization,
      Reformulation or Different Topic), one rating per candidate;
    - ``kappa_labels``: on the whole label sets, title and variant labels together: each annotator's labels
      sorted and compared position by position (:func:`label_positions`), one rating per position. This is
      the figure the paper reports (Section 3: 0.59 on 103 candidates); on the study's iteration-01
      agreement files it gives 0.592, against 0.559 (leak) and 0.419 (type).
    """
    m = first.merge(second, on=["train_qid", "topic_qid"], suffixes=("_a", "_b"))
    if m.empty:
        raise ValueError("the two annotation files share no (ms-marco-qid, topic) candidate")
    pos_a, pos_b = [], []
    for la, lb in zip(m.labels_a, m.labels_b):
        a, b = label_positions(la, lb)
        pos_a += a
        pos_b += b
    return {
        "candidates": len(m),
        "kappa_leak": cohen_kappa(m.leak_a.tolist(), m.leak_b.tolist()),
        "kappa_type": cohen_kappa(m.type_a.tolist(), m.type_b.tolist()),
        "kappa_labels": cohen_kappa(pos_a, pos_b),
        "label_positions": len(pos_a),
    }


def detection_quality(pairs: pd.DataFrame, truth: pd.DataFrame) -> dict:
    """Recall and precision of candidate pairs (above the threshold) against the toy world's planted leaks."""
    planted = {(str(r.train_qid), str(r.topic_qid)) for r in truth.itertuples(index=False) if r.type != DIFFERENT}
    found = {(str(a), str(b)) for a, b in zip(pairs.train_qid, pairs.topic_qid)}
    hit = len(planted & found)
    return {"planted": len(planted), "candidates": len(found), "true_positives": hit,
            "recall": hit / len(planted) if planted else float("nan"),
            "precision": hit / len(found) if found else float("nan")}
