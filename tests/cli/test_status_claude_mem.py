"""status names the claude-mem version (the installed plugin's package.json, else the running
worker's /api/health, else unknown) and warns on a database schema newer than memsync is tested with."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memsync.config.claude_mem.version import (
    TESTED_SCHEMA_VERSION,
    UNKNOWN,
    claude_mem_version,
    installed_version,
    worker_port,
    worker_version,
)
from memsync.main import main
from tests.conftest import free_port, make_db, obs, write


def plugin(root: Path, version: str | None, *, nested: bool = True, orphaned: bool = False) -> Path:
    """A claude-mem plugin directory as Claude Code installs it: its package.json and worker script."""
    scripts = root / "plugin" / "scripts" if nested else root / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "worker-service.cjs").write_text("// worker")
    if version is not None:
        (root / "package.json").write_text(json.dumps({"name": "claude-mem", "version": version}))
    if orphaned:
        (root / ".orphaned_at").write_text("1")
    return root


def status_json(db: Path, tmp: Path, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    base = {"MEMSYNC_DB": str(db), "MEMSYNC_DATA_DIR": str(tmp / "data"), "MEMSYNC_CHROMA_MODE": "embedded"}
    out = CliRunner().invoke(main, ["status", "--json"], env={**base, **(env or {})}, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout), out.stderr


class TestInstalledPlugin:
    def test_the_highest_live_install_names_the_version(self, tmp_path: Path) -> None:
        plugins = Path(os.environ["HOME"]) / ".claude" / "plugins"
        plugin(plugins / "marketplaces" / "thedotmack", "13.25.3")
        cache = plugins / "cache" / "thedotmack" / "claude-mem"
        plugin(cache / "13.24.0", "13.24.0", nested=False)
        plugin(cache / "13.30.0", "13.30.0", nested=False, orphaned=True)  # superseded: never the live one
        plugin(cache / "13.29.0-beta.1", None, nested=False)  # a cache install is named by its directory
        (cache / "13.99.0").mkdir()  # no worker script: not installed
        db = make_db(tmp_path / "claude-mem.db", [obs(1)])
        got, _ = status_json(db, tmp_path)
        assert got["claude_mem"] == {"version": "13.29.0-beta.1", "source": str(cache / "13.29.0-beta.1"),
                                     "tested_schema_version": TESTED_SCHEMA_VERSION}
        (cache / "13.29.0-beta.1" / ".orphaned_at").write_text("1")
        assert installed_version() == claude_mem_version(0.1)
        assert claude_mem_version(0.1).version == "13.25.3"
        assert claude_mem_version(0.1).source == str(plugins / "marketplaces" / "thedotmack" / "package.json")

    def test_claude_config_dir_moves_claude_code_s_directory(self, tmp_path: Path) -> None:
        plugin(tmp_path / "cc" / "plugins" / "marketplaces" / "thedotmack", "13.25.3")
        assert installed_version({"HOME": str(tmp_path / "nohome")}) is None
        found = installed_version({"HOME": str(tmp_path / "nohome"), "CLAUDE_CONFIG_DIR": str(tmp_path / "cc")})
        assert found is not None and found.version == "13.25.3"


def test_nothing_installed_nor_running_is_unknown(tmp_path: Path) -> None:
    db = make_db(tmp_path / "claude-mem.db", [obs(1)])
    port = free_port()  # nothing listens there
    got, _ = status_json(db, tmp_path, {"CLAUDE_MEM_WORKER_PORT": str(port)})
    assert got["claude_mem"]["version"] == UNKNOWN
    assert got["claude_mem"]["source"] == f"no plugin installed, no worker on 127.0.0.1:{port}"
    text = CliRunner().invoke(main, ["status"], env={"MEMSYNC_DB": str(db), "MEMSYNC_DATA_DIR": str(tmp_path / "d"),
                                                     "MEMSYNC_CHROMA_MODE": "embedded",
                                                     "CLAUDE_MEM_WORKER_PORT": str(port)})
    assert text.stdout.splitlines()[1] == \
        f"claude-mem: unknown (from no plugin installed, no worker on 127.0.0.1:{port})"


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback port whose listener answers each request with the request's own first line, as a
    probe that connected to itself (same source and destination port) reads it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: the test is over
            with conn:
                conn.sendall(conn.recv(65536).split(b"\r\n")[0] + b"\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(), which close() alone does not on Linux
    listener.close()
    thread.join(timeout=5)


def test_a_port_that_answers_other_than_http_is_no_worker(tmp_path: Path, echo_port: int) -> None:
    assert worker_version(echo_port, 2.0) is None
    db = make_db(tmp_path / "claude-mem.db", [obs(1)])
    got, _ = status_json(db, tmp_path, {"CLAUDE_MEM_WORKER_PORT": str(echo_port)})
    assert got["claude_mem"]["source"] == f"no plugin installed, no worker on 127.0.0.1:{echo_port}"


def test_the_worker_port_follows_claude_mem_s_own_rule(tmp_path: Path) -> None:
    data = tmp_path / "cm"
    data.mkdir()
    (data / "settings.json").write_text(json.dumps({"CLAUDE_MEM_WORKER_PORT": "41234"}))
    assert worker_port({"HOME": str(tmp_path), "CLAUDE_MEM_DATA_DIR": str(data)}) == 41234
    assert worker_port({"HOME": str(tmp_path), "CLAUDE_MEM_DATA_DIR": str(data), "CLAUDE_MEM_WORKER_PORT": "40001"}) \
        == 40001
    assert worker_port({"HOME": str(tmp_path)}) == 37700 + os.getuid() % 100  # upstream's default


@pytest.mark.parametrize(("version", "warned"), [(TESTED_SCHEMA_VERSION, False), (64, True)])
def test_a_schema_newer_than_tested_is_warned_of(tmp_path: Path, version: int, warned: bool) -> None:
    db = make_db(tmp_path / "claude-mem.db", [obs(1)])
    write(db, "CREATE TABLE schema_versions (id INTEGER PRIMARY KEY, version INTEGER UNIQUE NOT NULL, "
              "applied_at TEXT NOT NULL)")
    write(db, "INSERT INTO schema_versions (version, applied_at) VALUES (?, '2026-11-25')", version)
    got, err = status_json(db, tmp_path, {"CLAUDE_MEM_WORKER_PORT": str(free_port())})
    assert got["schema_version"] == version
    if warned:
        assert got["schema_warning"] == (
            f"the database's claude-mem schema version 64 is newer than the newest memsync is tested with "
            f"({TESTED_SCHEMA_VERSION}, claude-mem 13.25.3); check memsync's release notes")
        warnings = [line for line in err.splitlines() if line.startswith("warning:")]
        assert warnings == [f"warning: {got['schema_warning']}"]
    else:
        assert got["schema_warning"] is None and "warning" not in err
