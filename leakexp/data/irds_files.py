"""The files ir_datasets reads for a dataset: where they are, their identity (for keys), and what to do without them.

ir_datasets (0.6.3) reads a dataset's documents, topics and qrels through ``Download`` objects whose
``cache_path`` is the file under ``$IR_DATASETS_HOME`` (``ir_datasets/util/download.py:240-262``, set from
``etc/downloads.json`` by ``_DownloadConfig.__getitem__``, ``util/download.py:349-388``). A file with a URL is
public and downloaded on first use; one with ``instructions`` only is licensed and must be placed by hand
(Disks 4 & 5 ``disks45/corpus``, NYT ``nyt/nyt.tgz``, WaPo v2 ``wapo/WashingtonPost.v2.tar.gz``). Locally
registered datasets read ``LocalDownload`` paths (``util/download.py:210-227``). The files are found by walking
the dataset's constituents (``datasets/base.py:12-15``) without calling them, so nothing is built, migrated or
downloaded here: status stays read-only and cheap (size and modification time; content hashes for small files).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from leakexp.data.files import file_identity

DATASET_PARTS = ("docs", "queries", "qrels")
WHAT = {"docs": "documents", "queries": "queries", "qrels": "qrels"}

# Licensed collections: where ir_datasets reads them and what a person has to put there.
LICENSED = {
    "disks45": "TREC Disks 4 & 5 are licensed by NIST (https://trec.nist.gov/data/cd45/index.html): put the "
               "uncompressed collection (its FBIS, FR94, FT and LATIMES folders, e.g. NEWS_data/FBIS; ir_datasets "
               "reads **/FBIS/FB*, **/FR94/??/FR*, **/FT/*/FT*, **/LATIMES/LA*, 2,295 files; compressed .Z/.0Z "
               "files need the Python package unlzw3) in the folder {path} (a symlink will do)",
    "nyt": "the New York Times Annotated Corpus is licensed by the LDC (LDC2008T19): put its archive "
           "nyt_corpus_LDC2008T19.tgz as {path} (the name ir_datasets reads; a symlink will do)",
    "wapo": "the Washington Post collection v2 is licensed by NIST (https://trec.nist.gov/data/wapost/): put "
            "WashingtonPost.v2.tar.gz (holding WashingtonPost.v2/data/TREC_Washington_Post_collection.v2.jl) as "
            "{path} (a symlink will do)",
}


@dataclass(frozen=True)
class IrdsFile:
    """One file (or folder) ir_datasets reads for a part (docs, queries, qrels) of a dataset."""

    part: str
    path: Path
    licensed: bool = False  # placed by hand (no download URL)
    url: str | None = None  # public: where ir_datasets downloads it from
    instructions: str = ""  # ir_datasets' own words for a licensed file
    what: str = ""  # documents, topics (TREC topics), queries or qrels
    source: Any = field(default=None, compare=False, repr=False)  # ir_datasets' Download: ``source.path()`` fetches it

    @property
    def local(self) -> bool:
        """A file of a locally registered dataset (neither downloaded nor licensed)."""
        return not self.licensed and self.url is None

    def exists(self) -> bool:
        return self.path.exists()


def home() -> Path:
    import ir_datasets

    return Path(ir_datasets.util.home_path())


def _scalar(value: Any) -> bool:
    """A value that holds no file objects (walking it would only cost time)."""
    return value is None or isinstance(value, (str, bytes, int, float, bool, Path, type, types.FunctionType,
                                               types.MethodType, types.ModuleType, types.BuiltinFunctionType))


def _downloads(obj: Any, part: str, seen: set[int], depth: int = 0) -> list[IrdsFile]:
    """The files behind a handler: every Download / LocalDownload / Cache reachable through its attributes."""
    from ir_datasets.util import Cache, Download, LocalDownload

    if id(obj) in seen or depth > 8 or _scalar(obj):
        return []
    seen.add(id(obj))
    if isinstance(obj, Download):
        if obj._cache_path is None:  # a temporary download: nothing to identify
            return []
        urls = [getattr(m, "url", None) for m in obj.mirrors if not isinstance(m, LocalDownload)]
        locals_ = [m for m in obj.mirrors if isinstance(m, LocalDownload)]
        return [IrdsFile(part, Path(obj._cache_path), licensed=not any(urls), url=next((u for u in urls if u), None),
                         instructions=next((str(m._message) for m in locals_ if m._message), ""), source=obj)]
    if isinstance(obj, LocalDownload):
        return [IrdsFile(part, Path(obj._path))]
    if isinstance(obj, Cache):
        if Path(obj._path).exists():  # a cached copy is what is read
            return [IrdsFile(part, Path(obj._path))]
        return _downloads(obj._streamer, part, seen, depth + 1)
    if isinstance(obj, (list, tuple)):
        return [f for x in obj for f in _downloads(x, part, seen, depth + 1)]
    if isinstance(obj, dict):
        return [f for x in obj.values() for f in _downloads(x, part, seen, depth + 1)]
    try:
        attrs = vars(obj)
    except TypeError:
        return []
    return [f for k, v in attrs.items() if not k.startswith("__") for f in _downloads(v, part, seen, depth + 1)]


def _handlers(ds: Any, found: dict[str, Any]) -> None:
    """The first constituent of each part, as ``Dataset.__getattr__`` picks it (datasets/base.py:47-49), looked up
    without calling anything (a Migrator-wrapped handler would migrate: util/__init__.py:184-204)."""
    from ir_datasets.datasets.base import Dataset
    from ir_datasets.formats import BaseDocs, BaseQrels, BaseQueries
    from ir_datasets.util import Migrator

    for cons in getattr(ds, "_constituents", []):
        inner = cons
        while isinstance(inner, Migrator):
            inner = inner._wrapped
        if isinstance(inner, Dataset):
            _handlers(inner, found)
            continue
        for part, base in (("docs", BaseDocs), ("queries", BaseQueries), ("qrels", BaseQrels)):
            if isinstance(inner, base) and part not in found:
                found[part] = inner


def dataset_files(dataset_id: str, parts: Iterable[str] = DATASET_PARTS) -> dict[str, list[IrdsFile]]:
    """Per part of ``dataset_id`` (docs, queries, qrels), the files ir_datasets reads for it; a part whose files
    cannot be found (a dataset built another way) maps to an empty list."""
    import ir_datasets
    from ir_datasets.formats import TrecQueries

    try:
        ds = ir_datasets.load(dataset_id)
    except KeyError:
        return {p: [] for p in parts}
    found: dict[str, Any] = {}
    _handlers(ds, found)
    out = {}
    for part in parts:
        files = _downloads(found[part], part, set()) if part in found else []
        what = "topics" if part == "queries" and isinstance(found.get(part), TrecQueries) else WHAT[part]
        out[part] = list({f.path: replace(f, what=what) for f in files}.values())
    return out


# -- identity ---------------------------------------------------------------------------------------------
def shown(path: Path) -> str:
    """A path as keys record it: relative to $IR_DATASETS_HOME where it lies there (a moved home keeps its keys; a
    symlink there stays its own name), else as given."""
    try:
        return Path(path).relative_to(home()).as_posix()
    except ValueError:
        return str(path)


def fingerprint(dataset_id: str, parts: Iterable[str] = DATASET_PARTS) -> dict:
    """The identity of the files ir_datasets reads for ``parts`` of ``dataset_id`` (part of the keys of whatever
    reads them), with ir_datasets' version (its parsers make the text); a part it cannot locate is 'unknown'."""
    import ir_datasets

    files = dataset_files(dataset_id, parts)
    return {"irds": dataset_id, "ir_datasets": ir_datasets.__version__,
            "files": {part: ({shown(f.path): file_identity(f.path) for f in fs} if fs else "unknown")
                      for part, fs in files.items()}}


# -- what to do ---------------------------------------------------------------------------------------------
Request = tuple[str, tuple[str, ...]]  # (dataset id, the parts of it that are read)


def missing_files(dataset_id: str, parts: Iterable[str] = DATASET_PARTS) -> list[IrdsFile]:
    return [f for fs in dataset_files(dataset_id, parts).values() for f in fs if not f.exists()]


def _named(f: IrdsFile) -> str:
    return f"{f.what or WHAT[f.part]} {f.path}{'/' if f.path.suffix == '' and f.part == 'docs' and f.licensed else ''}"


def advice(absent: list[tuple[str, IrdsFile]]) -> str:
    """What to do about absent files ((dataset id, file) pairs): a licensed one is placed by hand where ir_datasets
    reads it; public ones are fetched on a connected machine by ``leakexp fetch`` or ir_datasets' own command, one
    per dataset and part, and copied to the same paths here; a local dataset's file is written where its
    registration names it."""
    parts, seen = [], set()
    for dataset_id, f in absent:
        if f.licensed and f.path not in seen:
            seen.add(f.path)
            text = LICENSED.get(dataset_id.split("/")[0])
            parts.append("licensed: " + (text.format(path=f.path) if text else
                                          f"{_named(f)} must be placed by hand: "
                                          + " ".join((f.instructions or "see https://ir-datasets.com/").split())))
    public = [(d, f) for d, f in absent if f.url is not None]
    if public:
        files = list(dict.fromkeys(_named(f) for _, f in public))
        commands = list(dict.fromkeys(f"ir_datasets export {d} {f.part} >/dev/null" for d, f in public))
        parts.append(f"public: {', '.join(files)} — on a connected machine run `leakexp fetch` with this run's "
                     f"overrides, or `{'; '.join(commands)}` (ir_datasets downloads them into its home), then copy "
                     f"those files to the same paths under $IR_DATASETS_HOME ({home()}) here")
    for _, f in absent:
        if f.local and f.path not in seen:
            seen.add(f.path)
            parts.append(f"local: {_named(f)} does not exist; write it there or register the dataset with the path "
                         "of the file")
    return "; ".join(parts)


def missing_message(requests: Iterable[Request]) -> str | None:
    """One line naming every file that ir_datasets reads for ``requests`` ((dataset id, parts) pairs) and that is
    absent, public ones told from licensed ones, with what to do for each; None when all are there."""
    absent: list[tuple[str, IrdsFile]] = []
    for dataset_id, parts in requests:
        absent += [(dataset_id, f) for f in missing_files(dataset_id, parts)
                   if f.path not in {g.path for _, g in absent}]
    if not absent:
        return None
    ids = " and ".join(f"'{d}'" for d in dict.fromkeys(d for d, _ in absent))
    return f"ir_datasets {ids}: {len(absent)} file(s) it reads are not on this machine: " + advice(absent)


# -- the raw TREC files of a collection (Anserini's TrecCollection reads them) ------------------------------------
@dataclass(frozen=True)
class TrecFiles:
    """The raw SGML files ir_datasets reads for a dataset's documents (``TrecDocs`` over a folder with path globs:
    TREC Disks 4 & 5), in its order: the same files, so Anserini's ``TrecCollection`` indexes the same documents."""

    dataset_id: str
    root: Path
    globs: tuple[str, ...]
    expected: int | None  # ir_datasets' expected_file_count (2,295 for disks45/nocr)

    def files(self) -> list[Path]:
        """The files ``globs`` select under ``root``, as ``TrecDocs.docs_iter`` walks them (``formats/trec.py``
        lines 117-131: ``glob.glob(..., recursive=True)``, which follows symlinks, globs in sorted order); a count
        other than ``expected`` is ir_datasets' own error."""
        from glob import glob

        from leakexp.data.files import DataFormatError

        found = [Path(p) for g in sorted(self.globs) for p in sorted(glob(str(self.root / g), recursive=True))
                 if Path(p).is_file()]
        if self.expected is not None and len(found) != self.expected:
            raise DataFormatError(f"ir_datasets '{self.dataset_id}': {len(found)} files under {self.root} match "
                                  f"{', '.join(self.globs)}, not the {self.expected:,} it expects; link the folders "
                                  "so that these globs match the collection's files")
        return found

    def identity(self) -> dict:
        """What keys record of them: the folder's identity (every file's path, size and mtime) and the globs."""
        return {"folder": shown(self.root), "identity": file_identity(self.root), "globs": list(self.globs)}


def trec_files(dataset_id: str) -> TrecFiles | None:
    """The raw TREC SGML files of ``dataset_id``'s documents, when ir_datasets reads them from a folder through path
    globs (``disks45/nocr``: ``**/FBIS/FB*``, ``**/FR94/??/FR*``, ``**/FT/*/FT*``, ``**/LATIMES/LA*``,
    ``ir_datasets/datasets/disks45.py`` lines 41-48); None for any other dataset (NYT, WaPo, MS MARCO, local ones).
    The globs and file count are ``TrecDocs``' own attributes (``_path_globs``, ``_expected_file_count``,
    ``ir_datasets/formats/trec.py`` lines 87-92, ir_datasets 0.6.3)."""
    import ir_datasets
    from ir_datasets.formats import TrecDocs

    try:
        ds = ir_datasets.load(dataset_id)
    except KeyError:
        return None
    found: dict[str, Any] = {}
    _handlers(ds, found)
    docs = found.get("docs")
    if not isinstance(docs, TrecDocs) or not getattr(docs, "_path_globs", None):
        return None
    files = [f for f in _downloads(docs, "docs", set())]
    if len(files) != 1:
        return None
    return TrecFiles(dataset_id, files[0].path, tuple(docs._path_globs), docs._expected_file_count)
