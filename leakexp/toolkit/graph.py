"""A-leakage audit of graph benchmarks whose edges are split at random (``leakexp graph-audit``).

"On Leakage in Some Popular Benchmarks on Graphs" (ACL Rolling Review submission, 2022): when a graph's edges are split
into train / validation / test, a held-out pair (w_i, w_j) usually has a short path in the training graph,
and the parity of the number of antonym edges on it (A) predicts synonym vs antonym (§2, Tables 3-5). This
module reads such benchmarks (edge lists, WordNet 3.0 database files, or a seeded synthetic graph), measures
the paper's Tables 3-5 plus WN18-style reverse/duplicate edges across splits, and re-splits a graph on
vertices, the paper's remedy (§3), so that the audit can show the heuristic no longer applies. Readers,
the synthetic graph and the splits live in ``graph_data``.

Example::

    from leakexp.toolkit import graph
    edges = graph.edge_split(graph.synthetic_graph(seed=0), seed=0)
    figures = graph.graph_audit(edges, Path("out/graph"))          # tables, figure, per-edge CSV
    figures["splits"]["test"]["accuracy"]                     # A-parity accuracy on applicable test edges
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Sequence, TYPE_CHECKING

import numpy as np

from leakexp.data.files import DataFormatError
from leakexp.toolkit.graph_data import (  # the benchmark readers and splits, re-exported as graph.*
    ANTONYM_LABELS, DEFAULT_WORDNET, PAPER_PROPORTIONS, RESPLITS, SPLITS, SYNONYM_LABELS, WORDNET_FILES,
    check_proportions, component_split,
    edge_file, edge_split, read_edges, read_wordnet, synthetic_graph, vertex_index, vertex_split, wordnet_pairs,
    write_edges)
from leakexp.lib.report import save_figure, write_table
from leakexp.runner.store import atomic_write_json, atomic_write_text

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components


log = logging.getLogger(__name__)

LENGTH_BINS = ("0", "1", "2", "3", "4+", "NA")  # the rows of the paper's Table 4
NA = -1  # path length and A of a held-out pair without a path in the training graph


# ---------------------------------------------------------------------------------------------- paths

class TrainingGraph:
    """The undirected training graph in CSR form with, per vertex pair, which labels its edges carry (bit 1:
    a non-antonym edge, bit 2: an antonym edge) and whether it counts as an antonym on the first-found path
    (only when all its edges are)."""

    def __init__(self, vertices: pd.Index, head: np.ndarray, tail: np.ndarray, antonym: np.ndarray):
        import pandas as pd

        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        n = len(vertices)
        self.vertices, self.n = vertices, n
        ok = head != tail  # a self-loop never lies on a shortest path
        a, b, ant = np.minimum(head, tail)[ok], np.maximum(head, tail)[ok], antonym[ok]
        g = pd.DataFrame({"a": a, "b": b, "syn": ~ant, "ant": ant}).groupby(["a", "b"], sort=True)
        # a pair with edges of both labels counts as a synonym on the first-found path (whatever the input
        # order; its shortest paths then have both parities, a conflict)
        merged = pd.DataFrame({"bit": g.syn.max().astype(int) | 2 * g.ant.max().astype(int),
                               "first": g.ant.min()}).reset_index()
        rows = np.concatenate([merged.a, merged.b])
        cols = np.concatenate([merged.b, merged.a])
        order = np.lexsort((cols, rows))  # neighbours in ascending vertex index
        self.indices = cols[order].astype(np.int64)
        self.mask = np.concatenate([merged.bit, merged.bit])[order].astype(np.uint8)
        self.first = np.concatenate([merged["first"], merged["first"]])[order].astype(np.int32)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int64)
        self.degree = np.diff(self.indptr)
        adj = csr_matrix((np.ones(len(self.indices)), self.indices, self.indptr), shape=(n, n))
        self.components, self.component = connected_components(adj, directed=False)
        self.dist = np.full(n, NA, dtype=np.int64)
        self.parity = np.zeros(n, dtype=np.uint8)  # bit 1: an even shortest path exists, bit 2: an odd one
        self.count = np.zeros(n, dtype=np.int64)  # antonym edges on the first-found shortest path

    def from_source(self, s: int, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Shortest path length, parity bits and A of the first-found path from ``s`` to each target.

        One breadth-first search, level by level over the CSR arrays, stopping as soon as every target in
        ``s``'s component is reached. Parity bits are propagated over all shortest paths; the first-found
        path walks back from a target, at each step to its adjacent vertex one step closer to ``s`` with the
        smallest index (``held_out_paths`` numbers vertices in sorted order), so it does not depend on the
        order of the input."""
        dist, parity, count = self.dist, self.parity, self.count
        if not self.degree[s]:  # not a training vertex: no path, not even the empty one
            return np.full(len(targets), NA), np.zeros(len(targets), np.uint8), np.zeros(len(targets), np.int64)
        reach = targets[(self.component[targets] == self.component[s]) & (self.degree[targets] > 0)]
        touched = [np.array([s])]
        dist[s], parity[s], count[s] = 0, 1, 0
        frontier = np.array([s])
        level = 0
        while frontier.size and (dist[reach] == NA).any():
            level += 1
            starts, ends = self.indptr[frontier], self.indptr[frontier + 1]
            lens = ends - starts
            edge = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
            src = np.repeat(frontier, lens)  # ascending, since the frontier is
            nbr = self.indices[edge]
            new = dist[nbr] == NA
            src, nbr, edge = src[new], nbr[new], edge[new]
            if not nbr.size:
                break
            p, m = parity[src], self.mask[edge]
            flipped = ((p & 1) << 1) | (p >> 1)
            frontier, first = np.unique(nbr, return_index=True)  # first occurrence = smallest predecessor
            dist[frontier] = level
            np.bitwise_or.at(parity, nbr, np.where(m & 1, p, 0) | np.where(m & 2, flipped, 0))
            count[frontier] = count[src[first]] + self.first[edge[first]]
            touched.append(frontier)
        out = dist[targets].copy(), parity[targets].copy(), count[targets].copy()
        for t in touched:
            dist[t], parity[t], count[t] = NA, 0, 0
        return out


def held_out_paths(edges: pd.DataFrame, train_split: str = "train",
                   antonym_labels: Sequence[str] = ANTONYM_LABELS, progress: bool | None = None) -> pd.DataFrame:
    """For every held-out edge (any split but ``train_split``): the shortest path length between its ends in
    the undirected training graph (NA: none; 0: a self-pair of a training vertex), A on the first-found
    shortest path, whether shortest paths of both parities exist, and the A-parity prediction (antonym iff
    A is odd) against the gold label. One BFS per distinct head vertex."""
    import pandas as pd

    from tqdm.auto import tqdm

    # canonical order: vertices numbered in sorted order, each held-out pair searched from its smaller vertex,
    # so the first-found path (and A) does not depend on the order of the input's lines or of a pair's ends
    vertices = pd.Index(np.sort(pd.unique(np.concatenate([edges["head"].to_numpy(), edges["tail"].to_numpy()]))))
    h0, t0 = vertices.get_indexer(edges["head"]), vertices.get_indexer(edges["tail"])
    h, t = np.minimum(h0, t0), np.maximum(h0, t0)
    antonym = edges.label.str.lower().isin([a.lower() for a in antonym_labels]).to_numpy()
    is_train = (edges.split == train_split).to_numpy()
    if not is_train.any():
        raise DataFormatError(f"no edges in split {train_split!r} (splits: {', '.join(edges.split.unique())}); "
                              f"name the training split with --train-split")
    g = TrainingGraph(vertices, h[is_train], t[is_train], antonym[is_train])
    split = edges.split.to_numpy()
    held = np.concatenate([np.flatnonzero(split == name) for name in _split_order(edges, train_split)[1:]]
                          or [np.zeros(0, dtype=int)])
    length = np.full(len(held), NA)
    parity, count = np.zeros(len(held), dtype=np.uint8), np.zeros(len(held), dtype=np.int64)
    hh, ht = h[held], t[held]
    order = np.argsort(hh, kind="stable")  # positions in ``held``, grouped by head vertex
    sources, starts = np.unique(hh[order], return_index=True)
    for s, at in tqdm(zip(sources, np.split(order, starts[1:])), total=len(sources), desc="graph BFS",
                      unit="source", disable=None if progress is None else not progress, leave=False):
        length[at], parity[at], count[at] = g.from_source(int(s), ht[at])
    out = edges.iloc[held][["split", "head", "tail", "label"]].reset_index(drop=True)
    out["antonym"] = antonym[held]
    order = np.lexsort((out.label.to_numpy(), out["tail"].to_numpy(), out["head"].to_numpy(),
                        pd.Categorical(out.split, _split_order(edges, train_split)[1:], ordered=True).codes))
    out, length, parity, count = out.iloc[order].reset_index(drop=True), length[order], parity[order], count[order]
    out["path_length"] = length
    out["A"] = np.where(length == NA, NA, count)
    out["parity_conflict"] = parity == 3
    out["applicable"] = length != NA
    out["predicted_antonym"] = out.applicable & (count % 2 == 1)
    out["correct"] = out.applicable & (out.predicted_antonym == out.antonym)
    return out


# ---------------------------------------------------------------------------------------------- tables

def _split_order(edges: pd.DataFrame, train_split: str) -> list[str]:
    """Training split first, then val and test, then other splits in order of first appearance."""
    import pandas as pd

    rest = [s for s in pd.unique(edges.split) if s != train_split]
    return [train_split] + sorted(rest, key=lambda s: (SPLITS.index(s) if s in SPLITS else 3, rest.index(s)))


def graph_sizes(edges: pd.DataFrame, train_split: str = "train") -> pd.DataFrame:
    """Table 3: vertices, edges and connected components of each split's graph; for held-out splits also
    their vertices that the training graph lacks (all of them after a vertex split)."""
    import pandas as pd

    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    train_vertices = set(edges.loc[edges.split == train_split, ["head", "tail"]].to_numpy().ravel())
    rows = []
    for name in _split_order(edges, train_split):
        part = edges[edges.split == name]
        vertices, h, t = vertex_index(part)
        n = len(vertices)
        cc = connected_components(csr_matrix((np.ones(len(h)), (h, t)), shape=(n, n)), directed=False)[0]
        rows.append({"split": name, "V": n, "E": len(part), "CC": int(cc),
                     "V not in train": 0 if name == train_split else int((~vertices.isin(train_vertices)).sum())})
    return pd.DataFrame(rows)


def _bin(length: pd.Series) -> pd.Series:
    return length.map(lambda d: "NA" if d == NA else ("4+" if d >= 4 else str(d)))


def path_length_table(paths: pd.DataFrame) -> pd.DataFrame:
    """Table 4: held-out edges per shortest-path length in the training graph (rows 0-3, 4+, NA, total)."""
    import pandas as pd

    table = pd.crosstab(_bin(paths.path_length), paths.split).reindex(LENGTH_BINS, fill_value=0)
    table = table.reindex(columns=list(pd.unique(paths.split)), fill_value=0)
    table.loc["total"] = table.sum()
    return table.rename_axis(index="path length", columns=None).reset_index()


def a_parity_table(paths: pd.DataFrame) -> pd.DataFrame:
    """Table 5: A-parity accuracy over applicable edges, applicability, the majority-class rate on the
    applicable edges (the bar the heuristic must clear), and how often shortest paths disagree on parity."""
    import pandas as pd

    rows = []
    for name in pd.unique(paths.split):
        p = paths[paths.split == name]
        a = p[p.applicable]
        n_ant = int(a.antonym.sum())
        rows.append({"split": name, "edges": len(p), "applicable": len(a), "applicability": len(a) / len(p),
                     "accuracy": a.correct.mean() if len(a) else float("nan"),
                     # on a conflict edge one parity is right: the range over the choice of shortest path
                     "accuracy min": (a.correct & ~a.parity_conflict).mean() if len(a) else float("nan"),
                     "accuracy max": (a.correct | a.parity_conflict).mean() if len(a) else float("nan"),
                     "majority class": ("antonym" if n_ant * 2 > len(a) else "synonym") if len(a) else "",
                     "majority rate": max(n_ant, len(a) - n_ant) / len(a) if len(a) else float("nan"),
                     "parity conflicts": int(a.parity_conflict.sum()),
                     "conflict share": a.parity_conflict.mean() if len(a) else float("nan")})
    return pd.DataFrame(rows)


BALANCE_MARGIN = 0.10  # a split whose antonym share departs from the whole graph's by more is flagged


def accuracy_by_length(paths: pd.DataFrame) -> pd.DataFrame:
    """A-parity accuracy per held-out split and path length (0-3, 4+): one figure over all applicable edges
    hides that reverse edges (length 1) are nearly always right and longer paths much less so."""
    import pandas as pd

    p = paths[paths.applicable].assign(length=lambda d: _bin(d.path_length))
    rows = []
    for name in pd.unique(paths.split):
        for b in LENGTH_BINS[:-1]:
            g = p[(p.split == name) & (p.length == b)]
            rows.append({"split": name, "path length": b, "edges": len(g),
                         "accuracy": g.correct.mean() if len(g) else float("nan"),
                         "antonym share": g.antonym.mean() if len(g) else float("nan")})
    return pd.DataFrame(rows)


def class_balance(edges: pd.DataFrame, antonym_labels: Sequence[str] = ANTONYM_LABELS,
                  train_split: str = "train") -> tuple[pd.DataFrame, list[str]]:
    """Edges and antonym share of every split (train, val and test always), and a warning for each split that
    is empty or whose antonym share departs from the whole graph's by more than ``BALANCE_MARGIN``."""
    import pandas as pd

    antonym = edges.label.str.lower().isin([a.lower() for a in antonym_labels])
    overall = float(antonym.mean()) if len(edges) else float("nan")
    names = list(dict.fromkeys([train_split, *SPLITS, *_split_order(edges, train_split)]))
    rows, warnings = [], []
    for name in names:
        a = antonym[(edges.split == name).to_numpy()]
        share = float(a.mean()) if len(a) else float("nan")
        rows.append({"split": name, "edges": len(a), "antonym share": share})
        if not len(a):
            warnings.append(f"split {name} is empty")
        elif abs(share - overall) > BALANCE_MARGIN:
            warnings.append(f"split {name}: {100 * share:.1f} % antonyms against {100 * overall:.1f} % overall "
                            f"(more than {100 * BALANCE_MARGIN:.0f} points apart)")
    return pd.DataFrame(rows), warnings


def cross_split_pairs(edges: pd.DataFrame, train_split: str = "train") -> pd.DataFrame:
    """Held-out edges whose pair is also in another split, as the same pair (duplicate) or reversed (the WN18
    kind: (a, b) in test, (b, a) in train), with the other split's label."""
    import pandas as pd

    held = edges[edges.split != train_split].reset_index(drop=True)
    other = edges.rename(columns={"split": "other split", "label": "other label"})
    found = []
    for kind, keys in (("duplicate", ["head", "tail"]), ("reverse", ["tail", "head"])):
        right = other.rename(columns=dict(zip(["head", "tail"], keys)))
        m = held.merge(right, on=["head", "tail"], how="inner")
        found.append(m[m.split != m["other split"]].assign(kind=kind))
    cols = ["split", "head", "tail", "label", "kind", "other split", "other label"]
    return pd.concat(found, ignore_index=True)[cols].drop_duplicates().reset_index(drop=True)


def cross_split_table(edges: pd.DataFrame, pairs: pd.DataFrame, train_split: str = "train") -> pd.DataFrame:
    """Per held-out split and other split: edges found there as duplicates or reverses (same / other label)."""
    import pandas as pd

    order = _split_order(edges, train_split)
    rows = []
    for name in order[1:]:
        for other in (o for o in order if o != name):
            p = pairs[(pairs.split == name) & (pairs["other split"] == other)]
            row = {"split": name, "other split": other, "edges": int((edges.split == name).sum())}
            for kind in ("duplicate", "reverse"):
                k = p[p.kind == kind]
                same = k.label == k["other label"]
                row[f"{kind}s"] = len(k[["head", "tail", "label"]].drop_duplicates())
                row[f"{kind}s, same label"] = len(k[same][["head", "tail", "label"]].drop_duplicates())
            rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- reports

def plot_path_lengths(paths: pd.DataFrame, path: Path, title: str = "") -> Path:
    """Bar chart: the share of each held-out split's edges per shortest-path length (Table 4), atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = path_length_table(paths).set_index("path length").drop("total")
    share = table / table.sum()
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    width = 0.8 / max(1, len(share.columns))
    x = np.arange(len(share.index))
    for i, col in enumerate(share.columns):
        ax.bar(x + (i - (len(share.columns) - 1) / 2) * width, share[col], width, label=f"{col} ({table[col].sum()})")
    ax.set_xticks(x, share.index)
    ax.set_xlabel("shortest path length in the training graph")
    ax.set_ylabel("share of held-out edges")
    ax.set_title(title, fontsize=9)
    if len(share.columns):
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path)
    plt.close(fig)
    return path


def graph_audit(edges: pd.DataFrame, out_dir: Path, *, train_split: str = "train",
          antonym_labels: Sequence[str] = ANTONYM_LABELS, name: str = "benchmark") -> dict:
    """Audit one split benchmark and write Tables 3-5, the cross-split pairs, per-edge paths and the figure
    into ``out_dir``; returns the key figures (per held-out split, plus timings)."""
    out_dir = Path(out_dir)
    start = time.perf_counter()
    paths = held_out_paths(edges, train_split, antonym_labels)
    bfs_s = time.perf_counter() - start
    sizes, lengths, parity = graph_sizes(edges, train_split), path_length_table(paths), a_parity_table(paths)
    by_length = accuracy_by_length(paths)
    balance, warnings = class_balance(edges, antonym_labels, train_split)
    pairs = cross_split_pairs(edges, train_split)
    cross = cross_split_table(edges, pairs, train_split)
    for w in warnings:
        log.warning("graph audit of %s: %s", name, w)
    write_table(sizes, out_dir, "table3", f"Table 3 ({name}). Vertices (V), edges (E) and connected components "
                "(CC) per split; V not in train: held-out vertices absent from the training graph.")
    write_table(lengths, out_dir, "table4", f"Table 4 ({name}). Held-out edges (w_i, w_j) by the length of the "
                "shortest path from w_i to w_j in the undirected training graph (NA: no path).")
    write_table(parity, out_dir, "table5", f"Table 5 ({name}). A-leakage: predict antonym iff the number of "
                "antonym edges A on a shortest training path is odd (the first found: BFS from the head, "
                "smallest-index predecessor). Accuracy over applicable edges (a path exists); majority rate: "
                "the larger class among them; conflicts: shortest paths of both parities exist.")
    write_table(by_length, out_dir, "table5_by_length", f"A-parity accuracy by path length ({name}): applicable "
                "held-out edges per shortest-path length in the training graph (length 1: the pair itself, often "
                "reversed, is a training edge).")
    write_table(balance, out_dir, "balance", f"Edges and antonym share per split ({name}); flagged when empty or "
                f"more than {100 * BALANCE_MARGIN:.0f} points from the whole graph's share.")
    write_table(cross, out_dir, "cross_split", f"Reverse and duplicate edges across splits ({name}): held-out "
                "edges whose pair is in another split as (head, tail) or as (tail, head).")
    atomic_write_text(out_dir / "cross_split_pairs.csv", pairs.to_csv(index=False))
    atomic_write_text(out_dir / "held_out_paths.csv", paths.to_csv(index=False))
    plot_path_lengths(paths, out_dir / "path_lengths.png", f"{name}: held-out edges by training path length")
    figures = {"name": name, "train_vertices": int(sizes.V.iloc[0]), "train_edges": int(sizes.E.iloc[0]),
               "train_components": int(sizes.CC.iloc[0]), "bfs_seconds": bfs_s,
               "antonym_edges": int(edges.label.str.lower().isin([a.lower() for a in antonym_labels]).sum()),
               "balance": {b["split"]: {"edges": int(b["edges"]), "antonym_share": _num(b["antonym share"])}
                           for b in balance.to_dict("records")},
               "warnings": warnings, "splits": {}}
    for r in parity.to_dict("records"):
        lens = lengths.set_index("path length")[r["split"]]
        mine = pairs[pairs.split == r["split"]]
        dup = mine[mine.kind == "duplicate"]
        rev = mine[(mine.kind == "reverse") & (mine["head"] != mine["tail"])]  # a self-pair is only a duplicate
        acc = by_length[by_length.split == r["split"]]
        figures["splits"][r["split"]] = {
            "edges": int(r["edges"]), "applicable": int(r["applicable"]), "accuracy": _num(r["accuracy"]),
            "accuracy_min": _num(r["accuracy min"]), "accuracy_max": _num(r["accuracy max"]),
            "accuracy_by_length": {b: _num(a) for b, a in zip(acc["path length"], acc.accuracy)},
            "majority_class": r["majority class"], "majority_rate": _num(r["majority rate"]),
            "parity_conflicts": int(r["parity conflicts"]), "path_lengths": {k: int(lens[k]) for k in LENGTH_BINS},
            # distinct held-out edges whose pair is in another split as is / reversed (not summed per split)
            "duplicates": len(dup[["head", "tail", "label"]].drop_duplicates()),
            "reverses": len(rev[["head", "tail", "label"]].drop_duplicates())}
    _write_summary(out_dir, figures)
    log.info("graph audit of %s: %d held-out edges in %.2fs; wrote %s", name, len(paths), bfs_s, out_dir)
    return figures


def _num(x) -> float | None:
    """A rate for JSON: None (null) where there is nothing to count."""
    import pandas as pd

    return None if pd.isna(x) else float(x)


def _write_summary(out_dir: Path, figures: dict) -> None:
    """summary.json: the key figures without the timing, so that the same input gives the same bytes."""
    atomic_write_json(out_dir / "summary.json", {k: v for k, v in figures.items() if k != "bfs_seconds"})


def summary_lines(figures: dict) -> list[str]:
    """The lines the command prints: per held-out split, A-parity accuracy, applicability, majority rate."""
    def rate(x: float | None) -> str:
        return "nan (no applicable edges)" if x is None else f"{x:.4f}"

    lines = [f"{figures['name']}: training graph of {figures['train_vertices']} vertices, {figures['train_edges']} "
             f"edges, {figures['train_components']} connected components"]
    if not figures["antonym_edges"]:
        lines.append("  note: no edge carries an antonym label (--antonym-label), so A is always 0")
    if not figures["splits"]:
        lines.append("  no held-out edges: nothing to audit")
    if "balance" in figures:
        lines.append("  class balance: " + ", ".join(
            f"{s} {b['edges']} edges" + ("" if b["antonym_share"] is None else f" ({100 * b['antonym_share']:.1f} % "
                                                                                 "antonyms)")
            for s, b in figures["balance"].items()))
    lines += [f"  warning: {w}" for w in figures.get("warnings", [])]
    for split, f in figures["splits"].items():
        lens = " ".join(f"{k}={v}" for k, v in f["path_lengths"].items())
        spread = ("" if f["accuracy"] is None or "accuracy_min" not in f else
                  f" (range over tie-breaks {f['accuracy_min']:.4f}-{f['accuracy_max']:.4f})")
        by_length = " ".join(f"{k}={'-' if v is None else f'{v:.3f}'}" for k, v in f.get("accuracy_by_length", {}).items())
        lines += [f"split {split}: {f['edges']} held-out edges; path lengths {lens}",
                  f"  a_parity_accuracy: {rate(f['accuracy'])}{spread}",
                  *([f"  a_parity_accuracy by path length: {by_length}"] if by_length else []),
                  f"  a_parity_applicable: {f['applicable']} of {f['edges']}",
                  f"  majority_class_rate: {rate(f['majority_rate'])}"
                  + (f" ({f['majority_class']}, on the applicable edges)" if f["applicable"] else ""),
                  f"  parity_conflicts: {f['parity_conflicts']}",
                  f"  cross_split_duplicates: {f['duplicates']}  cross_split_reverses: {f['reverses']}"]
    return lines


def audit_with_resplit(edges: pd.DataFrame, out_dir: Path, *, resplit: str | None = None,
                       proportions: Sequence[float] = PAPER_PROPORTIONS, seed: int = 0, train_split: str = "train",
                       antonym_labels: Sequence[str] = ANTONYM_LABELS, name: str = "benchmark") -> dict:
    """Audit ``edges``; with ``resplit`` (vertices | components) also re-split the same graph, write it as
    ``resplit-<how>/edges.tsv`` and audit it there. Returns {"audit": ..., "resplit": ... or None}."""
    out_dir = Path(out_dir)
    result = {"audit": graph_audit(edges, out_dir, train_split=train_split, antonym_labels=antonym_labels, name=name),
              "resplit": None}
    if resplit:
        if resplit not in RESPLITS:
            raise DataFormatError(f"--resplit must be one of {', '.join(RESPLITS)}, got {resplit!r}")
        graph = edges[["head", "tail", "label"]].drop_duplicates().reset_index(drop=True)
        again = RESPLITS[resplit](graph, proportions, seed)
        sub = out_dir / f"resplit-{resplit}"
        write_edges(again, sub / "edges.tsv")
        base = name.split(",")[0]
        figs = graph_audit(again, sub, antonym_labels=antonym_labels, name=f"{base}, re-split on {resplit}")
        figs["dropped_edges"] = len(graph) - len(again)
        _write_summary(sub, figs)
        result["resplit"] = figs
    return result


def demo(out_dir: Path, seed: int = 0) -> dict:
    """Audit the synthetic graph under the standard construction (70/5/25 edge split), then split the same
    graph on vertices and audit again; writes both reports under ``out_dir`` and returns their figures."""
    edges = edge_split(synthetic_graph(seed=seed), PAPER_PROPORTIONS, seed)
    write_edges(edges, Path(out_dir) / "edges.tsv")
    return audit_with_resplit(edges, Path(out_dir), resplit="vertices", seed=seed,
                              name="synthetic, edge split")


def _output_key(**settings) -> str:
    """A short hash of what made a report (inputs by content, options), so that the outputs of different
    options get folders of their own under the default location instead of overwriting one."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def audit_command(*, edges: Sequence[str] = (), wordnet: str | None = None, pos: str = "adj",
                  split_by: str = "edges", resplit: str | None = None, proportions: str = "0.70,0.05,0.25",
                  seed: int = 0, train_split: str = "train", antonym_labels: Sequence[str] | None = None,
                  synonym_labels: Sequence[str] | None = None, columns: str = "head,tail,label",
                  out: str | None = None, store: str | None = None) -> int:
    """``leakexp graph-audit``: read or build a benchmark, audit it (and its re-split), print the figures."""
    antonym_labels = antonym_labels or ANTONYM_LABELS
    synonym_labels = synonym_labels or SYNONYM_LABELS
    try:
        props = tuple(float(x) for x in proportions.split(","))
    except ValueError:
        raise DataFormatError(f"--proportions expects three numbers such as 0.70,0.05,0.25, got {proportions!r}")
    check_proportions(props)
    if edges and wordnet:
        raise DataFormatError("give edge files or --wordnet, not both")
    cols = tuple(c.strip() for c in columns.split(","))
    if edges:
        data = read_edges(edges, cols, labels=[*antonym_labels, *synonym_labels])
        name = edge_file(edges[0])[1].name.split(".")[0]
        inputs = [(str(edge_file(e)[0]), _file_digest(edge_file(e)[1])) for e in edges]
        log.info("read %d edges (%s) from %s", len(data), data.split.value_counts().to_dict(), ", ".join(edges))
    else:
        pairs = wordnet_pairs(Path(wordnet), pos) if wordnet else synthetic_graph(seed=seed)
        name = f"wordnet-{pos}" if wordnet else "synthetic"
        inputs = [f"wordnet:{pos}:{_file_digest(Path(wordnet) / WORDNET_FILES[pos])}" if wordnet else "synthetic"]
        # WordNet: the benchmarks' random edge split; the synthetic graph keeps its per-label split
        data = (edge_split(pairs, props, seed, stratify=not wordnet) if split_by == "edges"
                else RESPLITS[split_by](pairs, props, seed))
        name += {"edges": ", edge split", "vertices": ", vertex split", "components": ", component split"}[split_by]
    if out:
        out_dir = Path(out)
    else:
        key = _output_key(inputs=inputs, split_by=None if edges else split_by, resplit=resplit, proportions=props,
                          seed=seed, train_split=train_split, antonym_labels=sorted(antonym_labels),
                          synonym_labels=sorted(synonym_labels), columns=cols)
        out_dir = Path(store or os.environ.get("LEAKEXP_STORE", "store")) / "graph-audit" / name.split(",")[0] / key
    if not edges:
        write_edges(data, out_dir / "edges.tsv")
    result = audit_with_resplit(data, out_dir, resplit=resplit, proportions=props, seed=seed,
                                train_split=train_split, antonym_labels=antonym_labels, name=name)
    print("\n".join(summary_lines(result["audit"])))
    if result["resplit"]:
        r = result["resplit"]
        print(f"re-split on {resplit} ({r['dropped_edges']} edges across splits dropped): "
              f"{out_dir / f'resplit-{resplit}' / 'edges.tsv'}")
        print("\n".join(summary_lines(r)))
    print(f"report: {out_dir} (table3, table4, table5, table5_by_length, balance, cross_split .md/.csv/.tex; "
          "path_lengths.png)")
    return 0
