"""Shared fixtures: isolated environment, settings built explicitly, real SQLite files from the
schema DDL, a deterministic fake embedder for logic tests (the real model is used end to end)."""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memsync.config.claude_mem.schema import Era, Kind
from memsync.config.settings import Settings
from memsync.worker.seed.importer import import_records, init_db
from scripts.benchlib import free_port

DAY_MS = 86_400_000
BASE_MS = 1_780_000_000_000


# Where a crash of a test process (a signal in native code: no pytest report) happened: with
# MEMSYNC_TEST_TRACE set (`make test` sets it), each test's start is appended to that file with the
# seconds since the run began, and faulthandler writes its dump of every thread beside it
# (``<file>.crash``). Under xdist each worker has its own pair (``<file>.gw0``, ``<file>.gw0.crash``);
# the controller reports "worker 'gwN' crashed while running '<test>'" itself, and `make test`
# prints the dead worker's files, so a CI log's tail names the test and shows its stack.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_TRACE = os.environ.get("MEMSYNC_TEST_TRACE")
if _TRACE and _WORKER:
    _TRACE = f"{_TRACE}.{_WORKER}"
_TRACE_START = time.monotonic()
_crash_file: Any = None


# The longest files of `make test`, longest first (wall seconds in a run on 2 cores, from its
# trace, test-artifacts/pytest-trace.txt.gwN: two_writers 283, providers 152, soak 152, worker 149,
# full_disk 124, claude_code 124, wheel 72, e2e 68, compact 62, source_lost 57). Handed out before
# every other file: started late, any one of them alone made the run's tail (13 min, where the work
# of three workers came to 11). Only an order: a stale name changes nothing else.
LONGEST_FIRST = ("tests/system/test_two_writers.py", "tests/system/test_providers.py", "tests/system/test_soak.py",
                 "tests/system/test_worker.py", "tests/system/test_full_disk.py", "tests/cli/test_claude_code.py",
                 "tests/system/test_wheel.py", "tests/system/test_e2e.py", "tests/worker/test_compact.py",
                 "tests/system/test_source_lost.py")


# tryfirst: xdist's worker reads the groups in a pytest_collection_modifyitems of its own, which
# pluggy calls before a conftest's (its plugin was registered later): without it the markers come
# too late and every test is handed out alone.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each file's tests an xdist group of their own (``make test`` runs ``--dist loadgroup``),
    and hand out the longest files first (:data:`LONGEST_FIRST`), then the others that hold slow
    tests.

    A file's tests then run on one worker in their order, as they do without xdist: a module's
    fixture is set up once, and what runs before a test within its file is the same on every run
    (which worker takes a file may vary). Files run beside each other: each test works in its own
    temporary directories and on free ports, and the tests that look for leftover processes match
    only their own paths or ``HOME`` (``pgrep -f <path>``, ``/proc/*/environ``), so no file needs
    the machine to itself. Long files first, because xdist hands out whole files in this order: a
    long file taken last would run alone at the end."""
    root = Path(str(config.rootpath))
    rel = {path: Path(str(path)).relative_to(root).as_posix() for path in {item.path for item in items}}
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> tuple[int, int]:
        name = rel[item.path]
        first = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
        return first, item.path not in slow_files

    items.sort(key=rank)  # stable: files and tests keep their order
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(rel[item.path]))


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin pointed it at stderr
def pytest_configure(config: pytest.Config) -> None:
    """Send faulthandler's dump to the crash file."""
    global _crash_file
    config.addinivalue_line("markers", "xdist_group(name): run on the one worker of this group")
    if _TRACE:
        Path(_TRACE).write_text("")
        _crash_file = open(_TRACE + ".crash", "w")  # noqa: SIM115 - open for the whole run
        faulthandler.enable(file=_crash_file, all_threads=True)


@pytest.hookimpl(tryfirst=True)  # before pytest's faulthandler plugin restores what it found
def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop writing to the crash file, and close it."""
    if _crash_file is not None:
        faulthandler.disable()
        _crash_file.close()


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """Append the starting test to the trace file."""
    if _TRACE:
        cpu = os.times()  # this process's and its waited-for children's CPU seconds so far
        with open(_TRACE, "a") as fh:
            fh.write(f"{time.monotonic() - _TRACE_START:8.1f} {sum(cpu[:4]):8.1f} {nodeid}\n")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's MEMSYNC_* or CLAUDE_MEM_* variables, OpenAI key or ~/.memsync."""
    for key in list(os.environ):
        if key.startswith(("MEMSYNC_", "CLAUDE_MEM_")) or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Embedded Chroma in a temporary data dir; small batches so batching paths are exercised."""
    return Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                    read_batch_rows=7, batch_size=5)


class FakeEmbedder:
    """Deterministic unit vectors from a hash of the text: same text, same vector."""

    model_id = "all-MiniLM-L6-v2-int8"
    dimension = 384

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out

    @property
    def embedded(self) -> int:
        return sum(self.calls)


class FakeVectorCopy:
    """The vector copy's row lookup (``VectorCopy.row_vectors``) over given document vectors."""

    def __init__(self, vectors: dict[tuple[Kind, int], npt.NDArray[np.float32]]) -> None:
        self.vectors = vectors

    def row_vectors(self, rows: Sequence[tuple[Kind, int]]) -> dict[tuple[Kind, int], npt.NDArray[np.float32]]:
        return {k: self.vectors[k] for k in rows if k in self.vectors}


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


def obs(i: int, project: str = "alpha", **extra: Any) -> dict[str, Any]:
    """An observation import record."""
    rec = {
        "kind": "observation", "project": project, "session": f"{project}-s{i // 4}", "type": "bugfix",
        "title": f"Fix bug {i}", "subtitle": f"in module {i % 3}", "narrative": f"Narrative number {i} about caching.",
        "facts": [f"fact {i}.0", f"fact {i}.1"], "concepts": ["gotcha"], "files_read": [f"src/m{i}.py"],
        "files_modified": [], "prompt_number": 1, "created_at_epoch": BASE_MS + i * 1000,
    }
    rec.update(extra)
    return rec


def summary(i: int, project: str = "alpha", **extra: Any) -> dict[str, Any]:
    rec = {"kind": "summary", "project": project, "session": f"{project}-s{i // 4}", "request": f"Request {i}",
           "learned": f"Learned {i}", "completed": f"Completed {i}", "prompt_number": 2,
           "created_at_epoch": BASE_MS + i * 1000 + 500}
    rec.update(extra)
    return rec


def prompt(i: int, project: str = "alpha", **extra: Any) -> dict[str, Any]:
    rec = {"kind": "prompt", "project": project, "session": f"{project}-s{i // 4}", "prompt_number": i % 5 + 1,
           "prompt_text": f"Please look at problem {i}", "created_at_epoch": BASE_MS + i * 1000 + 100}
    rec.update(extra)
    return rec


def mixed_records(n: int, projects: Sequence[str] = ("alpha", "beta")) -> list[dict[str, Any]]:
    """n of each kind, spread over projects."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        p = projects[i % len(projects)]
        out += [prompt(i, p), obs(i, p), summary(i, p)]
    return out


def make_db(path: Path, records: list[dict[str, Any]], era: Era = Era.CURRENT, fts: bool = True) -> Path:
    """A real claude-mem database file with these records."""
    init_db(path, era, fts=fts)
    import_records(path, records)
    return path


def write(db: Path, sql: str, *params: Any) -> None:
    """The agent writing its own database (tests play the agent)."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(sql, params)
    conn.close()


@pytest.fixture
def source_db(settings: Settings) -> Path:
    """A current-schema database with 12 rows of each kind over two projects."""
    return make_db(settings.db, mixed_records(12))


@pytest.fixture
def chroma(settings: Settings) -> Iterator[Any]:
    """An embedded Chroma client on the settings' data dir, closed afterwards."""
    from memsync.chroma import collections as stores

    handle = stores.connect(settings)
    try:
        yield handle.client
    finally:
        handle.close()


def kill_managed_server(data_dir: Path, store: Path | None = None) -> None:
    """Never leave a managed Chroma server behind, even when a test failed before stopping it: the
    recorded one while its pid is still that server, and every `chroma run` on the store
    (``DATA_DIR/chroma`` unless given) that the process table shows (the record may be gone)."""
    from memsync.chroma.process import chroma_processes
    from memsync.chroma.server import ServerInfo

    info = ServerInfo.read(data_dir)
    pids = {p.pid for p in chroma_processes(store or data_dir / "chroma")}
    if info and info.running(Path(info.path)):
        pids.add(info.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def held_server(settings: Settings) -> Iterator[Settings]:
    """The managed `chroma run` of ``settings``, started and held by the test (so that it outlives
    each resync, as it outlives a worker for claude-mem), stopped and, whatever happened, killed at
    the end."""
    from memsync.chroma.server import ManagedServer

    server = ManagedServer(settings)
    server.ensure()
    try:
        yield settings
    finally:
        server.stop()
        kill_managed_server(settings.data_dir)


@contextlib.contextmanager
def fake_chroma_run(store: Path, port: int, host: str = "127.0.0.1") -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose command line is a `chroma run --path STORE --host HOST --port PORT`
    (python sleeping, with those arguments): what the process table shows of a managed server,
    without a server's cost. Killed at the end."""
    store.mkdir(parents=True, exist_ok=True)  # as `chroma run` makes it
    argv = [sys.executable, "-c", "import time; print(flush=True); time.sleep(300)",
            str(Path(sys.executable).parent / "chroma"), "run", "--path", str(store), "--host", host,
            "--port", str(port)]
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE) as proc:  # closes, waits
        try:
            # Popen returns while the kernel may still be setting up the new program (an empty
            # /proc/PID/cmdline for a moment); its first line says it runs.
            assert proc.stdout is not None and proc.stdout.readline() == b"\n"
            yield proc
        finally:
            proc.kill()


@pytest.fixture
def openai_server() -> Iterator[Any]:
    """The tests' own OpenAI-compatible server (tests/openai_server.py) in a subprocess on
    127.0.0.1, serving the bundled model as ``minilm-test``; killed at the end."""
    from tests.openai_server import ServerProcess

    server = ServerProcess().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def managed(tmp_path: Path) -> Iterator[Settings]:
    """Managed-mode settings on a free port; whatever server is left at the end is killed."""
    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="managed",
                 chroma_port=free_port())
    yield s
    kill_managed_server(s.data_dir)
