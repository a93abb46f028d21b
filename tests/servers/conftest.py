"""A real claude-mem database synced into a real managed `chroma run` server, shared by the server
tests; a helper that starts `memsync serve` as its own process, and one that asks the app in process."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memsync.config.settings import Settings
from memsync.search import Searcher
from memsync.servers.http_api import create_app
from memsync.worker.pipeline.resync import resync
from scripts.benchlib import settings_env
from tests.conftest import free_port
from tests.search.test_search import o, p, s
from tests.system.conftest import claude_mem  # noqa: F401 - the real claude-mem worker, for the profile's tests

ROOT = Path(__file__).resolve().parents[2]
MEMSYNC = str(Path(sys.executable).parent / "memsync")


def corpus() -> list[dict[str, Any]]:
    """Three projects, every kind, types/concepts/files to filter on, one old row outside 90 days."""
    return [
        o("The retry budget for flaky uploads was too small, raised to five", 2, type="bugfix",
          files_modified=["src/uploads/retry.py"], concepts=["gotcha"]),
        o("Dark mode colors fixed in the dashboard header", 1, project="beta", type="feature",
          files_modified=["web/theme.css"], concepts=["pattern"]),
        o("Decided to keep Postgres connection pooling in pgbouncer", 3, type="decision"),
        o("Upload retries duplicated rows in the ledger table", 2.5, type="bugfix"),
        o("Billing exports moved to a nightly job long ago", 200, type="change"),
        p("why do uploads fail after three retries", 2),
        p("make the dashboard header dark", 1, project="beta"),
        s("Uploads session: retry budget raised, ledger duplicates found", 2),
        s("Dashboard theming session", 1, project="beta"),
    ]


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings of a synced database with its managed Chroma server running (stopped at the end)."""
    from memsync.chroma.server import ManagedServer
    from tests.upstream.written import written_db

    tmp = tmp_path_factory.mktemp("served")
    settings = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", chroma_mode="managed",
                        chroma_port=free_port())
    written_db(settings.db, corpus())
    owner = ManagedServer(settings)
    owner.ensure()
    try:
        resync(settings)
        yield settings
    finally:
        owner.stop()


@contextlib.contextmanager
def mcp_over_http(settings: Settings, *args: str, host: str = "127.0.0.1", **env: str) -> Iterator[int]:
    """`memsync mcp ARGS --http-port PORT` as a subprocess on a free port (listening on ``host``,
    ``env`` added to its environment), once uvicorn accepts connections; the port. Stopped (and
    waited for) on exit."""
    port = free_port()
    log = settings.data_dir / f"mcp-http-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        proc = subprocess.Popen([MEMSYNC, "mcp", *args, "--http-port", str(port)], env=server_env(settings, **env),
                                cwd=ROOT, stdout=sink, stderr=sink, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:  # poll with a deadline until uvicorn accepts connections
                try:
                    httpx.get(f"http://{host}:{port}/mcp", timeout=1)
                    break
                except httpx.TransportError:
                    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                    time.sleep(0.1)
            yield port
        finally:
            proc.terminate()
            proc.wait(10)


def server_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a memsync subprocess for ``settings`` (no developer MEMSYNC_* leaks in)."""
    return settings_env(settings, **extra)


class HttpServer:
    """`memsync serve` as a subprocess on a free port (of ``host``, default the setting's); stopped
    (and waited for) on exit."""

    def __init__(self, settings: Settings, host: str | None = None, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = settings.data_dir / f"serve-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("w")
        where = ["--host", host] if host else []
        self.proc = subprocess.Popen([MEMSYNC, "serve", "--port", str(self.port), *where],
                                     env=server_env(settings, **env), stdout=subprocess.DEVNULL, stderr=self._log,
                                     cwd=ROOT)

    def __enter__(self) -> HttpServer:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"memsync serve exited {self.proc.returncode}: {self.log_path.read_text()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.1)  # polling with a deadline: the port opens when uvicorn is ready
        self.close()
        raise AssertionError("memsync serve did not answer /healthz within 60 s")

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="package")
def http_server(served: Settings) -> Iterator[HttpServer]:
    """One `memsync serve` on the synced database for the package's HTTP tests."""
    with HttpServer(served) as server:
        yield server


def ask(settings: Settings, path: str, **params: str) -> httpx.Response:
    """GET ``path`` from the app on ``settings``."""
    searcher = Searcher(settings)
    app = create_app(settings, searcher)

    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8787") as c:
            return await c.get(path, params=params)

    try:
        return asyncio.run(run())
    finally:
        searcher.close()  # the transport runs no lifespan, so the app's shutdown does not
