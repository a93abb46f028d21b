"""What reaches `memsync mcp` (and the other front ends) from outside, with real processes: the
bearer token and ``serve_host`` over streamable HTTP, text that is not valid Unicode (a lone
surrogate escaped in JSON, bytes that are not UTF-8) at every entry, and a stderr without a line
per Chroma HTTP call."""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memsync.config.settings import Settings
from tests.conftest import free_port
from tests.servers.conftest import MEMSYNC, ROOT, HttpServer, mcp_over_http, server_env

pytestmark = pytest.mark.slow
TOKEN = "s3cret-token"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}


class StdioSession:
    """`memsync mcp` as a subprocess spoken to in raw JSON-RPC lines (bytes exactly as written: the
    SDK's client would refuse to send a lone surrogate); stderr collected to a file."""

    def __init__(self, settings: Settings, *args: str) -> None:
        self.stderr_path = settings.data_dir / f"mcp-stdio-{os.getpid()}-{time.monotonic_ns()}.log"
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen([MEMSYNC, "mcp", *args], env=server_env(settings), cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.rstrip(b"\n") + b"\n")
        self.proc.stdin.flush()

    def answers(self, ids: set[int], timeout: float = 120) -> dict[int, dict[str, Any]]:
        """The replies to the requests ``ids`` (any order), or an AssertionError naming those
        missing when ``timeout`` seconds passed."""
        got: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while not ids <= set(got):
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, (
                f"no answer to {sorted(ids - set(got))}: {self.stderr_path.read_text(errors='replace')[-2000:]}")
            for _ in self._selector.select(min(left, 1.0)):
                assert self.proc.stdout is not None
                self._buffer += self.proc.stdout.read() or b""
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "id" in message:
                    got[message["id"]] = message
        return got

    def close(self) -> str:
        """Stop the server (closing stdin ends it; SIGKILL after 10 s); its stderr."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._selector.close()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._stderr.close()
        return self.stderr_path.read_text(errors="replace")


def call(request_id: int, tool: str, arguments: bytes) -> bytes:
    """A tools/call line with ``arguments`` as raw JSON bytes (escapes and bytes kept as written)."""
    return (f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{{"name":"{tool}","arguments":'
            .encode() + arguments + b"}}")


def text_of(reply: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in reply["result"]["content"])


def test_stdio_answers_every_request_with_broken_unicode_and_logs_no_http_calls(served: Settings) -> None:
    """A lone surrogate escaped in a query got no JSON-RPC reply at all (the SDK's parser refused
    the line), and every Chroma HTTP call was an INFO line on stderr."""
    session = StdioSession(served)
    try:
        session.send(json.dumps(INITIALIZE).encode())
        # The default scope is every project: the instructions said "this project's memory".
        instructions = session.answers({1})[1]["result"]["instructions"]
        assert "across all projects unless you pass project" in instructions and "this project" not in instructions
        session.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        session.send(call(2, "search", rb'{"query":"upload retries \ud800","limit":3}'))
        session.send(call(3, "search", rb'{"query":"\udc00 dark mode \ud83d\ude00","project":"\udfff","limit":3}'))
        session.send(call(4, "search", b'{"query":"ledger \xed\xa0\x80 rows","limit":3}'))  # not UTF-8
        session.send(call(5, "find_by_file", rb'{"path":"retry.py\\ud800"}'))  # an escaped backslash: plain text
        session.send(call(6, "timeline", rb'{"anchor":"\ud800"}'))
        session.send(call(7, "get_observations", rb'{"ids":[true]}'))  # an INFO line from the SDK: stderr is read
        session.send(b'{"jsonrpc":"2.0","id":8,"method":"tools/list"}')
        got = session.answers({2, 3, 4, 5, 6, 7, 8})
    finally:
        stderr = session.close()
    texts = {i: text_of(got[i]) for i in range(2, 8)}
    for i in (2, 3, 4, 5):
        assert not got[i]["result"].get("isError"), texts[i]
    # Searched, and from Chroma over HTTP (the managed server): the calls the log no longer shows.
    assert texts[2].startswith("mode: hybrid") and re.search(r"^\| #(1|4) \|", texts[2], re.M), texts[2]
    assert texts[3].startswith("mode: hybrid") and not re.search(r"^\| #", texts[3], re.M), texts[3]  # project "\ufffd"
    assert texts[4].startswith("mode: hybrid") and "| #4 |" in texts[4], texts[4]
    assert texts[5].startswith("mode:"), texts[5]
    assert got[6]["result"]["isError"] and "anchor must be a record id" in texts[6], texts[6]
    assert got[7]["result"]["isError"] and "not true or false" in texts[7], texts[7]
    assert got[8]["result"]["tools"]
    assert "INFO" in stderr and "get_observations" in stderr  # the SDK's INFO lines reach this stderr
    assert "HTTP Request:" not in stderr, stderr[-2000:]


def test_cli_search_takes_bytes_that_are_not_utf8_and_lone_surrogates(served: Settings, tmp_path: Path) -> None:
    """`memsync search $'\\xed\\xa0\\x80'` was a 49-line traceback from the tokenizer, and a
    --batch line with "\\ud800" the error `TextEncodeInput must be Union[...]`."""
    env = server_env(served)
    one = subprocess.run([os.fsencode(MEMSYNC), b"search", b"ledger \xed\xa0\x80 rows", b"--json", b"--limit", b"3"],
                         env=env, cwd=ROOT, capture_output=True, timeout=120)
    assert one.returncode == 0, one.stderr.decode(errors="replace")
    data = json.loads(one.stdout)
    assert data["mode"] == "hybrid" and data["query"] == "ledger \ufffd\ufffd\ufffd rows" and data["results"]
    # A raw byte that is not UTF-8 in a batch line (0xff) ended the whole batch with a decode error.
    lines = (b'{"query": "upload retries \\ud800"}\n{"query": "x", "project": "\\udc00"}\n'
             b'{"query": "upload\xff retries"}\n')
    batch = subprocess.run([MEMSYNC, "search", "--batch", "-", "--limit", "2"], input=lines, env=env,
                           cwd=ROOT, capture_output=True, timeout=120)
    assert batch.returncode == 0, batch.stderr.decode(errors="replace")
    first, second, third = (json.loads(line) for line in batch.stdout.splitlines())
    assert "error" not in first and first["mode"] == "hybrid" and first["results"], first
    assert "error" not in second and second["results"] == [], second
    assert "error" not in third and third["query"] == "upload\ufffd retries" and third["results"], third
    batch_file = tmp_path / "batch-not-utf8.jsonl"
    batch_file.write_bytes(b'{"query": "ledger\xff rows"}\n{"query": "\xfe\xff"}\n')
    from_file = subprocess.run([MEMSYNC, "search", "--batch", str(batch_file), "--limit", "2"], env=env, cwd=ROOT,
                               capture_output=True, timeout=120)
    assert from_file.returncode == 0, from_file.stderr.decode(errors="replace")
    fourth, fifth = (json.loads(line) for line in from_file.stdout.splitlines())
    assert "error" not in fourth and fourth["query"] == "ledger\ufffd rows" and fourth["results"], fourth
    assert "error" not in fifth and fifth["query"] == "\ufffd\ufffd", fifth
    assert b"Traceback" not in one.stderr + batch.stderr + from_file.stderr


def test_http_api_search_takes_bytes_that_are_not_utf8(http_server: HttpServer) -> None:
    r = httpx.get(f"{http_server.url}/api/search?q=ledger%20%ED%A0%80%20rows&project=%ED%B0%80&limit=3", timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["query"] == "ledger \ufffd\ufffd\ufffd rows" and r.json()["results"] == []
    r = httpx.get(f"{http_server.url}/api/search?q=ledger%20%ED%A0%80%20rows&limit=3", timeout=60)
    assert r.status_code == 200 and r.json()["mode"] == "hybrid" and r.json()["results"], r.text


def sse_json(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a streamable-HTTP answer (an SSE event, or plain JSON)."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return dict(response.json())
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data[-1]))


def test_mcp_over_http_needs_the_token_and_listens_on_serve_host(served: Settings) -> None:
    """`memsync mcp --http-port` answered `initialize` without the token, and listened on
    127.0.0.1 whatever serve_host said."""
    host = "127.0.0.2"  # a loopback address other than the default: serve_host is what it listens on
    with mcp_over_http(served, host=host, MEMSYNC_API_TOKEN=TOKEN, MEMSYNC_SERVE_HOST=host) as port:
        url = f"http://{host}:{port}/mcp"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            r = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=30)
            assert r.status_code == 401, (headers, r.status_code, r.text)
            assert r.json() == {"detail": "missing or wrong token: send Authorization: Bearer <token>"}
            assert r.headers["www-authenticate"] == "Bearer"
        head = httpx.head(url, timeout=30)
        assert head.status_code == 401 and head.content == b""
        assert httpx.get(url, timeout=30).status_code == 401
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE, headers=ACCEPT, timeout=5)

        # With the token: the SDK's client works, and a body with a lone surrogate is searched.
        auth = {"Authorization": f"Bearer {TOKEN}"}

        async def run() -> str:
            async with (httpx2.AsyncClient(headers=auth, timeout=httpx2.Timeout(30, read=120)) as http,
                        Client(streamable_http_client(url, http_client=http)) as client):
                found = await client.call_tool("search_user_prompts", {"query": "uploads fail"})
                return "\n".join(getattr(c, "text", "") for c in found.content)

        assert asyncio.run(run()).startswith("mode: hybrid")
        opened = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, **auth}, timeout=30)
        assert opened.status_code == 200, opened.text
        session = {**ACCEPT, **auth, "mcp-session-id": opened.headers["mcp-session-id"],
                   "mcp-protocol-version": sse_json(opened)["result"]["protocolVersion"]}
        httpx.post(url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers=session, timeout=30)
        r = httpx.post(url, content=call(2, "search", rb'{"query":"upload retries \ud800","limit":3}'),
                       headers=session, timeout=120)
        assert r.status_code == 200, r.text
        reply = sse_json(r)
        assert not reply["result"].get("isError") and text_of(reply).startswith("mode: hybrid"), reply
        # Raw bytes that are not UTF-8 were a -32700 parse error with id null (stdio reads them as
        # U+FFFD); the auth scheme in any case, as HTTP has it (the token itself exact).
        r = httpx.post(url, content=call(3, "search", b'{"query":"ledger\xff rows \xed\xa0\x80","limit":3}'),
                       headers={**session, "Authorization": f"bEARER {TOKEN}"}, timeout=120)
        assert r.status_code == 200, r.text
        reply = sse_json(r)
        assert reply["id"] == 3 and not reply["result"].get("isError"), reply
        assert text_of(reply).startswith("mode: hybrid") and "| #4 |" in text_of(reply), reply
        r = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"bearer {TOKEN.upper()}"}, timeout=30)
        assert r.status_code == 401, r.text


def test_mcp_over_http_refuses_to_listen_beyond_loopback_without_a_token(served: Settings) -> None:
    env = server_env(served, MEMSYNC_SERVE_HOST="0.0.0.0", MEMSYNC_API_TOKEN=" ")
    done = subprocess.run([MEMSYNC, "mcp", "--http-port", str(free_port())], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "refusing to listen on 0.0.0.0 without a token" in done.stderr and "Traceback" not in done.stderr


def test_claude_mem_profile_refuses_what_is_not_an_id_or_a_count_before_any_lookup(served: Settings) -> None:
    """claude-mem's tools took true as observation #1, reported 2**63-1 as 2**63 (a float), read
    "١٢" as 12, answered "no such type" before checking limit and offset, took a broken date as
    an anchor query, and refused a wrong type with pydantic's report."""
    from memsync.search import Searcher
    from memsync.servers.claude_mem_tools import build_profile_server

    calls: list[tuple[str, dict[str, Any], bool, str]] = [
        ("get_observations", {"ids": [True]}, True, "ids[0] must be a record id"),
        ("get_observations", {"ids": True}, True, "ids[0] must be a record id"),
        ("get_observations", {"ids": [2**63 - 1]}, False, "Not found: #9223372036854775807"),
        ("get_observations", {"ids": [2**63]}, True, "record id 9223372036854775808 is out of range"),
        ("get_observations", {"ids": ["١٢"]}, True, "not a record id: '١٢'"),
        ("get_observations", {"ids": ["１２"]}, True, "not a record id: '１２'"),
        ("get_observations", {"ids": [1], "limit": "١"}, True, "limit must be an integer"),
        ("search", {"limit": "-62135596800000", "offset": 1.5, "obs_type": "nonsense"}, True,
         "limit must be an integer from 1 to 100, got -62135596800000"),
        ("search", {"offset": 1.5, "obs_type": "nonsense"}, True, "offset must be an integer from 0 to 10000, got 1.5"),
        ("search", {"limit": True}, True, "limit must be an integer from 1 to 100, got True"),
        ("search", {"dateStart": "１７９５０００００００００"}, True, "dateStart must be"),
        ("search", {"dateStart": False}, True, "dateStart must be"),
        ("timeline", {"anchor": "9999-12-31T99:99"}, True, "anchor must be a record id (123, #123, S12, P5) or an ISO"),
        ("timeline", {"anchor": True}, True, "anchor must be a record id"),
        ("timeline", {"anchor": 4.0, "depth_before": 0, "depth_after": 0}, False, "#4"),
        ("search", {"query": 5}, True, "query must be a string, got 5"),
        ("search", {"query": "x", "orderBy": ["date_asc"]}, True, "orderBy must be a string"),
    ]

    searcher = Searcher(served)

    async def run() -> list[tuple[bool, str]]:
        async with Client(build_profile_server(served, searcher)) as client:
            out = []
            for tool, args, _, _ in calls:
                result = await client.call_tool(tool, args)
                out.append((bool(result.is_error), "\n".join(getattr(c, "text", "") for c in result.content)))
            return out

    try:
        answers = asyncio.run(run())
    finally:
        searcher.close()
    for (tool, args, error, expected), (is_error, text) in zip(calls, answers, strict=True):
        assert is_error == error and expected in text, (tool, args, text)
        assert not error or "\n" not in text, text  # one line
        assert "validation error" not in text and "pydantic" not in text, text
