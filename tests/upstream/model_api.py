"""A stand-in for the model API that Claude Code calls, so that a test can see what the agent is
given: ``claude -p`` with ``ANTHROPIC_BASE_URL`` pointed here sends its Messages request (system
prompt, tool list with every tool's name and input schema) and gets a one-word answer back.

Only what ``claude -p`` needs is answered: ``POST /v1/messages`` as a stream of server-sent events
(or one JSON message when the request does not ask for a stream); any other path gets ``{}``.
Every request body is kept, in order, for the test to read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "ok"


@dataclass
class ModelApi:
    """The running stand-in: its ``url`` and the request bodies it received."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)

    def tools(self) -> dict[str, dict[str, Any]]:
        """Tool name -> input schema, from the last Messages request that carried tools."""
        with_tools = [r for r in self.requests if r.get("tools")]
        assert with_tools, f"no request with tools among {len(self.requests)}"
        return {t["name"]: t.get("input_schema", {}) for t in with_tools[-1]["tools"]}


def _message(model: str) -> dict[str, Any]:
    return {"id": "msg_test", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}


def _events(model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The Messages API's event stream for a one-text-block answer."""
    yield "message_start", {"type": "message_start", "message": {**_message(model), "content": [],
                                                                   "stop_reason": None}}
    yield "content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": {"type": "text", "text": ""}}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0,
                                  "delta": {"type": "text_delta", "text": ANSWER}}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                            "usage": {"output_tokens": 1}}
    yield "message_stop", {"type": "message_stop"}


@contextmanager
def model_api() -> Iterator[ModelApi]:
    """The stand-in on a free loopback port, in a thread, shut down at the end."""
    api = ModelApi(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet: pytest shows failures, not access logs
            pass

        def _reply(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            if not self.path.startswith("/v1/messages"):
                self._reply(b"{}", "application/json")
                return
            body: dict[str, Any] = json.loads(raw or b"{}")
            api.requests.append(body)
            model = str(body.get("model", "test"))
            if body.get("stream"):
                stream = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in _events(model))
                self._reply(stream.encode(), "text/event-stream")
            else:
                self._reply(json.dumps(_message(model)).encode(), "application/json")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
