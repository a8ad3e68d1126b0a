"""Plain files over HTTP(S) into place: resumed where a previous try stopped, checked against a pinned sha256, and
moved in only when they match.

A download writes ``<dest>.part`` and, when a ``.part`` is there from an interrupted try, asks the server for the
rest (an HTTP Range request; a server that ignores it sends the whole file again, which replaces the part). The
finished part's sha256 must equal the pinned one: then it is renamed to ``dest`` (atomic on one file system);
otherwise it is deleted and nothing is kept. A server that cannot be reached is one line, before any file is
opened; a transfer cut off mid-way keeps its part for the next try and says so.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

CHUNK = 1 << 16  # bytes per read: a transfer cut off loses at most this much of what arrived
SHA256 = 64  # hex digits
PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_REACHED: dict[tuple[str, int], str | None] = {}  # (host, port) -> why it cannot be reached, None: it can


class DownloadError(Exception):
    """A file that could not be fetched: one line naming the URL, the reason, and what was kept."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def _reason(exc: BaseException) -> str:
    """The innermost cause of a requests / urllib3 error, in a few words (no object reprs or addresses)."""
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__
    for candidate in (seen, exc):
        text = " ".join(str(candidate).split())
        for marker in ("Connection refused", "Name or service not known", "timed out", "No route to host",
                       "Temporary failure in name resolution", "Connection reset by peer", "IncompleteRead"):
            if marker in text:
                return marker.lower() if marker != "IncompleteRead" else "the connection was cut off"
    return type(seen).__name__


def unreachable(url: str, timeout: float = 5.0) -> str | None:
    """Why the server of ``url`` cannot be reached, in a few words, or None: one TCP connection per host and port a
    process, so that a machine without network learns it once instead of once per file, each after a library's
    retries. Behind a proxy (``HTTPS_PROXY`` and the like) the libraries' own connection decides (None)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(os.environ.get(v) for v in PROXIES):
        return None
    key = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    if key not in _REACHED:
        try:
            socket.create_connection(key, timeout=timeout).close()
            _REACHED[key] = None
        except OSError as exc:
            _REACHED[key] = _reason(exc) if not isinstance(exc, socket.gaierror) else "name or service not known"
    return _REACHED[key]


def fetch_file(url: str, dest: Path | str, *, sha256: str, what: str = "", timeout: float = 60.0,
               progress: bool | None = None) -> Path:
    """``url`` downloaded to ``dest`` with the content whose sha256 is ``sha256`` (hex); returns ``dest``.

    An existing ``dest`` with that content is kept as it is; one with other content is refused (it is not replaced).
    ``what`` names the file in messages. ``progress``: a progress bar (None: only on a terminal)."""
    import requests
    from tqdm.auto import tqdm

    dest = Path(dest)
    what = what or dest.name
    sha256 = str(sha256).lower()
    if len(sha256) != SHA256 or any(c not in "0123456789abcdef" for c in sha256):
        raise DownloadError(f"{what}: {sha256!r} is not a sha256 (64 hex digits); nothing downloaded")
    if dest.exists():
        if sha256_of(dest) == sha256:
            return dest
        raise DownloadError(f"{what}: {dest} exists and its sha256 is not the pinned {sha256}; move it away (it is "
                            f"not replaced) and run again")
    part = part_path(dest)
    have = part.stat().st_size if part.is_file() else 0
    headers = {"Range": f"bytes={have}-", "Accept-Encoding": "identity"} if have else {"Accept-Encoding": "identity"}
    host = urlsplit(url).netloc or url
    why = unreachable(url)
    if why:
        kept = f"; the {have:,} bytes fetched before are kept in {part}" if have else "; nothing was written"
        raise DownloadError(f"{what}: cannot reach {host} ({why}) for {url}{kept}")
    try:
        response = requests.get(url, headers=headers, stream=True, timeout=timeout)
    except requests.RequestException as exc:
        kept = f"; the {have:,} bytes fetched before are kept in {part}" if have else "; nothing was written"
        raise DownloadError(f"{what}: cannot reach {host} ({_reason(exc)}) for {url}{kept}") from None
    with response:
        if response.status_code == 416 and have:  # the part already holds the whole file
            pass
        elif response.status_code not in (200, 206):
            kept = f"; the {have:,} bytes fetched before are kept in {part}" if have else "; nothing was written"
            raise DownloadError(f"{what}: {url} answered HTTP {response.status_code} {response.reason}{kept}")
        else:
            resumed = response.status_code == 206 and have > 0
            if resumed and not response.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
                resumed = False  # a range other than the one asked for: start over
            start = have if resumed else 0
            length = response.headers.get("Content-Length")
            total = start + int(length) if length and length.isdigit() else None
            dest.parent.mkdir(parents=True, exist_ok=True)
            written = start
            try:
                with open(part, "ab" if resumed else "wb") as f, \
                        tqdm(total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024, desc=what,
                             disable=None if progress is None else not progress, leave=False) as bar:
                    for block in response.iter_content(CHUNK):
                        f.write(block)
                        written += len(block)
                        bar.update(len(block))
            except requests.RequestException as exc:
                raise DownloadError(f"{what}: the transfer from {host} stopped after {written:,}"
                                    f"{f' of {total:,}' if total else ''} bytes ({_reason(exc)}); they are kept in "
                                    f"{part}: run again to resume") from None
    got = sha256_of(part)
    if got != sha256:
        size = part.stat().st_size
        part.unlink()
        raise DownloadError(f"{what}: the {size:,} bytes from {url} have sha256 {got}, not the pinned {sha256}; "
                            f"nothing was kept")
    os.replace(part, dest)
    return dest
