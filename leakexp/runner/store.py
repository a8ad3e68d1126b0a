"""The artifact store: readable paths keyed by configuration, atomic writes, verified done markers, locks.

An artifact is a directory under the store root. Stage artifacts live at a readable path that ends in the
hash of the configuration that produced them, e.g. ``train/robust04/msm/16000/knrm/seed-3/1f0c9e2a7b44``,
so two configurations never share (or overwrite) an artifact: re-running a cell with another setting
leaves the finished one in place, and the tables of each configuration find their own results.

An artifact is complete only when its done marker ``DONE.json`` exists. The marker carries the config and
its hash, key figures, and the size and checksum of every file. Work happens in a hidden temporary sibling
directory that receives its marker and is then renamed into place, so a kill at any moment leaves either
nothing, an ignorable temporary directory, or a complete artifact; an existing artifact is replaced only
after its successor is complete. Reading checks each file's size (cheap, catches truncation);
:meth:`Store.verify` also checks the checksums (``leakexp status --verify``). Concurrent workers on one
artifact are serialised by a file lock next to it; a waiting worker says whom it waits for.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

DONE = "DONE.json"
KEY_LENGTH = 12  # hex digits of the config hash in an artifact path
WAIT_NOTICE_S = 15.0  # a waiting worker repeats whom it waits for this often


class StoreError(RuntimeError):
    """The store root cannot be used (a file, not writable); the message says what to do."""


def config_hash(config: Any) -> str:
    """Stable short hash of a JSON-serialisable config (key order does not matter)."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same directory, fsync, and rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    """BLAKE2b of a file's bytes (fast enough for multi-GB checkpoints)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_table(root: Path) -> dict[str, dict]:
    """Size and checksum of every file under ``root`` (relative paths), the marker's ``files``."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file() and p.name != DONE:
            out[p.relative_to(root).as_posix()] = {"size": p.stat().st_size, "blake2b": file_digest(p)}
    return out


def files_digest(files: dict) -> str:
    """One hash of an artifact's content: its files' relative paths, sizes and checksums (the marker's ``files``), so
    two stores' artifacts compare by their markers without reading a file (``leakexp diff``)."""
    rows = sorted((rel, info.get("size"), info.get("blake2b")) for rel, info in files.items())
    return hashlib.blake2b(json.dumps(rows, separators=(",", ":")).encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Marker:
    """What a done marker records about a finished artifact."""

    config_hash: str
    figures: dict
    finished_at: float
    seconds: float
    files: dict | None = None  # relative path -> {size, blake2b}; None for markers without a file table
    config: Any = None
    content: str | None = None  # files_digest(files); None for markers written before it was recorded
    upstream: tuple[str, ...] | None = None  # keys of the stored artifacts it read (through in-process values)

    @property
    def content_or_table(self) -> str | None:
        """Its content hash: recorded, else made from its file table (the same value); None without either."""
        return self.content or (files_digest(self.files) if self.files is not None else None)


def parse_marker(data: Any) -> Marker | None:
    """A marker from a DONE.json's content, or None if it is not a well-formed marker."""
    if not isinstance(data, dict):
        return None
    h, figures, files = data.get("config_hash"), data.get("figures", {}), data.get("files")
    if not isinstance(h, str) or not isinstance(figures, dict) or not isinstance(data.get("finished_at"), (int, float)):
        return None
    if files is not None and not (isinstance(files, dict) and all(isinstance(v, dict) for v in files.values())):
        return None
    content, upstream = data.get("content"), data.get("upstream")
    return Marker(h, figures, float(data["finished_at"]), float(data.get("seconds", 0.0) or 0.0), files,
                  data.get("config"), content if isinstance(content, str) else None,
                  tuple(str(k) for k in upstream) if isinstance(upstream, list) else None)


class Store:
    """One root directory holding every artifact of every stage."""

    def __init__(self, root: str | os.PathLike, *, create: bool = True):
        self.root = Path(root).expanduser().resolve()
        self.read_only = not create  # a command that only reads (status, plan, tables) changes nothing in it
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"the store {self.root} is a file, not a directory; point LEAKEXP_STORE (or store=) "
                             "at a directory")
        if create:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the store {self.root} ({exc.strerror}); point LEAKEXP_STORE (or "
                                 "store=) at a writable directory") from None

    def path(self, *parts: Any) -> Path:
        return self.root.joinpath(*(str(p) for p in parts))

    def folder(self, name: str, *, renamed_from: str) -> str:
        """The folder of a stage named ``name``, once named ``renamed_from`` (``Stage.keyed_as``): the old folder is
        moved to the new name once by a store that may write, and read where it is by one that may not."""
        old, new = self.path(renamed_from), self.path(name)
        if renamed_from == name or new.exists() or not old.is_dir():
            return name
        if self.read_only or not self.writable():
            return renamed_from
        try:
            old.rename(new)
        except OSError:  # another worker moved it first, or the move is refused here
            return name if new.exists() else renamed_from
        return name

    def keyed(self, *parts: Any, config: Any) -> Path:
        """The path of the artifact ``parts`` made by ``config``: the readable parts, then the config hash."""
        return self.path(*parts, config_hash(config)[:KEY_LENGTH])

    def writable(self) -> bool:
        return os.access(self.root, os.W_OK)

    def require_writable(self, what: str) -> None:
        if not self.root.exists():
            raise StoreError(f"{what}: there is no store at {self.root} (nothing computed yet); run `leakexp grid` "
                             "(or `make demo`) first, or point store=/path at an existing store")
        if not self.writable():
            raise StoreError(f"{what} needs to write to the store {self.root}, which is read-only; use a writable "
                             "copy (LEAKEXP_STORE=/path or store=/path)")

    # -- state -----------------------------------------------------------------------------------
    @staticmethod
    def marker(path: Path) -> Marker | None:
        """The parsed done marker of ``path``; None if absent, unreadable or not a marker (e.g. ``[]``)."""
        f = Path(path) / DONE
        try:
            return parse_marker(json.loads(f.read_text()))
        except (OSError, ValueError):
            return None

    @staticmethod
    def damaged_files(path: Path, marker: Marker, *, checksums: bool = False) -> list[str]:
        """Files of a finished artifact that are missing or differ from its marker (size; with ``checksums``
        also content)."""
        bad = []
        for rel, info in (marker.files or {}).items():
            p = Path(path) / rel
            try:
                size = p.stat().st_size
            except OSError:
                bad.append(f"{rel} (missing)")
                continue
            if size != info.get("size"):
                bad.append(f"{rel} (size {size}, expected {info.get('size')})")
            elif checksums and file_digest(p) != info.get("blake2b"):
                bad.append(f"{rel} (checksum differs)")
        return bad

    def valid_marker(self, path: Path, *, checksums: bool = False) -> Marker | None:
        """The marker of an intact finished artifact (files present with their recorded sizes, and with
        ``checksums`` their recorded content), else None."""
        m = self.marker(path)
        if m is None or self.damaged_files(path, m, checksums=checksums):
            return None
        return m

    def is_done(self, path: Path, config: Any, *, checksums: bool = False) -> bool:
        m = self.valid_marker(path, checksums=checksums)
        return m is not None and m.config_hash == config_hash(config)

    def verify(self, path: Path) -> list[str]:
        """Problems of a finished artifact found by re-reading every file (empty list: intact)."""
        m = self.marker(path)
        if m is None:
            return ["no valid done marker"]
        return self.damaged_files(path, m, checksums=True)

    def others(self, keyed_path: Path) -> list[Path]:
        """Finished artifacts of the same readable path made by other configurations (stale for this one)."""
        keyed_path = Path(keyed_path)
        parent = keyed_path.parent
        if not parent.is_dir():
            return []
        return sorted(p for p in parent.iterdir()
                      if p.is_dir() and p != keyed_path and not p.name.startswith(".") and (p / DONE).exists())

    @staticmethod
    def lock_path(path: Path) -> Path:
        path = Path(path)
        return path.parent / f".{path.name}.lock"

    @staticmethod
    def holder_path(path: Path) -> Path:
        path = Path(path)
        return path.parent / f".{path.name}.lock.json"

    @staticmethod
    def partial_path(path: Path) -> Path:
        """Where a stage keeps work that must survive a kill until its artifact is done (embedding chunks, a
        resumable training state): ``<artifact>.partial``, named by the artifact's key; removed once it is done."""
        path = Path(path)
        return path.parent / f"{path.name}.partial"

    @staticmethod
    def failure_path(path: Path) -> Path:
        path = Path(path)
        return path.parent / f".{path.name}.failed.json"

    def is_locked(self, path: Path) -> bool:
        """True while another process holds the artifact's lock (i.e. is computing it).

        Looks without creating anything, so it works on a read-only store and leaves no lock files behind.
        """
        import fcntl

        try:
            fd = os.open(self.lock_path(path), os.O_RDONLY)
        except OSError:
            return False  # never locked (or unreadable: nobody can be computing it here)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def holder(self, path: Path) -> str:
        """Who computes ``path`` right now, as recorded by its lock holder ('another worker' if unknown)."""
        try:
            h = read_json(self.holder_path(path))
            since = time.strftime("%H:%M:%S", time.localtime(float(h["since"])))
            return f"pid {h['pid']} on {h['host']} (since {since})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another worker"

    # -- computing ---------------------------------------------------------------------------------
    def _acquire(self, path: Path, timeout: float) -> FileLock:
        lock = FileLock(str(self.lock_path(path)), timeout=timeout)
        try:
            lock.acquire(timeout=0)
            return lock
        except Timeout:
            pass
        rel = self._rel(path)
        waited, start = 0.0, time.time()
        while True:
            log.info("waiting for %s, which %s is computing", rel, self.holder(path))
            step = WAIT_NOTICE_S if timeout < 0 else min(WAIT_NOTICE_S, max(timeout - waited, 0.0))
            try:
                lock.acquire(timeout=step)
                log.info("%s: lock acquired after %.0fs", rel, time.time() - start)
                return lock
            except Timeout:
                waited = time.time() - start
                if 0 <= timeout <= waited:
                    raise

    def _rel(self, path: Path) -> str:
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return str(path)

    def ensure(
        self,
        path: Path,
        config: Any,
        compute: Callable[[Path], dict | None],
        *,
        timeout: float = -1,
        checksums: bool = False,
        upstream: list[str] | None = None,
    ) -> Path:
        """Return ``path``, computing it with ``compute(tmp_dir)`` unless done with the same config.

        ``compute`` writes the artifact's files into ``tmp_dir`` and returns key figures for the done
        marker. A directory without a matching intact marker (partial, damaged, or made by another config)
        is recomputed; the old directory stays in place until its successor is complete. A failure is
        recorded next to the artifact (for ``leakexp status``) and re-raised. With ``checksums`` an artifact
        counts as done only when every file's content matches its marker (checkpoints: checked when loaded).
        The marker also records the content's hash and ``upstream``, the keys of the stored artifacts it was made
        from, so that ``leakexp diff`` orders two stores' differences by lineage from markers alone.
        """
        path = Path(path)
        h = config_hash(config)
        if self.is_done(path, config, checksums=checksums):
            return path
        self._restore_aside(path, config)
        if self.is_done(path, config, checksums=checksums):
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = self._acquire(path, timeout)
        try:
            if self.is_done(path, config, checksums=checksums):  # another worker finished it while we waited
                return path
            if path.exists():
                m = self.marker(path)
                why = ("damaged: " + ", ".join(self.damaged_files(path, m, checksums=checksums))) \
                    if m and m.config_hash == h else \
                    "made by another config" if m else "incomplete"
                (log.warning if why.startswith("damaged") else log.info)("recomputing %s (%s)", self._rel(path), why)
            atomic_write_json(self.holder_path(path), {"pid": os.getpid(), "host": socket.gethostname(),
                                                       "since": time.time()})
            tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
            for orphan in path.parent.glob(f".{path.name}.tmp-*"):
                shutil.rmtree(orphan, ignore_errors=True)  # left by a killed worker; we hold the lock
            tmp.mkdir(parents=True)
            start = time.time()
            try:
                figures = compute(tmp) or {}
                files = file_table(tmp)
                atomic_write_json(tmp / DONE, {
                    "config_hash": h, "config": config, "figures": figures, "finished_at": time.time(),
                    "seconds": round(time.time() - start, 3), "files": files, "content": files_digest(files),
                    **({"upstream": sorted(upstream)} if upstream is not None else {}),
                })
            except BaseException as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                # an interrupt, or the process ending (SystemExit: submitit's exit after requeueing a preempted
                # or timed-out job), is no failure of the artifact: the job comes back and computes it
                if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    self._record_failure(path, h, exc)
                raise
            _fsync_dir(tmp)
            self._swap_in(tmp, path)
            self.failure_path(path).unlink(missing_ok=True)
            shutil.rmtree(self.partial_path(path), ignore_errors=True)  # what survived kills is done with
            self._log_computed(path, time.time() - start)
        finally:
            self.holder_path(path).unlink(missing_ok=True)
            lock.release()
        return path

    def _swap_in(self, tmp: Path, path: Path) -> None:
        """Rename the complete ``tmp`` to ``path``; an old ``path`` is moved aside first and removed after."""
        aside = path.parent / f".{path.name}.old-{os.getpid()}"
        if path.exists():
            os.replace(path, aside)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        if aside.exists():
            shutil.rmtree(aside, ignore_errors=True)

    def _restore_aside(self, path: Path, config: Any) -> None:
        """A kill between the two renames of :meth:`_swap_in` leaves the old artifact aside: put it back."""
        if path.exists() or not path.parent.is_dir():
            return
        for aside in path.parent.glob(f".{path.name}.old-*"):
            if self.is_done(aside, config):
                try:
                    os.replace(aside, path)
                except OSError:
                    return
                log.info("restored %s from an interrupted replacement", self._rel(path))
                return

    def _record_failure(self, path: Path, h: str, exc: BaseException) -> None:
        try:
            atomic_write_json(self.failure_path(path), {
                "config_hash": h, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                "traceback": traceback.format_exc(), "at": time.time(),
            })
        except OSError:
            log.warning("could not record the failure of %s", self._rel(path))

    def _log_computed(self, path: Path, seconds: float) -> None:
        """One line per computed artifact in ``logs/computed.tsv``: what a run actually did."""
        log_path = self.root / "logs" / "computed.tsv"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\t{os.getpid()}\t{self._rel(path)}\t{seconds:.3f}\n"
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one short O_APPEND write: safe across concurrent workers
        finally:
            os.close(fd)

    def computed(self) -> list[str]:
        """Relative paths of every artifact computed in this store, in order (from ``logs/computed.tsv``)."""
        log_path = self.root / "logs" / "computed.tsv"
        if not log_path.exists():
            return []
        return [line.split("\t")[2] for line in log_path.read_text().splitlines() if line.count("\t") >= 3]
