"""Graph benchmarks for the A-leakage audit: edge-list and WordNet 3.0 readers, a seeded synthetic graph,
and the splits (the standard random edge split; the vertex and component splits that remedy its leakage)."""

from __future__ import annotations

import gzip
import os
import logging
import re
from pathlib import Path
from typing import NamedTuple, Sequence, TYPE_CHECKING

import numpy as np

from leakexp.data.files import DataFormatError
from leakexp.runner.store import atomic_write_text

if TYPE_CHECKING:  # imported where used: the commands that compute nothing start without them
    import pandas as pd
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components


log = logging.getLogger(__name__)

# The synonym/antonym benchmarks of the paper's Table 2 (§1.3; adj 5562/398/1986, noun 2836/206/1020, verb
# 2534/182/908 edges) are 70 % / 5 % / 25 % of the edges, and the released files (github.com/nguyenkh/AntSynNET,
# dataset/*-pairs.{train,val,test}) hold exactly as many antonyms (label 1) as synonyms (label 0) in every split.
PAPER_PROPORTIONS = (0.70, 0.05, 0.25)
SPLITS = ("train", "val", "test")
ANTONYM_LABELS = ("antonym", "1")  # "1" is the antonym label of the AntSynNET files; 0 is synonym
SYNONYM_LABELS = ("synonym", "0")
DEFAULT_WORDNET = Path(os.environ.get("LEAKEXP_WORDNET", "/usr/share/wordnet"))  # a WordNet 3.0 dict folder


def default_wordnet() -> Path:
    """The WordNet 3.0 ``dict`` folder of ``--wordnet`` without a DIR: ``$LEAKEXP_WORDNET``, else Debian's."""
    return Path(os.environ.get("LEAKEXP_WORDNET") or "/usr/share/wordnet")
WORDNET_FILES = {"adj": "data.adj", "noun": "data.noun", "verb": "data.verb", "adv": "data.adv"}
WORDNET_HELP = ("install Debian's `wordnet-base` (apt-get install wordnet-base puts WordNet 3.0 in "
                "/usr/share/wordnet) or give --wordnet DIR, a WordNet 3.0 `dict` folder")


# ---------------------------------------------------------------------------------------------- inputs

def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def edge_file(spec: str | Path) -> tuple[str | None, Path]:
    """``SPLIT=PATH`` -> (SPLIT, PATH); a plain ``PATH`` (with its split in a fourth column) -> (None, PATH)."""
    split, sep, path = str(spec).partition("=")
    return (split, Path(path)) if sep and split and "/" not in split else (None, Path(spec))


def read_edges(specs: Sequence[str | Path], columns: Sequence[str] = ("head", "tail", "label"),
               labels: Sequence[str] | None = None) -> pd.DataFrame:
    """Edges from tab-separated files: ``PATH`` with head, tail, label, split per line, or ``SPLIT=PATH``
    with head, tail, label (one file per split). ``columns`` gives the order of the first three fields
    (WN18's files are ``head label tail``). Empty lines and lines starting with ``#`` are skipped.
    ``labels``: the accepted labels (case-insensitive); any other, a header line included, is an error naming
    the file and line, since an unknown label would silently count as a synonym."""
    import pandas as pd

    accepted = {x.lower() for x in labels} if labels is not None else None
    if sorted(columns) != ["head", "label", "tail"]:
        raise DataFormatError(f"--columns must order head, tail and label, got {','.join(columns)}")
    rows = []
    for spec in specs:
        split, path = edge_file(spec)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such edge file")
        want = 3 if split else 4
        form = "<TAB>".join([*columns] + ([] if split else ["split"]))
        with _open(path) as f:
            n = 0
            try:
                for n, line in enumerate(f, 1):
                    line = line.rstrip("\r\n")
                    if not line.strip() or line.startswith("#"):
                        continue
                    fields = [x.strip() for x in line.split("\t")]
                    if len(fields) != want or not all(fields):
                        raise DataFormatError(
                            f"{path}:{n}: expected {want} non-empty tab-separated fields {form}"
                            f"{'' if split else ' (or give the file as SPLIT=PATH)'}, got {line[:80]!r}")
                    label = fields[list(columns).index("label")]
                    if accepted is not None and label.lower() not in accepted:
                        header = " (a header line? remove it)" if n == 1 or label.lower() == "label" else ""
                        raise DataFormatError(
                            f"{path}:{n}: label {label!r} is not one of the accepted labels "
                            f"{', '.join(sorted(accepted))}{header}; name other labels with --antonym-label / "
                            "--synonym-label")
                    rows.append((*fields[:3], split or fields[3]))
            except UnicodeDecodeError:
                raise DataFormatError(f"{path}:{n + 1}: not UTF-8 text; convert the file to UTF-8") from None
    if not rows:
        raise DataFormatError(f"no edges in {', '.join(map(str, specs))}")
    df = pd.DataFrame(rows, columns=[*columns, "split"])
    return df[["head", "tail", "label", "split"]]


class Synset(NamedTuple):
    offset: int
    ss_type: str
    words: tuple[str, ...]
    pointers: tuple[tuple[str, int, str, int, int], ...]  # (symbol, target offset, pos, source word, target word)


_MARKER = re.compile(r"\((?:a|p|ip)\)$")  # adjective syntactic markers, wndb(5WN) "word"


def read_wordnet(path: Path, pos: str = "adj") -> list[Synset]:
    """The synsets of one WordNet 3.0 ``data.<pos>`` file, parsed per wndb(5WN):
    ``synset_offset lex_filenum ss_type w_cnt word lex_id [word lex_id...] p_cnt [ptr...] [frames...] | gloss``
    with w_cnt two-digit hex, p_cnt three-digit decimal and ptr = ``symbol offset pos source/target`` (hex)."""
    if pos not in WORDNET_FILES:
        raise DataFormatError(f"unknown WordNet part of speech {pos!r}; choose from {', '.join(WORDNET_FILES)}")
    file = Path(path) / WORDNET_FILES[pos]
    if not file.is_file():
        raise FileNotFoundError(f"{file}: WordNet database file not found; {WORDNET_HELP}")
    out = []
    with open(file, encoding="latin-1") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("  ") or not line.strip():  # the license header: two spaces and a line number
                continue
            try:
                out.append(_parse_synset(line))
            except (ValueError, IndexError) as exc:
                raise DataFormatError(f"{file}:{n}: not a wndb(5WN) data line ({exc}): {line[:80]!r}") from None
    return out


def _parse_synset(line: str) -> Synset:
    head, sep, _gloss = line.partition("|")
    if not sep:
        raise ValueError("no '|' before the gloss")
    t = head.split()
    if not (len(t[0]) == 8 and t[0].isdigit() and len(t[1]) == 2 and t[1].isdigit() and t[2] in "nvasr"):
        raise ValueError("synset_offset, lex_filenum or ss_type")
    w_cnt = int(t[3], 16)
    words = tuple(_MARKER.sub("", t[4 + 2 * i]).lower() for i in range(w_cnt))
    for i in range(w_cnt):
        int(t[5 + 2 * i], 16)  # lex_id, one hex digit
    i = 4 + 2 * w_cnt
    if len(t[i]) != 3:
        raise ValueError("p_cnt is not three digits")
    p_cnt, i = int(t[i]), i + 1
    pointers = []
    for _ in range(p_cnt):
        symbol, offset, ppos, st = t[i:i + 4]
        if len(st) != 4 or ppos not in "nvasr":
            raise ValueError(f"pointer {' '.join(t[i:i + 4])!r}")
        pointers.append((symbol, int(offset), ppos, int(st[:2], 16), int(st[2:], 16)))
        i += 4
    rest = t[i:]
    if rest and (t[2] != "v" or len(rest) != 1 + 3 * int(rest[0])):  # verbs: f_cnt + f_num w_num ...
        raise ValueError(f"unexpected fields after the pointers: {' '.join(rest[:6])!r}")
    return Synset(int(t[0]), t[2], words, tuple(pointers))


def wordnet_pairs(path: Path = DEFAULT_WORDNET, pos: str = "adj", *, antonyms: str = "synsets",
                  similar_to: bool = False, vocabulary: str = "antonyms", balance: bool = False,
                  seed: int = 0) -> pd.DataFrame:
    """Synonym/antonym edges between WordNet lemmas, following the construction of the benchmarks that "On Leakage in
    Some Popular Benchmarks on Graphs" audits: synonyms = two lemmas of one synset; antonyms = a lemma of a synset and a lemma of a synset it has
    an antonym (``!``) pointer to (``antonyms="synsets"``; ``"lemmas"``: only the pointer's two words, which
    leaves most antonym pairs without a path and the heuristic below the majority class); one edge per pair
    (first occurrence, undirected; pairs that are both are dropped). ``similar_to`` adds ``&`` satellite pairs
    as synonyms. ``vocabulary`` chooses the synonym pairs: "antonyms" (both words have an antonym: the task's
    words), "any" (one word has one) or "all". ``balance`` downsamples the larger class (seeded). The default
    split of such a benchmark is a random edge split (``graph-audit --wordnet``)."""
    import pandas as pd

    if vocabulary not in ("antonyms", "any", "all"):
        raise DataFormatError(f"vocabulary must be antonyms, any or all, got {vocabulary!r}")
    if antonyms not in ("synsets", "lemmas"):
        raise DataFormatError(f"antonyms must be synsets or lemmas, got {antonyms!r}")
    synsets = read_wordnet(path, pos)
    by_offset = {s.offset: s for s in synsets}
    same_file = {"adj": "as", "noun": "n", "verb": "v", "adv": "r"}[pos]
    first: dict[frozenset, tuple[str, str, str]] = {}
    conflicts: set[frozenset] = set()

    def add(a: str, b: str, label: str) -> None:
        key = frozenset((a, b))
        if a == b or key in conflicts:
            return
        if key not in first:
            first[key] = (a, b, label)
        elif first[key][2] != label:
            conflicts.add(key)

    for s in synsets:
        for i, a in enumerate(s.words):
            for b in s.words[i + 1:]:
                add(a, b, "synonym")
        for symbol, offset, ppos, src, tgt in s.pointers:
            if ppos not in same_file or offset not in by_offset:
                continue
            target = by_offset[offset].words
            if symbol == "!" and antonyms == "synsets":
                for a in s.words:
                    for b in target:
                        add(a, b, "antonym")
            elif symbol == "!" and src and tgt:
                add(s.words[src - 1], target[tgt - 1], "antonym")
            elif symbol == "&" and similar_to:
                for a in s.words:
                    for b in target:
                        add(a, b, "synonym")
    df = pd.DataFrame([v for k, v in first.items() if k not in conflicts], columns=["head", "tail", "label"])
    log.info("WordNet %s: %d synsets, %d pairs (%d dropped as both synonym and antonym)", pos, len(synsets),
             len(df), len(conflicts))
    if vocabulary != "all":
        ant = df[df.label == "antonym"]
        words = set(ant["head"]) | set(ant["tail"])
        h, t = df["head"].isin(words), df["tail"].isin(words)
        df = df[(df.label == "antonym") | ((h & t) if vocabulary == "antonyms" else (h | t))].reset_index(drop=True)
    if balance and df.label.nunique() == 2:
        n = int(df.label.value_counts().min())
        rng = np.random.default_rng(seed)
        keep = np.concatenate([rng.choice(np.flatnonzero(df.label.to_numpy() == lab), n, replace=False)
                               for lab in ("antonym", "synonym")])
        df = df.iloc[np.sort(keep)].reset_index(drop=True)
    return df


def synthetic_graph(seed: int = 0, concepts: int = 150, size: tuple[int, int] = (2, 6),
                    crosslinks: float = 0.5, contradictions: float = 0.5, reverses: float = 0.1) -> pd.DataFrame:
    """A seeded synonym/antonym graph that needs nothing installed: ``concepts`` pairs of opposite clusters of
    synonyms (a random tree plus a few extra edges per cluster), as many antonym edges between the two
    clusters of a pair as the pair has synonym edges (balanced, like the paper's benchmarks), and
    ``crosslinks`` synonym edges per pair from a word to a random other cluster (polysemy: they join concepts
    into larger components, as in WordNet); with probability ``contradictions`` a pair also gets a synonym edge
    across it (a word with a sense on each side), so that some cycles disagree on parity. A share
    ``reverses`` of the pairs is listed a second time as (tail, head), as in the released AntSynNET files."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows: list[tuple[str, str, str]] = []
    clusters: list[list[str]] = []
    for c in range(concepts):
        pair, synonyms = [], 0
        for side in "ab":
            words = [f"w{c}{side}{i}" for i in range(int(rng.integers(size[0], size[1] + 1)))]
            for i in range(1, len(words)):
                rows.append((words[int(rng.integers(i))], words[i], "synonym"))
            for _ in range(len(words) // 3):
                i, j = rng.choice(len(words), 2, replace=False)
                rows.append((words[i], words[j], "synonym"))
            synonyms += len(words) - 1 + len(words) // 3
            pair.append(words)
        cells = rng.permutation(len(pair[0]) * len(pair[1]))[:max(1, synonyms)]
        rows += [(pair[0][k // len(pair[1])], pair[1][k % len(pair[1])], "antonym") for k in cells]
        if rng.random() < contradictions:  # a word with a sense on each side: a synonym across the pair
            rows.append((str(rng.choice(pair[0])), str(rng.choice(pair[1])), "synonym"))
        clusters += pair
    for _ in range(int(round(crosslinks * concepts))):
        i, j = rng.choice(len(clusters), 2, replace=False)
        rows.append((str(rng.choice(clusters[i])), str(rng.choice(clusters[j])), "synonym"))
    df = pd.DataFrame(rows, columns=["head", "tail", "label"])
    key = [frozenset(p) for p in zip(df["head"], df["tail"])]
    df = df[~pd.Series(key).duplicated().to_numpy()].reset_index(drop=True)
    twice = df[rng.random(len(df)) < reverses].rename(columns={"head": "tail", "tail": "head"})
    return pd.concat([df, twice[["head", "tail", "label"]]], ignore_index=True)


# ---------------------------------------------------------------------------------------------- splits

def _counts(n: int, proportions: Sequence[float]) -> list[int]:
    counts = [int(round(p * n)) for p in proportions[:-1]]
    return counts + [n - sum(counts)]


def check_proportions(proportions: Sequence[float]) -> None:
    if len(proportions) != 3 or min(proportions) < 0 or abs(sum(proportions) - 1) > 1e-6:
        raise DataFormatError(f"proportions must be three non-negative shares of train, val, test summing to 1, "
                              f"got {','.join(map(str, proportions))}")


def edge_split(edges: pd.DataFrame, proportions: Sequence[float] = PAPER_PROPORTIONS, seed: int = 0, *,
               stratify: bool = True) -> pd.DataFrame:
    """The standard construction: a seeded random partition of the edges into train / val / test (per label
    when ``stratify``, so that every split keeps the label mix, as in the released benchmarks)."""
    check_proportions(proportions)
    rng = np.random.default_rng(seed)
    split = np.empty(len(edges), dtype=object)
    groups = [np.flatnonzero(edges.label.to_numpy() == lab) for lab in sorted(edges.label.unique())] \
        if stratify else [np.arange(len(edges))]
    for idx in groups:
        idx = rng.permutation(idx)
        bounds = np.cumsum(_counts(len(idx), proportions))[:-1]
        for name, part in zip(SPLITS, np.split(idx, bounds)):
            split[part] = name
    return edges[["head", "tail", "label"]].assign(split=split)


def vertex_index(edges: pd.DataFrame) -> tuple[pd.Index, np.ndarray, np.ndarray]:
    """Vertices in order of first appearance (head, then tail, row by row) and the edges as index pairs."""
    import pandas as pd

    both = np.column_stack([edges["head"].to_numpy(), edges["tail"].to_numpy()]).ravel()
    vertices = pd.Index(pd.unique(both))
    return vertices, vertices.get_indexer(edges["head"]), vertices.get_indexer(edges["tail"])


def vertex_split(edges: pd.DataFrame, proportions: Sequence[float] = PAPER_PROPORTIONS,
                 seed: int = 0) -> pd.DataFrame:
    """The paper's remedy (§3, "split on V"): every vertex goes to one split at random (seeded); an edge stays
    only if both ends are in the same split, so no held-out edge touches a training vertex. Vertices are drawn
    with probabilities proportional to sqrt(share) so that the kept edges come out in ``proportions``; edges
    across splits are dropped (for 70/5/25 about 59 %: the price of a vertex-disjoint split)."""
    check_proportions(proportions)
    vertices, h, t = vertex_index(edges)
    w = np.sqrt(np.asarray(proportions, dtype=float))
    side = np.random.default_rng(seed).choice(3, size=len(vertices), p=w / w.sum())
    keep = side[h] == side[t]
    return edges.loc[keep, ["head", "tail", "label"]].assign(split=np.asarray(SPLITS)[side[h[keep]]])


def component_split(edges: pd.DataFrame, proportions: Sequence[float] = PAPER_PROPORTIONS,
                    seed: int = 0) -> pd.DataFrame:
    """The alternative remedy: all edges of a connected component go to one split (no edge is dropped).
    Components are taken largest first (ties in seeded random order) and each goes to the split furthest
    below its share of the edges, so sizes only approximate ``proportions`` when a component is large."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    check_proportions(proportions)
    vertices, h, t = vertex_index(edges)
    n = len(vertices)
    _, comp = connected_components(csr_matrix((np.ones(len(h)), (h, t)), shape=(n, n)), directed=False)
    sizes = np.bincount(comp[h], minlength=comp.max() + 1)
    order = np.random.default_rng(seed).permutation(len(sizes))
    order = order[np.argsort(-sizes[order], kind="stable")]
    target, have, owner = np.asarray(proportions) * len(edges), np.zeros(3), np.zeros(len(sizes), dtype=int)
    for c in order:
        if sizes[c]:
            owner[c] = int(np.argmax(target - have))
            have[owner[c]] += sizes[c]
    return edges[["head", "tail", "label"]].assign(split=np.asarray(SPLITS)[owner[comp[h]]])


RESPLITS = {"vertices": vertex_split, "components": component_split}


def write_edges(edges: pd.DataFrame, path: Path) -> Path:
    """``head<TAB>tail<TAB>label<TAB>split`` lines, the format ``read_edges`` reads back."""
    rows = edges[["head", "tail", "label", "split"]].astype(str).to_numpy()
    return atomic_write_text(Path(path), "".join("\t".join(r) + "\n" for r in rows))
