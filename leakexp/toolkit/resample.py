"""Remedies for a leaking train/test pair: decontamination, and resampling for interpolation vs extrapolation.

- ``decontaminate`` (DuReader-retrieval, Section 2.3): the training data without every training query
  whose similarity to some test query is above the threshold (DuReader: a query-matching model at 0.5;
  here SBERT cosine at the detection threshold), optionally also without those sharing a relevant
  document, with the list of what was removed and why. The output loads back as local files.
- ``restrain`` (ReSTrain, Zhan et al., "Evaluating Extrapolation Performance of Dense Retrieval";
  github.com/jingtaozhan/extrapolate-eval, README "Resampling Training Queries"): training sets of given
  sizes for interpolation (the training queries most similar to the test queries, balanced over test
  queries) and extrapolation (only training queries not above a similarity threshold for any test query).
- ``resttest`` (ReSTTest, same README, "Resampling Training and Test Queries"): k-means over training and
  test queries into K buckets; for each bucket, train on the other K-1 buckets and split the test queries
  into interpolation (other buckets) and extrapolation (this bucket).

extrapolate-eval publishes only the resulting qrels files (``restrain_files/``, ``resttest_files/``), not
the scripts that made them; the layout and the properties of those files are what is reproduced here:
the ReSTrain sets are nested (every 14k query is in the 45k set, every 45k query in the 200k set) and the
interpolation and extrapolation sets are disjoint; in ReSTTest every test query is in exactly one
extrapolation bucket, and interpolation + extrapolation cover the test set in every bucket.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Sequence, TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from leakexp.lib.decisions import above, ranked, rounded
from leakexp.lib.dense import exact_topk
from leakexp.lib.report import write_table
from leakexp.runner.store import Store, atomic_write_json, atomic_write_text
from leakexp.toolkit.audit import AuditOptions, Embedder, SbertEmbedder
from leakexp.toolkit.overlap import label_pairs, nearest, normalize, train_best_match
from leakexp.toolkit.queries import QuerySide, load_side

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd


log = logging.getLogger(__name__)

SET_KINDS = ("interpolate", "extrapolate")


def _clean(text: str) -> str:
    """A text that fits one TSV field."""
    return " ".join(str(text).replace("\t", " ").splitlines())


def qrels_text(qrels: pd.DataFrame) -> str:
    """TREC qrels lines ``qid 0 docno label`` in the frame's order."""
    return "".join(f"{q} 0 {d} {int(l)}\n" for q, d, l in zip(qrels.qid, qrels.docno, qrels.label))


def _select_qrels(side: QuerySide, rows: np.ndarray, source: str) -> pd.DataFrame:
    """The qrels lines (input order) of the queries at ``rows`` of ``side.queries`` that come from ``source``."""
    q = side.queries.iloc[np.sort(rows)]
    qids = set(q.qid[q.source == source])
    qr = side.qrels
    return qr[(qr.source == source) & qr.qid.isin(qids)]


def _eligible(train: QuerySide, train_rel: int) -> np.ndarray:
    """Training queries that can be trained on: those with a judged relevant document."""
    import pandas as pd

    if train.qrels.empty:
        raise ValueError("the training side has no qrels; ReSTrain and ReSTTest write training qrels, so give "
                         "--train-qrels (or an ir_datasets id with qrels)")
    rel = train.qrels[train.qrels.label >= train_rel][["source", "qid"]].drop_duplicates()
    index = pd.MultiIndex.from_frame(train.queries[["source", "qid"]])
    hit = index.get_indexer(pd.MultiIndex.from_frame(rel))
    eligible = np.zeros(len(train.queries), dtype=bool)
    eligible[hit[hit >= 0]] = True
    return eligible


# -- decontamination ----------------------------------------------------------------------------------------
def pairs_above(train_emb: np.ndarray, test_emb: np.ndarray, sims: np.ndarray, ids: np.ndarray, threshold: float,
                *, chunk_size: int = 65536) -> pd.DataFrame:
    """Every (test text row, training row) pair above ``threshold``, exactly.

    The top-k holds them all unless a text's k-th neighbour is still above the threshold; such texts are
    compared with every training query (in chunks), so that match counts are never capped at k.
    """
    import pandas as pd

    n = len(train_emb)
    if n == 0 or len(test_emb) == 0 or sims.size == 0:
        return pd.DataFrame({"text": np.zeros(0, np.int64), "train": np.zeros(0, np.int64)})
    saturated = (sims.shape[1] < n) & above(sims[:, -1], threshold)
    r, c = np.nonzero(above(sims, threshold) & (ids >= 0) & ~saturated[:, None])
    parts = [pd.DataFrame({"text": r.astype(np.int64), "train": ids[r, c].astype(np.int64)})]
    sat_rows = np.flatnonzero(saturated)
    if len(sat_rows):
        base = np.ascontiguousarray(test_emb[sat_rows], dtype=np.float32)
        for s0 in range(0, n, chunk_size):
            block = base @ np.asarray(train_emb[s0:s0 + chunk_size], dtype=np.float32).T
            rr, cc = np.nonzero(above(block, threshold))
            parts.append(pd.DataFrame({"text": sat_rows[rr].astype(np.int64), "train": (cc + s0).astype(np.int64)}))
    return pd.concat(parts, ignore_index=True).drop_duplicates().reset_index(drop=True)


def exact_pairs(train: QuerySide, test: QuerySide) -> pd.DataFrame:
    """Every (test text row, training row) pair whose texts are equal after normalisation (NFKC, case folding,
    punctuation): an exact duplicate is a leak whatever its embedding similarity."""
    import pandas as pd

    test_norm = pd.DataFrame({"norm": [normalize(t) for t in test.texts.text], "text": np.arange(len(test.texts))})
    train_norm = pd.DataFrame({"norm": [normalize(t) for t in train.texts.text], "train": np.arange(len(train.texts))})
    m = test_norm[test_norm.norm != ""].merge(train_norm, on="norm")
    return m[["text", "train"]].astype(np.int64).sort_values(["train", "text"]).reset_index(drop=True)


def decontaminate(
    train: QuerySide, test: QuerySide, embed: Embedder, out_dir: Path, *, threshold: float, k: int = 100,
    by_label: bool = False, train_rel: int = 1, test_rel: int = 1, shard_size: int = 262_144,
    docs: str | None = None, relative_paths: bool = False,
) -> dict:
    """Write the training side without every query above ``threshold`` for some test text, and without
    every exact duplicate of a test text (after normalisation) whatever its similarity.

    ``out_dir`` gets ``<source>.queries.tsv`` and ``<source>.qrels.txt`` per training source, ``qrels.txt``
    (all sources, the local data format's single qrels file), ``removed.csv`` (each removed query with
    its reason, the matching test query and similarity, or the shared document), ``matches.csv`` (per test
    query, how many training queries match it), ``data.yaml`` (a ``data=local`` config for the result)
    and ``decontaminate.json`` (counts). Same input, same bytes. ``relative_paths``: ``data.yaml`` names the files
    relative to its own folder (inside a store artifact, which must not depend on where the store is), not by
    their absolute paths.
    """
    import pandas as pd

    if train.texts.empty or test.texts.empty:
        raise ValueError("decontaminate needs queries on both sides (--train and --test)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tq = train.queries
    train_emb = embed(train.texts.text.tolist(), "train")
    test_emb = embed(test.texts.text.tolist(), "test")
    sims, ids = nearest(train_emb, test_emb, k, shard_size)
    best, row = train_best_match(train_emb, test_emb, sims, ids, threshold)
    similar = above(best, threshold)
    exact = exact_pairs(train, test)
    first_exact = exact.drop_duplicates("train")  # the first test text an exact duplicate matches
    is_exact = np.zeros(len(tq), dtype=bool)
    train_owner = train.owner
    is_exact[train_owner[first_exact.train.to_numpy()]] = True
    exact_only = is_exact & ~similar
    # an exact duplicate below the threshold is listed with its own test text and actual similarity
    row = row.copy()
    best = best.copy()
    ex_rows = first_exact.text.to_numpy()
    ex_q = train_owner[first_exact.train.to_numpy()]
    sel = exact_only[ex_q]
    row[ex_q[sel]] = ex_rows[sel]
    best[ex_q[sel]] = np.einsum("ij,ij->i", np.asarray(train_emb[first_exact.train.to_numpy()[sel]]),
                                np.asarray(test_emb[ex_rows[sel]]))
    matched = similar | is_exact
    tt = test.texts
    removed = pd.DataFrame({
        "source": tq.source, "qid": tq.qid, "text": tq.text, "similar": similar, "exact": is_exact,
        "test_source": np.where(matched, tt.source.to_numpy()[np.maximum(row, 0)], ""),
        "test_qid": np.where(matched, tt.qid.to_numpy()[np.maximum(row, 0)], ""),
        "test_field": np.where(matched, tt.field.to_numpy()[np.maximum(row, 0)], ""),
        "test_text": np.where(matched, tt.text.to_numpy()[np.maximum(row, 0)], ""),
        "similarity": np.where(matched, best, np.nan),
    })
    removed["label"], removed["docno"] = False, ""
    if by_label:
        pairs = label_pairs(train.qrels, test.qrels, train_rel=train_rel, test_rel=test_rel)
        first = pairs.drop_duplicates(["train_source", "train_qid"])  # sorted: the smallest test query, docno
        idx = pd.MultiIndex.from_frame(tq[["source", "qid"]]).get_indexer(
            pd.MultiIndex.from_frame(first[["train_source", "train_qid"]]))
        keep = idx >= 0
        idx, first = idx[keep], first[keep]
        removed.loc[idx, "label"] = True
        removed.loc[idx, "docno"] = first.docno.to_numpy()
        no_sim = ~removed.loc[idx, ["similar", "exact"]].any(axis=1).to_numpy()
        for col, src in (("test_source", "test_source"), ("test_qid", "test_qid")):
            removed.loc[idx[no_sim], col] = first[src].to_numpy()[no_sim]
    drop = (removed.similar | removed.exact | removed.label).to_numpy()
    parts = [np.where(removed[c], name, "") for c, name in (("similar", "similarity"), ("exact", "exact"),
                                                             ("label", "label"))]
    removed["reason"] = ["+".join(p for p in ps if p) for ps in zip(*parts)]
    listing = removed[drop][["source", "qid", "text", "reason", "test_source", "test_qid", "test_field", "test_text",
                             "similarity", "docno"]]
    atomic_write_text(out_dir / "removed.csv", listing.to_csv(index=False, float_format="%.6f"))
    # every test query with at least one training query above the threshold (or an exact duplicate)
    links = pd.concat([pairs_above(train_emb, test_emb, sims, ids, threshold), exact], ignore_index=True)
    links = pd.DataFrame({"q": test.owner[links.text.to_numpy()], "t": train_owner[links.train.to_numpy()]})
    per_test = links.drop_duplicates().groupby("q").size().reindex(range(len(test.queries)), fill_value=0)
    te = test.queries
    matches = pd.DataFrame({"source": te.source, "qid": te.qid, "matches": per_test.to_numpy().astype(np.int64)})
    atomic_write_text(out_dir / "matches.csv", matches[matches.matches > 0].to_csv(index=False))
    distribution = matches.matches[matches.matches > 0].value_counts().sort_index()
    kept_rows = np.flatnonzero(~drop)
    files: dict[str, dict[str, str]] = {}
    counts = {}
    all_qrels = []
    for source in train.sources:
        mine = tq.iloc[kept_rows][tq.source.to_numpy()[kept_rows] == source]
        qpath = atomic_write_text(out_dir / f"{source.replace('/', '_')}.queries.tsv",
                                  "".join(f"{q}\t{_clean(t)}\n" for q, t in zip(mine.qid, mine.text)))
        qr = _select_qrels(train, kept_rows, source)
        rpath = atomic_write_text(out_dir / f"{source.replace('/', '_')}.qrels.txt", qrels_text(qr))
        all_qrels.append(qr)
        files[source] = {"queries": qpath.name, "qrels": rpath.name}
        counts[source] = {"queries": int((tq.source == source).sum()), "kept": len(mine),
                          "removed": int(((tq.source == source).to_numpy() & drop).sum())}
    atomic_write_text(out_dir / "qrels.txt", qrels_text(pd.concat(all_qrels, ignore_index=True)))
    _write_data_yaml(out_dir, files, docs, relative_paths)
    figures = {
        "threshold": threshold, "k": k, "by_label": by_label, "train_rel": train_rel, "test_rel": test_rel,
        "train_queries": len(tq), "removed": int(drop.sum()), "removed_similarity": int(similar.sum()),
        "removed_exact_only": int(exact_only.sum()),
        "removed_label_only": int((removed.label & ~removed.similar & ~removed.exact).sum()),
        "test_queries": len(te),
        "test_queries_matched": int((matches.matches > 0).sum()),
        "matches_per_test_query": {str(int(n)): int(c) for n, c in distribution.items()},
        "sources": counts, "files": files,
    }
    atomic_write_json(out_dir / "decontaminate.json", figures)
    return figures


def matches_line(figures: dict) -> str:
    """The match count distribution as one line: how many test queries have 1, 2, ... matching training queries."""
    d = figures["matches_per_test_query"]
    shown = ", ".join(f"{n}: {c}" for n, c in d.items()) if len(d) <= 8 else \
        ", ".join(f"{n}: {c}" for n, c in list(d.items())[:6]) + f", ... max {list(d)[-1]}"
    return (f"test queries matched: {figures['test_queries_matched']} of {figures['test_queries']} have at least one "
            f"training query above {figures['threshold']:g} or an exact duplicate"
            + (f" (matches per test query -> test queries: {shown})" if d else ""))


def _write_data_yaml(out_dir: Path, files: dict[str, dict[str, str]], docs: str | None, relative: bool) -> None:
    """A ``data=local`` config (conf/data/local.yaml) for the result, when its sources map onto it; ``relative``:
    its paths relative to its own folder."""
    names = list(files)
    if len(names) > 2:
        log.info("%d training sources: no data.yaml (the local data format has two, msmarco and orcas)", len(names))
        return
    mapping = {}
    for slot in ("msmarco", "orcas"):
        mapping[slot] = slot if slot in files else next((n for n in names if n not in mapping.values()
                                                          and n not in ("msmarco", "orcas")), None)
    empty = out_dir / "empty.queries.tsv"
    lines = ["# leakexp data config for the decontaminated training queries (see conf/data/local.yaml):",
             "# copy it to conf/data/ or pass its values as data.* overrides with data=local."]
    if relative:
        lines.append("# the file names are relative to this file's folder: prefix them with where it lies.")
    lines += ["kind: local", "name: decontaminated"]
    where = (lambda p: p.name) if relative else (lambda p: p.resolve())
    for slot in ("msmarco", "orcas"):
        src = mapping[slot]
        if src is None:
            atomic_write_text(empty, "")
            lines += [f"{slot}: {where(empty)}", f"{slot}_qrels: {where(empty)}"]
        else:
            lines += [f"{slot}: {where(out_dir / files[src]['queries'])}   # source {src}",
                      f"{slot}_qrels: {where(out_dir / files[src]['qrels'])}"]
    lines += [f"docs: {docs if docs else '???    # the training documents (JSONL or TSV), unchanged'}",
              "corpora: ???   # names of corpus configs"]
    atomic_write_text(out_dir / "data.yaml", "\n".join(lines) + "\n")


# -- ReSTrain -------------------------------------------------------------------------------------------------
def interpolation_order(
    sims: np.ndarray, ids: np.ndarray, owner: np.ndarray, n_queries: int, eligible: np.ndarray, size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """The most similar training queries, balanced over test queries: in rounds, every test query adds its
    most similar training query not yet taken (a round in the order of those similarities).

    ``sims``/``ids``: top neighbours of every test text; ``owner``: the test query of each text. Returns
    (training rows, similarity, test query) in selection order, so every smaller size is a prefix of a
    larger one, and whether a test query's list ran out before ``size`` was reached (then deepen the
    search and call again).
    """
    import pandas as pd

    k = sims.shape[1]
    n_train = len(eligible)
    flat = pd.DataFrame({"q": np.repeat(owner, k), "t": ids.ravel(), "s": sims.ravel()})
    flat = flat[(flat.t >= 0)]
    flat = flat[eligible[flat.t.to_numpy()]]
    flat = ranked(flat, "s", by=["q"], ties=["t"])
    flat = flat.drop_duplicates(["q", "t"])
    lists_t = [np.zeros(0, np.int64)] * n_queries
    lists_s = [np.zeros(0, np.float32)] * n_queries
    for q, g in flat.groupby("q", sort=True):
        lists_t[q], lists_s[q] = g.t.to_numpy(), g.s.to_numpy()
    complete = k >= n_train  # every list holds every eligible training query
    taken = np.zeros(n_train, dtype=bool)
    ptr = np.zeros(n_queries, dtype=np.int64)
    out_t, out_s, out_q = [], [], []
    ran_out = False

    def advance(q: int) -> int:
        p, lt = ptr[q], lists_t[q]
        while p < len(lt) and taken[lt[p]]:
            p += 1
        ptr[q] = p
        return p

    while len(out_t) < size:
        heads = []
        for q in range(n_queries):
            p = advance(q)
            if p < len(lists_t[q]):
                heads.append((-float(rounded(lists_s[q][p])), q))
            elif not complete:
                ran_out = True
        if not heads or ran_out:
            break
        heads.sort()
        for _, q in heads:
            p = advance(q)
            if p >= len(lists_t[q]):
                continue
            t = lists_t[q][p]
            taken[t] = True
            ptr[q] = p + 1
            out_t.append(t), out_s.append(lists_s[q][p]), out_q.append(q)
            if len(out_t) == size:
                break
    return (np.asarray(out_t, dtype=np.int64), np.asarray(out_s, dtype=np.float32),
            np.asarray(out_q, dtype=np.int64), ran_out and len(out_t) < size)


def _interpolation(train_emb, test_emb, test: QuerySide, eligible: np.ndarray, n_pick: int, k: int,
                   shard_size: int):
    """:func:`interpolation_order` for ``n_pick`` queries, the search deepened until no test query's list runs out:
    (rows, similarity, test query, sims, ids, depth)."""
    n_train, nq = len(eligible), len(test.queries)
    depth = min(n_train, max(k, 2 * math.ceil(n_pick / max(nq, 1)) + 8))
    while True:
        sims, ids = nearest(train_emb, test_emb, depth, shard_size)
        rows, sim, by, ran_out = interpolation_order(sims, ids, test.owner, nq, eligible, n_pick)
        if not ran_out or depth >= n_train:
            return rows, sim, by, sims, ids, depth
        depth = min(n_train, depth * 2)
        log.info("a test query ran out of neighbours: searching the top-%d", depth)


def _largest_size(order: np.ndarray, below: np.ndarray, lines: np.ndarray, unit: str) -> int:
    """The largest size both sets fill: its interpolation set (a prefix of the full selection ``order``) and its
    extrapolation set (from the queries ``below`` the threshold that prefix does not hold); sizes that fit form a
    prefix of 0, 1, 2, ..., so a binary search finds the last."""
    taken = np.cumsum(lines[order] * below[order])
    total, below_lines = int(lines[order].sum()), int(lines[below].sum())

    def fits(size: int) -> bool:
        m = _prefix(lines[order], size, unit)
        return size <= total and below_lines - (int(taken[m - 1]) if m else 0) >= size

    lo, hi = 0, total
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


SIZE_UNITS = ("queries", "qrels")


def _qrels_lines(side: QuerySide) -> np.ndarray:
    """Qrels lines per query of ``side.queries`` (what a written training file holds for it)."""
    import pandas as pd

    counts = side.qrels.groupby(["source", "qid"], sort=False).size()
    index = pd.MultiIndex.from_frame(side.queries[["source", "qid"]])
    return counts.reindex(index, fill_value=0).to_numpy().astype(np.int64)


def _prefix(lines: np.ndarray, size: int, unit: str) -> int:
    """How many queries of a selection order make a set of ``size``: that many queries, or the shortest prefix
    with at least ``size`` qrels lines (sets stay nested either way)."""
    if unit == "queries":
        return size
    return int(np.searchsorted(np.cumsum(lines), size) + 1)


def restrain(
    train: QuerySide, test: QuerySide, embed: Embedder, out_dir: Path, *, sizes: Sequence[int], threshold: float,
    k: int = 100, seed: int = 0, train_rel: int = 1, shard_size: int = 262_144, unit: str = "queries",
) -> pd.DataFrame:
    """ReSTrain: nested interpolation and extrapolation training sets of the given sizes.

    A size counts training queries (``unit="queries"``) or qrels lines (``"qrels"``: extrapolate-eval's
    released files are named by their size in qrels lines, e.g. 14k); in lines, a set is the shortest prefix
    of the selection order with at least that many lines. Writes ``restrain/<size>/<kind>.<train source>-qrel.txt``
    (extrapolate-eval's ``restrain_files/msmarco-passage/14k/interpolate.train-qrel.txt`` for a source named
    ``train``), the selection order in ``restrain/selection.csv`` and a summary table ``restrain/summary.{md,csv,tex}``.
    Interpolation: ``interpolation_order``. Extrapolation: a seeded random sample of the training queries
    whose best similarity to every test text is at most ``threshold``, and that the largest interpolation
    set does not hold (so the two kinds are disjoint, as in the released files). Only training queries with
    a relevant document (label >= train_rel) are drawn.
    """
    import pandas as pd

    if unit not in SIZE_UNITS:
        raise ValueError(f"--size-unit {unit}: use queries (training queries) or qrels (qrels lines)")
    what = "training queries" if unit == "queries" else "qrels lines"
    of_what = "training queries" if unit == "queries" else "qrels lines of training queries"
    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] <= 0:
        raise ValueError(f"--sizes {list(sizes)}: give one or more positive numbers of {what}")
    eligible = _eligible(train, train_rel)
    lines = _qrels_lines(train) if unit == "qrels" else np.ones(len(train.queries), dtype=np.int64)
    max_size = sizes[-1]
    train_emb = embed(train.texts.text.tolist(), "train")
    test_emb = embed(test.texts.text.tolist(), "test")
    # queries enough for the largest size (a query has >= 1 line)
    rows, sim, by, sims, ids, depth = _interpolation(train_emb, test_emb, test, eligible,
                                                     min(max_size, int(eligible.sum())), k, shard_size)
    m = _prefix(lines[rows], max_size, unit)
    rows, sim, by = rows[:m], sim[:m], by[:m]
    best, _ = train_best_match(train_emb, test_emb, sims, ids, threshold)
    below = eligible & ~above(best, threshold)  # what extrapolation may draw from, but the interpolation set
    pool = below.copy()
    pool[rows] = False
    candidates = np.flatnonzero(pool)
    if lines[eligible].sum() < max_size or lines[candidates].sum() < max_size:
        order = _interpolation(train_emb, test_emb, test, eligible, int(eligible.sum()), k, shard_size)[0]
        raise ValueError(
            f"--sizes: the largest size {max_size} cannot be filled twice over: the training side holds "
            f"{int(lines[eligible].sum())} {of_what} with a relevant document, {int(lines[below].sum())} of them not "
            f"above {threshold:g} for any test query, and the extrapolation set draws only from those the "
            f"interpolation set of the same size does not hold; choose sizes <= "
            f"{_largest_size(order, below, lines, unit)} (or a higher --extrapolation-threshold)")
    out = Path(out_dir) / "restrain"  # written only once every size can be filled
    out.mkdir(parents=True, exist_ok=True)
    extra = np.random.default_rng(seed).permutation(candidates)
    extra = extra[:_prefix(lines[extra], max_size, unit)]
    # verify and report: each extrapolation query's actual best similarity to the test texts
    extra_best = np.full(len(extra), np.nan, dtype=np.float32)
    for s0 in range(0, len(extra), 65536):
        chunk = np.sort(extra[s0:s0 + 65536])
        sc, _ = exact_topk(test_emb, np.asarray(train_emb[chunk]), 1)
        extra_best[s0:s0 + len(chunk)] = pd.Series(sc[:, 0], index=chunk).loc[extra[s0:s0 + 65536]].to_numpy()
    tq, te = train.queries, test.queries
    selection = pd.concat([
        pd.DataFrame({"kind": "interpolate", "order": np.arange(1, len(rows) + 1), "source": tq.source.to_numpy()[rows],
                      "qid": tq.qid.to_numpy()[rows], "similarity": sim, "test_source": te.source.to_numpy()[by],
                      "test_qid": te.qid.to_numpy()[by]}),
        pd.DataFrame({"kind": "extrapolate", "order": np.arange(1, len(extra) + 1), "source": tq.source.to_numpy()[extra],
                      "qid": tq.qid.to_numpy()[extra], "similarity": extra_best, "test_source": "", "test_qid": ""}),
    ], ignore_index=True)
    atomic_write_text(out / "selection.csv", selection.to_csv(index=False, float_format="%.6f"))
    summary = []
    for size in tqdm(sizes, desc="restrain", unit="size", leave=False):
        d = out / str(size)
        for kind, order, sims_of in (("interpolate", rows, sim), ("extrapolate", extra, extra_best)):
            n = _prefix(lines[order], size, unit)
            chosen, s = order[:n], sims_of[:n]
            written = 0
            for source in train.sources:
                qr = _select_qrels(train, chosen, source)
                atomic_write_text(d / f"{kind}.{source.replace('/', '_')}-qrel.txt", qrels_text(qr))
                written += len(qr)
            summary.append({"kind": kind, "size": size, "queries": len(chosen), "qrels": written,
                            "mean similarity": float(np.mean(s)), "max similarity": float(np.max(s))})
    table = pd.DataFrame(summary)
    write_table(table, out, "summary", f"ReSTrain training sets; a size counts {what} (qrels: the shortest prefix "
                                       f"with at least that many qrels lines). Extrapolation: best similarity to "
                                       f"every test text at most {threshold:g}; seed {seed}.")
    atomic_write_json(out / "restrain.json", {"sizes": sizes, "unit": unit, "threshold": threshold, "seed": seed,
                                              "train_rel": train_rel, "depth": int(depth),
                                              "extrapolation_pool": int(len(candidates))})
    return table


# -- ReSTTest -------------------------------------------------------------------------------------------------
def kmeans_buckets(parts: Sequence[np.ndarray], buckets: int, *, seed: int = 0, sample: int = 100_000,
                   niter: int = 20, chunk_size: int = 65536) -> list[np.ndarray]:
    """Spherical k-means (Faiss, seeded) trained on a seeded sample of all rows, then every row assigned.

    Returns one array of buckets (1..K) per part; buckets are numbered in order of first appearance.
    """
    import faiss

    sizes = [len(p) for p in parts]
    total = sum(sizes)
    if total < buckets:
        raise ValueError(f"--buckets {buckets}: only {total} queries to cluster")
    d = parts[0].shape[1]
    rng = np.random.default_rng(seed)
    picks = np.sort(rng.choice(total, size=min(sample, total), replace=False))
    offsets = np.cumsum([0, *sizes])
    train_x = np.concatenate([np.asarray(p[picks[(picks >= a) & (picks < b)] - a], dtype=np.float32)
                              for p, a, b in zip(parts, offsets[:-1], offsets[1:])])
    km = faiss.Kmeans(d, buckets, niter=niter, seed=seed, spherical=True, verbose=False,
                      max_points_per_centroid=max(1, math.ceil(len(train_x) / buckets)), min_points_per_centroid=1)
    km.train(np.ascontiguousarray(train_x))
    index = faiss.IndexFlatIP(d)
    index.add(np.ascontiguousarray(km.centroids, dtype=np.float32))
    labels = []
    for p in parts:
        lab = np.empty(len(p), dtype=np.int64)
        for s in range(0, len(p), chunk_size):
            _, ix = index.search(np.ascontiguousarray(p[s:s + chunk_size], dtype=np.float32), 1)
            lab[s:s + chunk_size] = ix[:, 0]
        labels.append(lab)
    seen = list(dict.fromkeys(np.concatenate(labels).tolist()))
    order = seen + [c for c in range(buckets) if c not in seen]
    rename = np.empty(buckets, dtype=np.int64)
    rename[order] = np.arange(1, buckets + 1)
    return [rename[lab] for lab in labels]


def resttest(
    train: QuerySide, test: QuerySide, embed: Embedder, out_dir: Path, *, buckets: int = 5, seed: int = 0,
    sample: int = 100_000, niter: int = 20,
) -> pd.DataFrame:
    """ReSTTest: cluster training and test queries together; per bucket, train on the other K-1 buckets.

    Writes ``resttest/bucket-<b>/<train source>-qrel.txt`` (the training queries of the other buckets),
    ``interpolate.<test source>-qrel.txt`` (test queries in the other buckets) and
    ``extrapolate.<test source>-qrel.txt`` (test queries in bucket b), as extrapolate-eval's
    ``resttest_files/msmarco-passage/bucket-1/{train-qrel.txt, interpolate.dev-qrel.txt, ...}``; the
    bucket of every query in ``resttest/buckets.csv``; a summary table. A test query is clustered by its
    first compared text (its first field).
    """
    import pandas as pd

    if buckets < 2:
        raise ValueError(f"--buckets {buckets}: give at least 2 buckets (train on K-1, extrapolate to 1; "
                         "extrapolate-eval: 5)")
    if train.texts.empty or test.texts.empty:
        raise ValueError("resttest needs queries on both sides (--train and --test)")
    _eligible(train, 1)  # the buckets' training files are qrels
    out = Path(out_dir) / "resttest"
    out.mkdir(parents=True, exist_ok=True)
    train_emb = embed(train.texts.text.tolist(), "train")
    test_emb = embed(test.texts.text.tolist(), "test")
    first = test.texts.reset_index(drop=True).drop_duplicates(["source", "qid"]).index.to_numpy()
    train_b, test_b = kmeans_buckets([train_emb, np.asarray(test_emb)[first]], buckets, seed=seed, sample=sample,
                                     niter=niter)
    tq, te = train.queries, test.queries
    assignment = pd.concat([
        pd.DataFrame({"side": "train", "source": tq.source, "qid": tq.qid, "bucket": train_b}),
        pd.DataFrame({"side": "test", "source": te.source, "qid": te.qid, "bucket": test_b}),
    ], ignore_index=True)
    atomic_write_text(out / "buckets.csv", assignment.to_csv(index=False))
    summary = []
    for b in range(1, buckets + 1):
        d = out / f"bucket-{b}"
        train_rows = np.flatnonzero(train_b != b)
        lines = 0
        for source in train.sources:
            qr = _select_qrels(train, train_rows, source)
            atomic_write_text(d / f"{source.replace('/', '_')}-qrel.txt", qrels_text(qr))
            lines += len(qr)
        row = {"bucket": b, "train queries in bucket": int((train_b == b).sum()),
               "training queries": len(train_rows), "training qrels": lines}
        for kind, rows in (("interpolate", np.flatnonzero(test_b != b)), ("extrapolate", np.flatnonzero(test_b == b))):
            for source in test.sources:
                atomic_write_text(d / f"{kind}.{source.replace('/', '_')}-qrel.txt",
                                  qrels_text(_select_qrels(test, rows, source)))
            row[f"test {kind}"] = len(rows)
        summary.append(row)
    table = pd.DataFrame(summary)
    write_table(table, out, "summary", f"ReSTTest buckets (spherical k-means, K={buckets}, seed {seed}): train on the "
                                       "other buckets, test on the interpolation and extrapolation queries.")
    if (table["test extrapolate"] == 0).any():
        log.warning("ReSTTest: bucket(s) %s hold no test query", table.bucket[table["test extrapolate"] == 0].tolist())
    return table


# -- command-line entry points ------------------------------------------------------------------------------
def _sides(train, test, train_qrels, test_qrels, fields, test_variants):
    if not train or not test:
        raise ValueError("give queries for both sides: --train and --test (ir_datasets ids or files)")
    tr = load_side(train, train_qrels, fields=["title"], role="train")
    te = load_side(test, test_qrels, fields=fields, variants=test_variants, role="test")
    return tr, te


def run_decontaminate(
    *, train: Sequence[str], test: Sequence[str], train_qrels: Sequence[str] = (), test_qrels: Sequence[str] = (),
    fields: Sequence[str] = ("title",), test_variants: Sequence[str] = (), out: Path, store: Path | None,
    sbert: str = "bundled", batch_size: int = 256, options: AuditOptions = AuditOptions(), by_label: bool = False,
    docs: str | None = None,
) -> dict:
    """``leakexp decontaminate``: load both sides, write the decontaminated training data into ``out``."""
    tr, te = _sides(train, test, train_qrels, test_qrels, fields, test_variants)
    embed = SbertEmbedder(Store(store) if store else None, sbert, batch_size=batch_size)
    return decontaminate(tr, te, embed, Path(out), threshold=options.threshold, k=options.k, by_label=by_label,
                         train_rel=options.train_rel, test_rel=options.test_rel, shard_size=options.shard_size, docs=docs)


def run_resample(
    method: str, *, train: Sequence[str], test: Sequence[str], train_qrels: Sequence[str] = (),
    test_qrels: Sequence[str] = (), fields: Sequence[str] = ("title",), test_variants: Sequence[str] = (),
    out: Path, store: Path | None, sbert: str = "bundled", batch_size: int = 256,
    options: AuditOptions = AuditOptions(), sizes: Sequence[int] = (), extrapolation_threshold: float | None = None,
    buckets: int = 5, seed: int = 0, sample: int = 100_000, unit: str = "queries",
) -> pd.DataFrame:
    """``leakexp resample restrain|resttest``: load both sides and write the resampled qrels into ``out``."""
    tr, te = _sides(train, test, train_qrels, test_qrels, fields, test_variants)
    embed = SbertEmbedder(Store(store) if store else None, sbert, batch_size=batch_size)
    if method == "restrain":
        if not sizes:
            raise ValueError("resample restrain needs --sizes, e.g. --sizes 1000 2000 4000 (--size-unit: queries "
                             "or qrels lines; extrapolate-eval's files: 14000 45000 200000 qrels lines)")
        t = options.threshold if extrapolation_threshold is None else extrapolation_threshold
        return restrain(tr, te, embed, Path(out), sizes=sizes, threshold=t, k=options.k, seed=seed,
                        train_rel=options.train_rel, shard_size=options.shard_size, unit=unit)
    if method == "resttest":
        return resttest(tr, te, embed, Path(out), buckets=buckets, seed=seed, sample=sample)
    raise ValueError(f"resample {method}: use restrain or resttest")
