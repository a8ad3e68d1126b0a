"""A real HTTP server on 127.0.0.1 that the tests start themselves: it serves given bytes at given paths, answers
Range requests (206 with Content-Range), records every request, and can cut a response off part-way (the client
then sees fewer bytes than Content-Length announced, as when a connection drops). No test reaches the internet."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Seen:
    method: str
    path: str
    headers: dict


@dataclass
class FileServer:
    files: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # extra response headers per path
    cut: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before the connection is dropped (once)
    route: Callable[[str, str], tuple[int, dict, bytes] | None] | None = None  # (method, path) -> response
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _answer(self, body_too: bool) -> None:
                server.seen.append(Seen(self.command, self.path, dict(self.headers)))
                path = self.path
                if server.route is not None:
                    routed = server.route(self.command, path)
                    if routed is not None:
                        status, headers, body = routed
                        self.send_response(status)
                        for k, v in headers.items():
                            self.send_header(k, v)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        if body_too:
                            self.wfile.write(body)
                        return
                bare = path.split("?")[0]
                if bare not in server.files:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = server.files[bare]
                start, status = 0, 200
                wanted = self.headers.get("Range", "")
                if wanted.startswith("bytes=") and wanted.endswith("-"):
                    start = int(wanted[len("bytes="):-1])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(data) - start))
                for k, v in server.headers.get(bare, {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if not body_too:
                    return
                body = data[start:]
                if bare in server.cut:
                    n = server.cut.pop(bare)
                    self.wfile.write(body[:n])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

            def do_GET(self):
                self._answer(True)

            def do_HEAD(self):
                self._answer(False)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def free_port_url() -> str:
    """The URL of a port on 127.0.0.1 where nothing listens (a server that is down: connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def hub_route(models: dict[tuple[str, str], dict[str, bytes]]):
    """The few endpoints huggingface_hub's ``snapshot_download`` calls for a commit, for ``models`` ((repository,
    commit) -> {path: bytes}): the tree listing ``GET /api/models/<repo>/tree/<commit>`` (JSON entries: type, path,
    size, git blob oid) and each file at ``/<repo>/resolve/<commit>/<path>`` (HEAD and GET, with X-Repo-Commit and
    ETag, the blob oid); any other commit of a known repository is a 404 with X-Error-Code RevisionNotFound."""
    import hashlib
    import json

    def oid(data: bytes) -> str:
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def route(method: str, path: str):
        bare = path.split("?")[0]
        for (repo, commit), files in models.items():
            tree = f"/api/models/{repo}/tree/"
            if bare.startswith(tree):
                if bare[len(tree):].split("/")[0] != commit:
                    return 404, {"X-Error-Code": "RevisionNotFound"}, b'{"error": "Invalid rev id"}'
                listing = [{"type": "file", "path": k, "size": len(v), "oid": oid(v)} for k, v in sorted(files.items())]
                return 200, {"Content-Type": "application/json"}, json.dumps(listing).encode()
            resolve = f"/{repo}/resolve/"
            if bare.startswith(resolve):
                rev, _, name = bare[len(resolve):].partition("/")
                if rev != commit:
                    return 404, {"X-Error-Code": "RevisionNotFound"}, b""
                if name not in files:
                    return 404, {"X-Error-Code": "EntryNotFound"}, b""
                data = files[name]
                return 200, {"X-Repo-Commit": commit, "ETag": f'"{oid(data)}"',
                             "Content-Type": "application/octet-stream"}, data  # HEAD: the headers only
        return None

    return route


def folder_files(folder) -> dict[str, bytes]:
    """Every file below ``folder`` by its relative path (a saved model as the hub would serve it)."""
    from pathlib import Path

    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def no_internet(monkeypatch) -> None:
    """Connections anywhere but this machine's loopback fail at once: no test reaches the internet."""
    real = socket.socket.connect

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1")):
            raise ConnectionRefusedError(f"the tests reach no host but 127.0.0.1 (asked for {host})")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
