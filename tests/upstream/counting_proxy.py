"""A counting HTTP reverse proxy in front of a Chroma server: one per writer, so that the tests
can say which writer wrote what and how often (two writers on one collection).

Every request is forwarded as it is to the server (HTTP/1.1, keep-alive, one upstream connection
per client connection); the answer goes back with its body whole. A request whose path ends in a
collection's ``/add``, ``/upsert``, ``/update`` or ``/delete`` and that the server accepted (2xx)
is a write: recorded with its time, its operation and the ids its JSON body names (a delete by
``where`` names none). chroma-mcp (claude-mem's client) checks for existing ids with a ``get``
before it adds, so an add that would find its ids taken never reaches the server: the count is of
writes, not of attempts.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WRITE_OPS = ("add", "upsert", "update", "delete")
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a writer stopped or killed) is no error of the proxy's."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


@dataclass(frozen=True, slots=True)
class Write:
    """One accepted write request: when (monotonic seconds), to which collection (its id), what,
    the ids it named, and the texts and metadata it sent (None where it sent none)."""

    at: float
    collection: str
    op: str
    ids: tuple[str, ...]
    texts: tuple[str | None, ...]
    metadatas: tuple[dict[str, Any] | None, ...]


class CountingProxy:
    """``127.0.0.1:port`` forwards to ``127.0.0.1:target``; ``writes`` lists the accepted writes."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.writes: list[Write] = []
        self._lock = threading.Lock()
        self._open: set[Any] = set()  # handlers of open client connections
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"proxy-{self.port}", daemon=True)

    def start(self) -> CountingProxy:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()
        with self._lock:
            handlers = list(self._open)
        for handler in handlers:  # connections a killed client left open
            handler.close_upstream()
            with contextlib.suppress(OSError):
                handler.connection.close()

    def since(self, t: float, collection: str | None = None) -> list[Write]:
        """The writes accepted at or after monotonic time ``t`` (to one collection when given)."""
        with self._lock:
            return [w for w in self.writes if w.at >= t and collection in (None, w.collection)]

    def documents(self, t: float = 0.0, collection: str | None = None) -> dict[str, int]:
        """Documents written since ``t``, per operation (a delete by ``where`` counts as one)."""
        out = dict.fromkeys(WRITE_OPS, 0)
        for w in self.since(t, collection):
            out[w.op] += max(1, len(w.ids))
        return out

    def last_written(self, collection: str) -> dict[str, tuple[str | None, dict[str, Any] | None]]:
        """Per id, the text and metadata of its last add, upsert or update through this proxy
        (an update without texts or metadata keeps the earlier ones); deleted ids left out."""
        out: dict[str, tuple[str | None, dict[str, Any] | None]] = {}
        for w in self.since(0.0, collection):
            for i, doc_id in enumerate(w.ids):
                if w.op == "delete":
                    out.pop(doc_id, None)
                    continue
                text, meta = out.get(doc_id, (None, None))
                out[doc_id] = (w.texts[i] if w.texts[i] is not None else text,
                               w.metadatas[i] if w.metadatas[i] is not None else meta)
        return out

    def _record(self, path: str, op: str, body: bytes) -> None:
        parts = path.split("/")
        collection = parts[parts.index("collections") + 1] if "collections" in parts else ""
        ids: tuple[str, ...] = ()
        texts: tuple[str | None, ...] = ()
        metas: tuple[dict[str, Any] | None, ...] = ()
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            payload = json.loads(body)
            ids = tuple(str(i) for i in payload.get("ids") or ())
            texts = tuple(payload.get("documents") or (None,) * len(ids))
            metas = tuple(payload.get("metadatas") or (None,) * len(ids))
        with self._lock:
            self.writes.append(Write(time.monotonic(), collection, op, ids, texts, metas))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPConnection | None = None

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._open.add(self)

            def finish(self) -> None:
                with contextlib.suppress(OSError):
                    super().finish()
                self.close_upstream()

            def close_upstream(self) -> None:
                with proxy._lock:
                    proxy._open.discard(self)
                upstream, self.upstream = self.upstream, None
                if upstream is not None:
                    upstream.close()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
                """Silent: the writes list is the record."""

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                if self.upstream is None:
                    self.upstream = http.client.HTTPConnection("127.0.0.1", proxy.target, timeout=300)
                try:
                    self.upstream.request(self.command, self.path, body=body or None, headers=headers)
                    resp = self.upstream.getresponse()
                    data = resp.read()
                except (OSError, http.client.HTTPException):
                    self.upstream.close()
                    self.upstream = None
                    self.send_error(502)
                    return
                op = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                if self.command == "POST" and op in WRITE_OPS and "/collections/" in self.path \
                        and 200 <= resp.status < 300:
                    proxy._record(self.path.split("?", 1)[0], op, body)
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward

        return Handler
