"""The artifact store: readable paths, atomic writes, done markers, and locks.

An artifact is a directory under the store root, e.g. ``train/robust04/msm/16000/knrm/seed-3``. It is
complete only when its done marker ``DONE.json`` exists, written last and atomically, carrying the hash of
the config that produced it. Work happens in a hidden temporary sibling directory that is renamed into
place, so a kill at any moment leaves either nothing, an ignorable temporary directory, or a complete
artifact. Concurrent workers on one artifact are serialised by a file lock next to it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from filelock import FileLock

log = logging.getLogger(__name__)

DONE = "DONE.json"


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
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


@dataclass(frozen=True)
class Marker:
    """What a done marker records about a finished artifact."""

    config_hash: str
    figures: dict
    finished_at: float
    seconds: float


class Store:
    """One root directory holding every artifact of every stage."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, *parts: Any) -> Path:
        return self.root.joinpath(*(str(p) for p in parts))

    # -- state -----------------------------------------------------------------------------------
    @staticmethod
    def marker(path: Path) -> Marker | None:
        f = Path(path) / DONE
        if not f.exists():
            return None
        try:
            d = read_json(f)
            return Marker(d["config_hash"], d.get("figures", {}), d["finished_at"], d.get("seconds", 0.0))
        except (ValueError, KeyError):
            return None

    def is_done(self, path: Path, config: Any) -> bool:
        m = self.marker(path)
        return m is not None and m.config_hash == config_hash(config)

    @staticmethod
    def lock_path(path: Path) -> Path:
        path = Path(path)
        return path.parent / f".{path.name}.lock"

    @staticmethod
    def failure_path(path: Path) -> Path:
        path = Path(path)
        return path.parent / f".{path.name}.failed.json"

    def is_locked(self, path: Path) -> bool:
        """True while another process holds the artifact's lock (i.e. is computing it)."""
        lock = FileLock(str(self.lock_path(path)), timeout=0)
        try:
            lock.acquire()
        except Exception:
            return True
        lock.release()
        return False

    # -- computing ---------------------------------------------------------------------------------
    def ensure(
        self,
        path: Path,
        config: Any,
        compute: Callable[[Path], dict | None],
        *,
        timeout: float = -1,
    ) -> Path:
        """Return ``path``, computing it with ``compute(tmp_dir)`` unless done with the same config.

        ``compute`` writes the artifact's files into ``tmp_dir`` and returns key figures for the done
        marker. A directory without a matching marker (partial, or made by another config) is removed
        and redone. A failure is recorded next to the artifact (for ``leakexp status``) and re-raised.
        """
        path = Path(path)
        h = config_hash(config)
        if self.is_done(path, config):
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.lock_path(path)), timeout=timeout):
            if self.is_done(path, config):  # another worker finished it while we waited
                return path
            tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
            for stale in (tmp, path):
                if stale.exists():
                    log.info("removing incomplete or outdated artifact %s", stale)
                    shutil.rmtree(stale)
            for orphan in path.parent.glob(f".{path.name}.tmp-*"):
                shutil.rmtree(orphan, ignore_errors=True)  # left by a killed worker; we hold the lock
            tmp.mkdir(parents=True)
            start = time.time()
            try:
                figures = compute(tmp) or {}
            except BaseException as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                if not isinstance(exc, KeyboardInterrupt):
                    atomic_write_json(
                        self.failure_path(path),
                        {
                            "config_hash": h,
                            "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                            "traceback": traceback.format_exc(),
                            "at": time.time(),
                        },
                    )
                raise
            _fsync_dir(tmp)
            os.replace(tmp, path)
            _fsync_dir(path.parent)
            atomic_write_json(
                path / DONE,
                {
                    "config_hash": h,
                    "config": config,
                    "figures": figures,
                    "finished_at": time.time(),
                    "seconds": round(time.time() - start, 3),
                },
            )
            self.failure_path(path).unlink(missing_ok=True)
            self._log_computed(path, time.time() - start)
        return path

    def _log_computed(self, path: Path, seconds: float) -> None:
        """One line per computed artifact in ``logs/computed.tsv``: what a run actually did."""
        log_path = self.root / "logs" / "computed.tsv"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\t{os.getpid()}\t{path.relative_to(self.root)}\t{seconds:.3f}\n"
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
