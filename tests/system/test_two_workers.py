"""Two data directories, two workers, side by side: with ``chroma_port`` unset each managed server
takes a free port and records it in ``DATA_DIR/chroma-server.json``, where readers (verify, search)
find it; each database's Claude Code hook, as swap installs it, reaches its own worker only. Real
`memsync worker` processes, real `chroma run` servers, the real hook client."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.chroma.server import INFO_FILE, ServerInfo, heartbeat, pid_alive
from memsync.config.claude_code.hook import HOOK_AT
from memsync.config.settings import Settings
from memsync.main import main
from memsync.search import Mode, Searcher, SearchRequest
from memsync.worker.checks.verify import verify
from tests.cli.test_claude_code import stand_in_claude
from tests.conftest import mixed_records, obs
from tests.system.test_e2e import env_for
from tests.system.test_worker import WorkerProcess, wait_for
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow

# One memory each database has and the other lacks: the same question, two answers (project alpha).
WHERE = {"a": "deploy/jelly.toml", "b": "secret/jellyfish"}
DISTINCT = {name: obs(1000, title="Where the jellyfish deploy config lives", facts=[],
                      narrative=f"The jellyfish service reads its deploy config from {where}.")
            for name, where in WHERE.items()}
QUESTION = "where does the jellyfish service read its deploy config from?"


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Settings, Settings]]:
    """Two agents' databases (10 and 20 rows of each kind, and one memory of their own) with a
    data directory each; managed mode, chroma_port not set."""
    pair = tuple(Settings(db=tmp_path / name / "claude-mem.db", data_dir=tmp_path / name / "data",
                          chroma_mode="managed") for name in ("a", "b"))
    for s, n, name in zip(pair, (10, 20), ("a", "b"), strict=True):
        written_db(s.db, [*mixed_records(n), DISTINCT[name]])
    yield pair[0], pair[1]
    for s in pair:  # never leave a server behind, even when the test failed
        info = ServerInfo.read(s.data_dir)
        if info and pid_alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)


def swap_hook(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The hook command line `memsync claude-code swap` writes for ``settings``' database and data
    directory, into a Claude Code settings file of that database's own (a stand-in ``claude``)."""
    claude_dir = settings.data_dir.parent / "claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude_dir))
    claude_cmd, _ = stand_in_claude(tmp_path)
    result = CliRunner().invoke(main, ["claude-code", "swap", "--claude", str(claude_cmd), "--db", str(settings.db),
                                       "--data-dir", str(settings.data_dir)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    entries = json.loads((claude_dir / "settings.json").read_text())["hooks"][HOOK_AT[1]]
    return str(entries[0]["hooks"][0]["command"])


def test_two_workers_on_two_data_dirs_run_at_once(two: tuple[Settings, Settings], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert all(s.chroma_port == 0 for s in two)
    assert all(env_for(s)["MEMSYNC_CHROMA_PORT"] == "0" for s in two)  # what the workers are given
    workers = [WorkerProcess(s) for s in two]
    try:
        for w in workers:
            w.wait_reconciles(1, timeout=240)
            w.wait_caught_up()
        infos = [i for i in (ServerInfo.read(s.data_dir) for s in two) if i is not None]
        assert len(infos) == 2
        assert infos[0].port != infos[1].port, "each server took its own free port"
        assert all(i.owner == w.proc.pid and heartbeat(i.host, i.port) for i, w in zip(infos, workers, strict=True))
        assert [Path(i.path) for i in infos] == [s.chroma_dir for s in two]
        assert all(w.status().get("mode") == "managed" and w.proc.poll() is None for w in workers)
        # Each worker synced its own database into its own store; readers find the port in the record.
        reports = [verify(s) for s in two]
        assert all(r.clean for r in reports) and [r.expected for r in reports] == [71, 141]
        assert [r.in_chroma for r in reports] == [71, 141]
        for s in two:
            engine = Searcher(s.model_copy(update={"search_timeout_ms": 20_000}))  # a loaded machine's Chroma
            try:
                resp = engine.search(SearchRequest(query="Narrative about caching", window_days=0))
                assert resp.mode is Mode.HYBRID, resp.reason
            finally:
                engine.close()
        # Each database's hook, as swap writes it and as Claude Code runs it (a shell, in the
        # session's folder, which names the project), gets its own database's memory only.
        project = tmp_path / "alpha"
        project.mkdir()
        payload = json.dumps({"session_id": "s-new", "cwd": str(project), "hook_event_name": "UserPromptSubmit",
                              "prompt": QUESTION})
        for s, w, (mine, theirs) in zip(two, workers, ((WHERE["a"], WHERE["b"]), (WHERE["b"], WHERE["a"])),
                                        strict=True):
            wait_for(functools.partial(w.events, "inject_warm"), 120, "the warm searcher")
            done = subprocess.run(["/bin/sh", "-c", swap_hook(s, tmp_path, monkeypatch)], input=payload,
                                  capture_output=True, text=True, timeout=30, cwd=project)
            assert done.returncode == 0 and done.stderr == "" and done.stdout, (done, w.events("inject_failed"))
            context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
            assert mine in context and theirs not in context, context
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0]
    assert all(not pid_alive(i.pid) for i in infos)  # each worker stopped the server it started
    assert all(not (s.data_dir / INFO_FILE).exists() for s in two)
