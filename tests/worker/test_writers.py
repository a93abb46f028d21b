"""``memsync status`` says who writes the upstream-readable store: memsync, claude-mem's own worker,
or both (``worker.pipeline.writers``), from claude-mem's settings as its worker resolves them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from memsync.main import main
from memsync.worker.pipeline.writers import claude_mem_settings, upstream_writers
from tests.conftest import make_db, obs

STORE = {"host": "127.0.0.1", "port": 8000, "tenant": "default_tenant", "database": "default_database",
         "collection": "cm__claude-mem"}
REMOTE_HERE = {"CLAUDE_MEM_CHROMA_MODE": "remote", "CLAUDE_MEM_CHROMA_HOST": "localhost",
               "CLAUDE_MEM_CHROMA_PORT": "8000", "CLAUDE_MEM_WORKER_PORT": "37777"}


def answers(calls: list[tuple[str, int]], up: bool = True) -> Any:
    def probe(host: str, port: int) -> bool:
        calls.append((host, port))
        return up
    return probe


class TestClaudeMemSettings:
    def test_defaults_are_claude_mems(self, tmp_path: Path) -> None:
        got = claude_mem_settings({"HOME": str(tmp_path)})
        assert got["CLAUDE_MEM_CHROMA_ENABLED"] == "true" and got["CLAUDE_MEM_CHROMA_MODE"] == "local"
        assert (got["CLAUDE_MEM_CHROMA_HOST"], got["CLAUDE_MEM_CHROMA_PORT"]) == ("127.0.0.1", "8000")
        assert 37700 <= int(got["CLAUDE_MEM_WORKER_PORT"]) < 37800

    def test_the_environment_wins_over_the_data_directorys_settings_file(self, tmp_path: Path) -> None:
        data = tmp_path / "cm-data"
        data.mkdir()
        (data / "settings.json").write_text(json.dumps({"env": {**REMOTE_HERE, "CLAUDE_MEM_CHROMA_PORT": "9000"}}))
        env = {"HOME": str(tmp_path), "CLAUDE_MEM_DATA_DIR": str(data), "CLAUDE_MEM_CHROMA_PORT": "8001"}
        got = claude_mem_settings(env)
        assert (got["CLAUDE_MEM_CHROMA_MODE"], got["CLAUDE_MEM_CHROMA_PORT"]) == ("remote", "8001")
        assert got["CLAUDE_MEM_WORKER_PORT"] == "37777"


class TestUpstreamWriters:
    def test_claude_mem_in_local_mode_writes_elsewhere_and_is_not_asked(self, tmp_path: Path) -> None:
        calls: list[tuple[str, int]] = []
        got = upstream_writers(True, STORE, {"HOME": str(tmp_path)}, answers(calls))
        assert got["writing"] == ["memsync"] and calls == []
        assert got["line"] == ("upstream store writers: memsync; claude-mem's Chroma sync: its own local store "
                               "(CLAUDE_MEM_CHROMA_MODE=local)")

    def test_both_when_claude_mems_running_worker_syncs_into_this_store(self, tmp_path: Path) -> None:
        calls: list[tuple[str, int]] = []
        got = upstream_writers(True, STORE, {"HOME": str(tmp_path), **REMOTE_HERE}, answers(calls))
        assert got["writing"] == ["memsync", "claude-mem"] and calls == [("127.0.0.1", 37777)]
        assert got["claude_mem"]["targets_this_store"] and got["claude_mem"]["running"]
        assert got["line"].startswith("upstream store writers: memsync and claude-mem")

    def test_claude_mem_alone_when_memsync_does_not_write(self, tmp_path: Path) -> None:
        got = upstream_writers(False, STORE, {"HOME": str(tmp_path), **REMOTE_HERE}, answers([]))
        assert got["writing"] == ["claude-mem"] and got["line"] == "upstream store writers: claude-mem"

    def test_configured_but_not_running(self, tmp_path: Path) -> None:
        got = upstream_writers(True, STORE, {"HOME": str(tmp_path), **REMOTE_HERE}, answers([], up=False))
        assert got["writing"] == ["memsync"]
        assert "its worker does not answer on 127.0.0.1:37777" in got["line"]

    def test_disabled_another_port_another_collection_are_not_this_store(self, tmp_path: Path) -> None:
        env = {"HOME": str(tmp_path), **REMOTE_HERE}
        off = upstream_writers(True, STORE, {**env, "CLAUDE_MEM_CHROMA_ENABLED": "false"}, answers([]))
        assert off["writing"] == ["memsync"] and "off (CLAUDE_MEM_CHROMA_ENABLED=false)" in off["line"]
        other = upstream_writers(True, STORE, {**env, "CLAUDE_MEM_CHROMA_PORT": "8001"}, answers([]))
        assert other["writing"] == ["memsync"] and "another server (localhost:8001)" in other["line"]
        renamed = upstream_writers(True, {**STORE, "collection": "memsync_upstream"}, env, answers([]))
        assert renamed["writing"] == ["memsync"] and not renamed["claude_mem"]["targets_this_store"]
        assert "cm__claude-mem on this server, not this store" in renamed["line"]


def test_status_prints_and_returns_the_writers(tmp_path: Path) -> None:
    db = make_db(tmp_path / "claude-mem.db", [obs(1)])
    env = {"MEMSYNC_DB": str(db), "MEMSYNC_DATA_DIR": str(tmp_path / "data"), "MEMSYNC_CHROMA_MODE": "http",
           "MEMSYNC_CHROMA_PORT": "8000", "MEMSYNC_UPSTREAM_STORE": "true", **REMOTE_HERE,
           "CLAUDE_MEM_WORKER_PORT": "1"}  # nothing answers on port 1
    out = CliRunner().invoke(main, ["status"], env=env)
    assert out.exit_code == 0, out.output
    assert ("upstream store writers: memsync; claude-mem's settings point its Chroma sync here, but its worker "
            "does not answer on 127.0.0.1:1") in out.output.splitlines()
    shown = CliRunner().invoke(main, ["status", "--json"], env=env)
    assert json.loads(shown.output)["upstream"]["writers"]["writing"] == ["memsync"]
