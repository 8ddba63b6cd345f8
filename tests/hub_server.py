"""A local HTTP server standing in for the Hugging Face hub, for `channel pull`'s tests.

It answers the three requests huggingface_hub makes for a download: the repository's
description (`GET /api/models/ORG/NAME`, whose `siblings` list its files), a file's metadata
(`HEAD /ORG/NAME/resolve/main/FILE`: X-Repo-Commit, X-Linked-Etag with the sha256 as the hub
gives it for an LFS file, X-Linked-Size) and the file itself (`GET`, honouring `Range`). A
test can make it cut a transfer half way, stall half way until released, or name a sha256
that the bytes do not have; it records every request it is sent.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

COMMIT = "5" * 40
RESOLVE = re.compile(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)")
API_MODEL = re.compile(r"/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?")


@dataclass
class HubFile:
    data: bytes
    sha256: str = ""  # what the hub says the sha256 is; "" means the true one
    cut_at: int | None = None  # the first full GET closes the connection after this many
    stall_at: int | None = None  # the first full GET stops here until `release` is set
    release: threading.Event = field(default_factory=threading.Event)

    def etag(self) -> str:
        return self.sha256 or hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    range: str | None


class FakeHub:
    """The server, on 127.0.0.1 and a free port, in a daemon thread."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, HubFile]] = {}
        self.seen: list[Seen] = []
        self._cut: set[tuple[str, str]] = set()  # files whose one cut has happened
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet: the tests read `seen`
                return None

            def do_HEAD(self) -> None:
                hub.answer(self, body=False)

            def do_GET(self) -> None:
                hub.answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, repo: str, name: str, data: bytes, **how: object) -> HubFile:
        file = HubFile(data, **how)  # type: ignore[arg-type]
        self.repos.setdefault(repo, {})[name] = file
        return file

    def ranges(self, name: str) -> list[str | None]:
        """The Range headers of the GETs for file `name`, in order (None: the whole file)."""
        return [s.range for s in self.seen if s.method == "GET" and s.path.endswith(name)
                and "/resolve/" in s.path]

    def close(self) -> None:
        for files in self.repos.values():
            for file in files.values():
                file.release.set()
        self.server.shutdown()
        self.server.server_close()

    def answer(self, req: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(req.path.split("?", 1)[0])
        self.seen.append(Seen(req.command, path, req.headers.get("Range")))
        if (match := API_MODEL.fullmatch(path)) and body:
            return self._model_info(req, match.group(1))
        if match := RESOLVE.fullmatch(path):
            return self._resolve(req, match.group(1), match.group(3), body)
        return self._error(req, 404, "EntryNotFound")

    def _model_info(self, req: BaseHTTPRequestHandler, repo: str) -> None:
        if repo not in self.repos:
            return self._error(req, 404, "RepoNotFound")
        payload = json.dumps({"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                              "siblings": [{"rfilename": n} for n in self.repos[repo]]})
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(payload)))
        req.end_headers()
        req.wfile.write(payload.encode())

    def _resolve(self, req: BaseHTTPRequestHandler, repo: str, name: str, body: bool) -> None:
        file = self.repos.get(repo, {}).get(name)
        if file is None:
            return self._error(req, 404, "RepoNotFound" if repo not in self.repos
                               else "EntryNotFound")
        start = 0
        asked = req.headers.get("Range")
        if body and asked and (m := re.fullmatch(r"bytes=(\d+)-", asked)):
            start = int(m.group(1))
        req.send_response(206 if start else 200)
        req.send_header("X-Repo-Commit", COMMIT)
        req.send_header("ETag", f'"{file.etag()}"')
        req.send_header("X-Linked-Etag", f'"{file.etag()}"')
        req.send_header("X-Linked-Size", str(len(file.data)))
        req.send_header("Accept-Ranges", "bytes")
        req.send_header("Content-Length", str(len(file.data) - start))
        if start:
            req.send_header("Content-Range", f"bytes {start}-{len(file.data) - 1}/"
                                             f"{len(file.data)}")
        req.end_headers()
        if not body:
            return
        key = (repo, name)
        stop = file.cut_at if file.cut_at is not None else file.stall_at
        if start == 0 and stop is not None and key not in self._cut:
            self._cut.add(key)
            req.wfile.write(file.data[:stop])
            req.wfile.flush()
            if file.stall_at is not None:
                file.release.wait(60)
            req.close_connection = True
            return
        req.wfile.write(file.data[start:])

    def _error(self, req: BaseHTTPRequestHandler, status: int, code: str) -> None:
        req.send_response(status)
        req.send_header("X-Error-Code", code)
        req.send_header("Content-Length", "0")
        req.end_headers()
