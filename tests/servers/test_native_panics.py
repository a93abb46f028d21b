"""A panic in a native library (tantivy's search, onnxruntime's run, the tokenizer's encode,
Chroma's query) never ends a search, nor the process that serves it: each front end, as its own
`memsync` process, answers every search while one entry point after another panics, says which
side could not answer, and answers the next request. The panics are injected below memsync's code
by a test-only ``sitecustomize`` (``tests/panics``) on the subprocess's PYTHONPATH; the real panic
of a garbled segment file is in ``tests/system/test_derived_repair.py``."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from memsync.config.settings import Settings
from tests.servers.conftest import MEMSYNC, ROOT, HttpServer, mcp_over_http, server_env
from tests.servers.test_mcp import call, refs

pytestmark = pytest.mark.slow

# Each entry point, and what the answer's mode line says when it panicked: the text index's side
# falls back to FTS5 inside a hybrid answer; the embedder's and Chroma's to a lexical answer.
SAYS = {"tantivy": "text index unreadable, rebuilding: tantivy panicked: injected panic",
        "chroma": "Chroma query panicked: injected panic",
        "onnxruntime": "onnxruntime panicked: injected panic",
        "tokenizer": "the tokenizer panicked: injected panic"}
QUERY = "upload retries"
EMBED_RETRY_S = 10  # a failed query embedding is not tried again for 3 s (search.vectorstore.RETRY_AFTER_S)


@pytest.fixture
def control(tmp_path: Path) -> Path:
    """The file naming the entry point that panics now (see tests/panics/sitecustomize.py)."""
    path = tmp_path / "panic-at"
    path.write_text("")
    return path


def panic_env(control: Path) -> dict[str, str]:
    """The extra environment of a memsync subprocess whose native entry points can be made to panic."""
    return {"MEMSYNC_TEST_PANIC_AT": str(control), "PYTHONPATH": f"{ROOT / 'tests' / 'panics'}:{ROOT}"}


def hits(control: Path) -> list[str]:
    """The entry points that panicked so far."""
    path = Path(str(control) + ".hits")
    return path.read_text().split() if path.exists() else []


async def in_turn(control: Path, search: Callable[[], Awaitable[str]]) -> list[tuple[str, str]]:
    """Make each entry point panic in turn and run ``search`` (it checks the answer and returns
    its mode line); (entry point, mode line) once the panic was reached, then ``search`` once
    more with nothing panicking: the next request. A failed query embedding is remembered for a
    few seconds, so the tokenizer's panic (after onnxruntime's) is polled for with a deadline."""
    answers = []
    for point in SAYS:
        control.write_text(point)
        deadline = time.monotonic() + EMBED_RETRY_S
        while True:
            before = len(hits(control))
            head = await search()
            if len(hits(control)) > before:
                answers.append((point, head))
                break
            assert time.monotonic() < deadline, f"{point}'s panic was never reached; last answer: {head}"
            await asyncio.sleep(0.2)  # polling with a deadline: the embedder is asked again after 3 s
    control.write_text("")
    answers.append(("", await search()))
    return answers


def check(answers: list[tuple[str, str]]) -> None:
    """Each panic named in its answer, and the next request answered (``search`` checked its
    results; it may still say a side is out: a failed side is asked again after a while)."""
    assert [point for point, _ in answers] == [*SAYS, ""]
    for point, head in answers[:-1]:
        assert SAYS[point] in head, (point, head)


def test_cli_search_answers_whichever_native_library_panics(served: Settings, control: Path) -> None:
    env = server_env(served, **panic_env(control))
    for point in SAYS:
        control.write_text(point)
        done = subprocess.run([MEMSYNC, "search", QUERY, "--window-days", "0"], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (point, done.stderr[-2000:])
        assert SAYS[point] in done.stdout.splitlines()[0] and "#4 " in done.stdout, (point, done.stdout)
        assert "Traceback" not in done.stderr
    assert hits(control) == list(SAYS)


def test_http_api_answers_whichever_native_library_panics(served: Settings, control: Path) -> None:
    with HttpServer(served, **panic_env(control)) as server:
        async def run() -> list[tuple[str, str]]:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                async def search() -> str:
                    r = await client.get("/api/search", params={"q": QUERY, "window_days": "0"})
                    assert r.status_code == 200, r.text
                    body = r.json()
                    assert body["results"], body
                    return f"{body['mode']} ({body['reason']})"

                return await in_turn(control, search)

        check(asyncio.run(run()))
        assert server.proc.poll() is None


async def mcp_in_turn(client: Client, control: Path) -> list[tuple[str, str]]:
    """:func:`in_turn` with the MCP search tool."""
    async def search() -> str:
        error, text = await call(client, "search", query=QUERY, window_days=0)
        assert not error and "#4" in refs(text), text
        return text.splitlines()[0]

    return await in_turn(control, search)


def test_mcp_stdio_answers_whichever_native_library_panics_and_lives_on(served: Settings, control: Path) -> None:
    params = StdioServerParameters(command=MEMSYNC, args=["mcp"], env=server_env(served, **panic_env(control)),
                                   cwd=ROOT)

    async def run() -> list[tuple[str, str]]:
        async with Client(params, read_timeout_seconds=120) as client:
            return await mcp_in_turn(client, control)

    check(asyncio.run(run()))


def test_mcp_http_answers_whichever_native_library_panics(served: Settings, control: Path) -> None:
    with mcp_over_http(served, **panic_env(control)) as port:
        async def run() -> list[tuple[str, str]]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return await mcp_in_turn(client, control)

        check(asyncio.run(run()))
