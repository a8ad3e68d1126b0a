"""Where two stores part: the artifacts whose keys are equal and whose content differs, earliest in the lineage first.

Two stores of one configuration (two machines, two clusters, yesterday's copy) hold artifacts under equal keys; an
equal key promises equal content, so an artifact whose content differs is a place where the computation depended on
something its key does not name (a CPU's kernels, a library's version). The first such artifact in the lineage is
where to look: those below it may differ only because it does.

Everything comes from the done markers: a marker holds its artifact's key, its files' sizes and checksums and their
content hash, the keys it was made from (the runner's record and ``upstream``), so no file is read. A marker written
before the content hash was recorded is compared by its file table (the same hash); one without a file table has its
files read once. Lineage: an artifact comes after the artifacts its marker names as inputs; ``order``, the stages'
names in the registry's order, breaks ties and places what the markers do not link (older markers name an in-process
input, not the stored artifact behind it). This module names no stage.
"""

from __future__ import annotations

import heapq
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from leakexp.runner.store import DONE, Marker, Store, StoreError, files_digest, file_table

SHOWN = 3  # upstream differences named per artifact


@dataclass(frozen=True)
class Artifact:
    """One finished artifact of a store, as its marker describes it."""

    rel: str  # its directory, relative to the store
    key: str  # the marker's config hash (the full key)
    stage: str  # the stage its key names (the record's), else the store's top folder
    inputs: tuple[str, ...]  # keys of the stored artifacts it was made from, as far as the marker says
    content: str
    files: dict
    traced: bool = True  # its marker records ``upstream``; else its inputs are its record's (in-process ones untraced)


@dataclass
class Difference:
    """An artifact with one key in both stores and other content: which files differ, and the differing artifacts
    upstream of it (none: its inputs are the same in both stores, so it is where they part)."""

    rel: str
    stage: str
    files: list[str]
    after: list[str] = field(default_factory=list)
    traced: bool = True  # False: no differing input found, but an older marker names inputs it cannot trace


@dataclass
class StoreDiff:
    a: Path
    b: Path
    counts: tuple[int, int]  # finished artifacts in each store
    same: int
    differ: list[Difference]
    only_a: list[Artifact]
    only_b: list[Artifact]
    unreadable: tuple[int, int]  # DONE.json files that are no marker, in each store


def _inputs(marker: Marker) -> tuple[str, ...]:
    if marker.upstream is not None:
        return marker.upstream
    made = (marker.config or {}).get("inputs") if isinstance(marker.config, dict) else None
    if not isinstance(made, dict):
        return ()
    return tuple(sorted({str(k) for v in made.values() for k in (v if isinstance(v, list) else [v])}))


def artifacts(root: Path) -> tuple[list[Artifact], int]:
    """Every finished artifact under ``root`` (hidden temporary and moved-aside folders, resumable ``.partial`` work
    and the inside of an artifact left out), and how many DONE.json files are no marker."""
    found, bad = [], 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.endswith(".partial"))
        if DONE not in names:
            continue
        dirs[:] = []
        path = Path(folder)
        marker = Store.marker(path)
        if marker is None:
            bad += 1
            continue
        files = marker.files if marker.files is not None else file_table(path)  # an old marker: its files, once
        config = marker.config if isinstance(marker.config, dict) else {}
        rel = path.relative_to(root).as_posix()
        found.append(Artifact(rel, marker.config_hash, str(config.get("stage") or rel.split("/")[0]), _inputs(marker),
                              marker.content_or_table or files_digest(files), files, marker.upstream is not None))
    return found, bad


def file_differences(a: dict, b: dict) -> list[str]:
    """The files of two file tables that differ, one line each."""
    out = []
    for rel in sorted(set(a) | set(b)):
        x, y = a.get(rel), b.get(rel)
        if x is None or y is None:
            out.append(f"{rel}: only in {'B' if x is None else 'A'}")
        elif x.get("size") != y.get("size"):
            out.append(f"{rel}: size {x.get('size')} vs {y.get('size')}")
        elif x.get("blake2b") != y.get("blake2b"):
            out.append(f"{rel}: content differs ({x.get('size')} bytes)")
    return out


def lineage_order(nodes: dict[str, Artifact], order: Sequence[str] = ()) -> list[str]:
    """The keys of ``nodes`` with every artifact after its inputs; among those ready, by the place of the stage in
    ``order`` (stages it does not name last), then by path."""
    rank = {name: i for i, name in enumerate(order)}
    priority = {k: (rank.get(n.stage, len(rank)), n.rel) for k, n in nodes.items()}
    waiting = {k: {i for i in n.inputs if i in nodes and i != k} for k, n in nodes.items()}
    below: dict[str, list[str]] = {}
    for k, ins in waiting.items():
        for i in ins:
            below.setdefault(i, []).append(k)
    ready = [(priority[k], k) for k, ins in waiting.items() if not ins]
    heapq.heapify(ready)
    out = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(k)
        for d in below.get(k, []):
            waiting[d].discard(k)
            if not waiting[d]:
                heapq.heappush(ready, (priority[d], d))
    placed = set(out)  # a cycle (no store makes one): what is left, by priority
    return out + sorted((k for k in nodes if k not in placed), key=priority.get)


def _pairs(a: list[Artifact], b: list[Artifact]) -> tuple[list[tuple[Artifact, Artifact]], list, list]:
    """Artifacts of equal key, paired at equal paths first (a key reached by two paths, or a renamed folder, pairs
    what is left)."""
    by_key: dict[str, list[Artifact]] = {}
    for x in b:
        by_key.setdefault(x.key, []).append(x)
    pairs, only_a = [], []
    for x in a:
        others = by_key.get(x.key, [])
        match = next((y for y in others if y.rel == x.rel), others[0] if others else None)
        if match is None:
            only_a.append(x)
        else:
            others.remove(match)
            pairs.append((x, match))
    return pairs, only_a, [y for ys in by_key.values() for y in ys]


def diff_stores(a: Path, b: Path, *, order: Sequence[str] = ()) -> StoreDiff:
    """Compare two stores by their markers (``order``: the stages' names in the registry's order)."""
    for name, root in (("STORE_A", a), ("STORE_B", b)):
        if not Path(root).is_dir():
            raise StoreError(f"{name} {root}: no such store directory; give two store directories")
    found_a, bad_a = artifacts(Path(a))
    found_b, bad_b = artifacts(Path(b))
    pairs, only_a, only_b = _pairs(found_a, found_b)
    differing = {x.key: (x, y) for x, y in pairs if x.content != y.content}
    nodes = {x.key: x for x in found_b} | {x.key: x for x in found_a}
    for k, (x, y) in differing.items():  # an input either store names
        nodes[k] = Artifact(x.rel, x.key, x.stage, tuple(sorted(set(x.inputs) | set(y.inputs))), x.content, x.files,
                            x.traced or y.traced or all(i in nodes for i in {*x.inputs, *y.inputs}))
    differ = []
    for k in lineage_order(nodes, order):
        if k in differing:
            x, y = differing[k]
            differ.append(Difference(x.rel, x.stage, file_differences(x.files, y.files),
                                     [nodes[u].rel for u in _differing_upstream(k, nodes, differing)], nodes[k].traced))
    return StoreDiff(Path(a), Path(b), (len(found_a), len(found_b)), len(pairs) - len(differing), differ,
                     only_a, only_b, (bad_a, bad_b))


def _differing_upstream(key: str, nodes: dict[str, Artifact], differing: dict) -> list[str]:
    """The nearest differing artifacts upstream of ``key``: its inputs, and through equal ones theirs."""
    found, seen, todo = [], {key}, list(nodes[key].inputs)
    while todo:
        k = todo.pop(0)
        if k in seen or k not in nodes:
            continue
        seen.add(k)
        if k in differing:
            found.append(k)
        else:
            todo.extend(nodes[k].inputs)
    return sorted(found, key=lambda k: nodes[k].rel)


def _by_stage(items: list[Artifact]) -> str:
    counts = Counter(x.rel.split("/")[0] for x in items)
    return ", ".join(f"{stage} {n}" for stage, n in sorted(counts.items()))


def render(d: StoreDiff) -> list[str]:
    """What ``leakexp diff`` prints: the stores, then each differing artifact with its files, then what only one
    store holds."""
    lines = [f"A: {d.a} ({d.counts[0]} artifacts)", f"B: {d.b} ({d.counts[1]} artifacts)"]
    equal = d.same + len(d.differ)
    if not d.differ:
        lines.append(f"{equal} artifacts with equal keys, all with equal content")
    else:
        first = sum(1 for x in d.differ if not x.after and x.traced)
        lines.append(f"{len(d.differ)} of {equal} artifacts with equal keys differ, earliest in the lineage first; "
                     f"{first} of them with equal inputs (where the stores part):")
        for x in d.differ:
            if x.after:
                more = f" and {len(x.after) - SHOWN} more" if len(x.after) > SHOWN else ""
                why = f"after {', '.join(x.after[:SHOWN])}{more}"
            elif x.traced:
                why = "its inputs are equal: the stores part here"
            else:
                why = ("no differing input recorded; its marker, older than `upstream`, does not trace the artifacts "
                       "behind an in-process input")
            lines.append(f"  {x.rel}  ({why})")
            lines += [f"      {f}" for f in x.files]
    for name, items in (("A", d.only_a), ("B", d.only_b)):
        if items:
            lines.append(f"only in {name}: {len(items)} ({_by_stage(items)})")
    for name, n in zip("AB", d.unreadable):
        if n:
            lines.append(f"{name}: {n} DONE.json file(s) are no done marker (left out; `leakexp status --verify`)")
    return lines
