"""What a configuration reads from outside leakexp and the store, and ``leakexp fetch``, which downloads the public
part of it on a connected machine (a cluster's login node) so that the runs after it need no network:

- the Hugging Face models its settings name (``detect.sbert``, each model's ``checkpoint``), at their pinned commits,
  into the hub cache (leakexp.lib.hub);
- GloVe 6B (``fetch.glove``: the Stanford archive at a pinned sha256), its file of the width a model's ``embeddings``
  names, put where that setting reads it;
- the SPIRE-22 authors' four final annotation files (real data, ``verify.annotations``) and the runs that the
  bundled Core 2017 / 2018 first stages were cut from, from their repository at the pinned commit
  (``fetch.spire22``), each checked against its pinned sha256; the bundled top-100 runs are checked against them;
- the public files ir_datasets reads for the training pool and the test collections, by ir_datasets itself (into
  ``$IR_DATASETS_HOME``, with its own md5 checks).

What cannot be fetched — the licensed TREC Disks 4 & 5 (Robust04), the New York Times corpus (Core 2017), the
Washington Post v2 (Core 2018), the query variants — is listed with where each must be placed. Plain files go
through :func:`leakexp.lib.download.fetch_file` (resumed, checked, moved in only when they match). No stage reads the
``fetch`` section: it keys nothing.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


from leakexp.data.files import DataUnavailable
from leakexp.data.sources import source_of
from leakexp.data.irds_files import LICENSED, dataset_files, home
from leakexp.data.judgments import BUNDLED, BUNDLED_RUNS
from leakexp.lib import hub
from leakexp.lib.download import DownloadError, fetch_file, part_path, unreachable
from leakexp.runner.config import FetchSettings, SourceFile, fetched_spire22
from leakexp.runner.schema import Settings
from leakexp.runner.stage import ConfigError
from leakexp.stages.sources import pool_source, require_variants
from leakexp.stages.train import checkpoint_setting


KINDS = ("models", "glove", "annotations", "runs", "irds")
GLOVE_FILE = re.compile(r"^glove\.6B\.(50|100|200|300)d\.txt$")
ANNOTATIONS = "src/main/resources/manual-annotations"
RUNS = "src/main/resources/run-files"


@dataclass
class Need:
    """One thing a run of the configuration reads from outside: fetchable (``get`` downloads it and says how) or to be
    placed by hand (``get`` None; ``how`` says where)."""

    kind: str  # one of KINDS, or "manual"
    what: str  # what it is and the setting that reads it
    where: str  # where it goes (or is)
    here: bool  # already on this machine
    get: Callable[[], str] | None = None
    how: str = ""
    url: str = ""  # where a fetchable file is downloaded from


def _models(s: Settings, models: list[str] | None = None) -> list[tuple[str, str, bool]]:
    """(setting, value, is SBERT) of every model setting the configuration's grid and cell read (``models``: of
    those re-rankers only)."""
    out = [("detect.sbert", s.detect.sbert, True)]
    for model in s.model_names if models is None else models:
        checkpoint = getattr(s.model_of(model), "checkpoint", None)
        if checkpoint is not None:
            out.append((checkpoint_setting(s, model), str(checkpoint), False))
    return out


def model_needs(s: Settings, models: list[str] | None = None) -> list[Need]:
    """The pinned Hugging Face models the settings name; a name that cannot be fetched as it is (no commit, not a hub
    name) is listed with what to change, a model missing where downloads are forbidden fails with today's line."""
    needs, seen = [], set()
    for setting, name, sbert in _models(s, models):
        if name in hub.SPECIAL or Path(name).expanduser().is_dir() or name in seen:
            continue
        seen.add(name)
        repo, revision = hub.parse(name)
        what = f"Hugging Face model {repo}" + (f" at {revision}" if revision else "") + f" ({setting})"
        try:
            hub.require(name, setting, alternative="bundled", sbert=sbert)  # checks only: no download out of fetching()
        except ConfigError as exc:
            if not hub.cached(name) and hub.offline() and revision and hub.COMMIT.match(revision):
                needs.append(Need("models", what, str(hub.snapshot_dir(name)), False, _refuse(str(exc))))
            else:  # no commit, or not a hub name: the setting must change
                needs.append(Need("models", what, name, False, None, str(exc)))
            continue
        needs.append(Need("models", what, str(hub.snapshot_dir(name)), hub.cached(name),
                          lambda name=name: f"fetched into {hub.download(name)}"))
    return needs


def _refuse(message: str) -> Callable[[], str]:
    def refuse() -> str:
        raise ConfigError(message)

    return refuse


def glove_needs(s: Settings, fs: FetchSettings, models: list[str] | None = None) -> list[Need]:
    """One need per GloVe file the models' ``embeddings`` name (several models may share one file; ``models``: of
    those re-rankers only)."""
    readers: dict[Path, list[str]] = {}
    for model in s.model_names if models is None else models:
        value = getattr(s.model_of(model), "embeddings", None)
        if value is not None and str(value) != "bundled":
            readers.setdefault(Path(str(value)).expanduser(), []).append(model)
    needs = []
    for path, models in readers.items():
        what = f"word vectors {path.name} (embeddings of {', '.join(models)})"
        if path.exists():
            needs.append(Need("glove", what, str(path), True, lambda: ""))
        elif not GLOVE_FILE.match(path.name):
            needs.append(Need("glove", what, str(path), False, None,
                              f"{path} does not exist and is no file of GloVe 6B (glove.6B.50d.txt … "
                              f"glove.6B.300d.txt, which leakexp fetches): put the file there"))
        else:
            needs.append(Need("glove", what, str(path), False, lambda path=path: _glove(fs, path), url=fs.glove.url))
    return needs


def _glove(fs: FetchSettings, dest: Path) -> str:
    """GloVe 6B's archive into fetch.dir (resumed, checked), its ``dest.name`` member extracted to ``dest``; the
    archive is removed once its member is in place."""
    if fs.glove.sha256 is None:
        raise DownloadError("fetch.glove.sha256 is not set: give the sha256 of the archive fetch.glove.url names "
                            "(a download is kept only when it matches)")
    archive = fetch_file(fs.glove.url, Path(fs.dir).expanduser() / Path(fs.glove.url).name, sha256=fs.glove.sha256,
                         what="GloVe 6B archive")
    part = part_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(archive) as z, z.open(dest.name) as src, open(part, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):  # the member's CRC is checked at its end
                out.write(block)
    except (KeyError, zipfile.BadZipFile, OSError) as exc:
        part.unlink(missing_ok=True)
        raise DownloadError(f"GloVe 6B archive {archive}: cannot extract {dest.name} ({exc})") from None
    os.replace(part, dest)
    archive.unlink()
    return f"extracted from {fs.glove.url} (sha256 checked) to {dest}"


def _raw(fs: FetchSettings, folder: str, f: SourceFile) -> str:
    return f"{fs.spire22.url.rstrip('/')}/{fs.spire22.commit}/{folder}/{f.name}"


def _spire_file(fs: FetchSettings, folder: str, f: SourceFile, dest: Path) -> str:
    if f.sha256 is None:
        raise DownloadError(f"{f.name}: its sha256 is not set in fetch.spire22; give the sha256 of the file at commit "
                            f"{fs.spire22.commit} (a download is kept only when it matches)")
    fetch_file(_raw(fs, folder, f), dest, sha256=f.sha256, what=f.name)
    return f"fetched (sha256 checked) to {dest}"


def spire22_dir(fs: FetchSettings) -> Path:
    """Where ``leakexp fetch`` puts the SPIRE-22 files that no setting places: one folder per commit
    (:func:`leakexp.runner.config.fetched_spire22`, where the readers look too)."""
    return fetched_spire22(fs).absolute()


def annotation_needs(s: Settings, fs: FetchSettings) -> tuple[list[Need], str | None]:
    """The study's annotation files a run of real data reads, and the ``verify.annotations`` override that names them
    where leakexp fetch puts them (None when the setting already names files)."""
    if pool_source(s.data).made_by:  # a generated world knows its planted leaks: nothing to fetch
        return [], None
    spec = s.verify.annotations
    known = {f.name: f for f in fs.spire22.annotations}
    override = None
    if spec is None or spec == "???":
        folder = spire22_dir(fs) / "manual-annotations"
        targets = [(folder / f.name, f) for f in fs.spire22.annotations]
        override = f"verify.annotations=[{','.join(str(p) for p, _ in targets)}]"
    elif isinstance(spec, (list, str)) and spec != "truth":
        paths = [Path(p).expanduser() for p in (spec if isinstance(spec, list) else [spec])]
        targets = [(p, known.get(p.name)) for p in paths]
    else:
        return [], None
    needs = []
    for path, f in targets:
        what = f"SPIRE-22 annotations {path.name} (verify.annotations)"
        if path.exists():
            needs.append(Need("annotations", what, str(path), True, lambda: ""))
        elif f is None:
            needs.append(Need("annotations", what, str(path), False, None,
                              f"verify.annotations names {path}, which does not exist and is none of the study's files "
                              f"({', '.join(known)}): put it there"))
        else:
            needs.append(Need("annotations", what, str(path), False,
                              lambda f=f, path=path: _spire_file(fs, ANNOTATIONS, f, path), url=_raw(fs, ANNOTATIONS, f)))
    return needs, override


def run_needs(s: Settings, fs: FetchSettings) -> list[Need]:
    """The SPIRE-22 runs whose top-100 ship in leakexp/data/runs/ and that the grid re-ranks (rerank.first_stage)."""
    spec = s.rerank.first_stage
    named = set((spec.values() if isinstance(spec, dict) else [spec]) if spec else [])
    needs = []
    for f in fs.spire22.runs:
        if f.bundled is None or f"{BUNDLED}{f.bundled}" not in named:
            continue
        dest = spire22_dir(fs) / "run-files" / f.name
        what = f"SPIRE-22 run {f.name} (the source of the bundled {f.bundled}, rerank.first_stage)"
        needs.append(Need("runs", what, str(dest), dest.exists(), lambda f=f, dest=dest: _run(fs, f, dest)))
    return needs


def _run(fs: FetchSettings, f: SourceFile, dest: Path) -> str:
    done = _spire_file(fs, RUNS, f, dest)
    bundled = BUNDLED_RUNS / str(f.bundled)
    top = [line for line in dest.read_text().splitlines(keepends=True) if int(line.split()[3]) <= 100]
    if gzip.decompress(bundled.read_bytes()).decode().splitlines(keepends=True) != top:
        raise DownloadError(f"{f.name}: its lines of rank <= 100 are not the bundled {bundled} (leakexp/data/runs/"
                            f"README.md says how that file was cut); the download is kept in {dest}")
    return f"{done}; the bundled {f.bundled} is its top-100"


def irds_needs(s: Settings) -> list[Need]:
    """The files ir_datasets reads for the training pool and the test collections: public ones fetched by ir_datasets
    itself, licensed and local ones listed."""
    data = s.data.model_dump()
    requests = list(source_of(data["kind"]).pool_datasets(data))
    for name in s.corpus_names:
        corpus = s.corpus_of(name).model_dump()
        requests += source_of(corpus["kind"], "corpus.kind").corpus_datasets(corpus)
    return irds_file_needs(requests)


def irds_file_needs(requests) -> list[Need]:
    """The files ir_datasets reads for ``requests`` ((dataset id, parts) pairs), each once."""
    needs, seen = [], set()
    for dataset_id, parts in requests:
        for part, files in dataset_files(dataset_id, parts).items():
            for f in files:
                if f.path in seen:
                    continue
                seen.add(f.path)
                what = f"ir_datasets '{dataset_id}' {f.what or part}"
                if f.exists():
                    needs.append(Need("irds", what, str(f.path), True, lambda: ""))
                elif f.licensed:
                    text = LICENSED.get(dataset_id.split("/")[0])
                    told = " ".join((f.instructions or "see ir-datasets.com").split())
                    how = text.format(path=f.path) if text else f"licensed: place it at {f.path} ({told})"
                    needs.append(Need("manual", what, str(f.path), False, None, how))
                elif f.url is not None and f.source is not None:
                    needs.append(Need("irds", what, str(f.path), False, lambda f=f: _irds(f), url=str(f.url)))
                else:
                    needs.append(Need("manual", what, str(f.path), False, None,
                                      f"a file of a locally registered dataset: write it at {f.path}"))
    return needs


def _irds(f) -> str:
    """One public file of ir_datasets, downloaded by ir_datasets (its mirrors, retries, resume and md5 check) into its
    home; its progress is logged at INFO."""
    urls = [u for u in (getattr(m, "url", None) for m in getattr(f.source, "mirrors", ())) if u] or [f.url]
    why = [unreachable(u) for u in urls]
    if all(why):  # no mirror answers: said once, without ir_datasets' retries and their log lines
        raise DownloadError(f"{f.path.name}: cannot reach {urlsplit(urls[0]).netloc} ({why[0]}) for {urls[0]}"
                            + (f" nor its {len(urls) - 1} mirror(s)" if len(urls) > 1 else "") + "; nothing was written")
    irds_log = logging.getLogger("ir_datasets")
    level = irds_log.level
    irds_log.setLevel(logging.INFO)
    try:
        path = f.source.path()
    except Exception as exc:  # ir_datasets raises IOError, HTTPError, its own md5 error ...
        raise DownloadError(f"{f.path.name}: ir_datasets could not fetch it from {f.url} "
                            f"({' '.join(f'{type(exc).__name__}: {exc}'.split())[:240]})") from None
    finally:
        irds_log.setLevel(level)
    return f"fetched by ir_datasets to {path}"


def variant_needs(s: Settings) -> list[Need]:
    """Query variants that detection reads and no file names: not public, placed by hand."""
    needs = []
    for name in [] if s.data.corpora == "???" else s.data.corpora:
        try:
            require_variants(s.corpus_of(name).model_dump(), list(s.detect.fields))
        except DataUnavailable as exc:
            needs.append(Need("manual", f"query variants of {name}", f"LEAKEXP_VARIANTS_{name.upper()}", False, None,
                              str(exc)))
    return needs


def needs(s: Settings, models: list[str] | None = None) -> tuple[list[Need], str | None]:
    """Everything a run of the settings ``s`` reads from outside leakexp and the store (``models``: re-ranking with
    those models only), and the ``verify.annotations`` override for the annotation files fetched to fetch.dir (None:
    not needed)."""
    fs = s.fetch
    annotations, override = annotation_needs(s, fs)
    return ([*model_needs(s, models), *glove_needs(s, fs, models), *annotations, *run_needs(s, fs), *irds_needs(s),
             *variant_needs(s)], override)


def fetch(s: Settings, *, only: list[str] | None = None, listing: bool = False,
          say: Callable[[str], None] = print) -> int:
    """Fetch what the runs of the settings ``s`` read and is public (``only``: those kinds), say what cannot be fetched
    and where to put it; ``listing``: say what would be fetched and touch nothing. Exit code: 0, or 1 when a fetch
    failed."""
    found, override = needs(s)
    wanted = [n for n in found if n.kind == "manual" or only is None or n.kind in only]
    fetchable = [n for n in wanted if n.kind != "manual"]
    manual = [n for n in wanted if n.kind == "manual" or (n.get is None and not n.here)]
    if not fetchable and not manual:
        say("nothing to fetch: every input of this configuration ships with leakexp or is computed by it "
            "(the toy world and the bundled models: experiment=demo)" if only is None else
            f"nothing to fetch of {', '.join(only)} for this configuration")
        return 0
    failed = fetched = 0
    for n in fetchable:
        if n.here:
            say(f"here     {n.what}: {n.where}")
        elif n.get is None:
            continue
        elif listing:
            say(f"to fetch {n.what}: {n.where}")
        else:
            try:
                say(f"fetched  {n.what}: {n.get()}")
                fetched += 1
            except (DownloadError, ConfigError) as exc:
                say(f"FAILED   {n.what}: {' '.join(str(exc).split())}")
                failed += 1
    if override and any(n.kind == "annotations" for n in fetchable):
        say(f"the annotation files are found there by verify.annotations: null, the paper's setting (the same as "
            f"{override})")
    if manual:
        say(f"cannot be fetched ({len(manual)}): place each where it says")
        for n in manual:
            say(f"  - {n.what}: {n.how}")
    if not listing:
        here = sum(n.here for n in fetchable)
        say(f"fetch: {fetched} fetched, {here} already here, {failed} failed, {len(manual)} to place by hand"
            f" (ir_datasets' home: {home()})")
    return 1 if failed else 0
