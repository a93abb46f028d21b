"""Per-prompt injection as Claude Code meets it: the real `memsync worker` process answering the
real hook client process over its socket, `memsync status` saying so, and silence once it stops."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsync.commands.db import make_demo_db
from memsync.config.formats.inject_stats import served
from memsync.config.inject_channel import socket_path
from memsync.config.settings import Settings
from tests.cli.test_inject_client import run_hook
from tests.system.test_e2e import ROOT, env_for
from tests.system.test_worker import WorkerProcess, wait_for

pytestmark = pytest.mark.slow


def test_the_running_worker_answers_the_hook_and_status_says_so(managed: Settings, tmp_path: Path) -> None:
    make_demo_db(managed.db, sessions=6)
    project_dir = tmp_path / "payments-api"  # outside git: the folder's name is the project
    project_dir.mkdir()
    payload = {"session_id": "session-1", "transcript_path": str(tmp_path / "t.jsonl"), "cwd": str(project_dir),
               "hook_event_name": "UserPromptSubmit",
               "prompt": "why did the refund endpoint get duplicate events from the message broker?"}
    worker = WorkerProcess(managed)
    try:
        worker.wait_caught_up()
        wait_for(lambda: worker.events("inject_warm"), 120, "the warm searcher")
        assert socket_path(managed.data_dir).is_socket()
        done, wall = run_hook(managed.data_dir, json.dumps(payload).encode())
        assert done.returncode == 0 and done.stderr == b"" and done.stdout, (done, wall, worker.events("inject_failed"))
        context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
        assert "payments-api" in context and "refund endpoint" in context
        # The listener counts a prompt after its reply is sent: the hook can be gone before.
        wait_for(lambda: served(managed.data_dir, int(time.time() * 1000)).prompts == 1, 30, "the prompt counted")
        status = subprocess.run([sys.executable, "-m", "memsync", "status", "--json"], cwd=ROOT, capture_output=True,
                                text=True, env=env_for(managed), timeout=60)
        injection = json.loads(status.stdout)["injection"]
        assert injection["active"] and injection["prompts_last_day"] == 1 and injection["injected_last_day"] == 1
        assert injection["line"].startswith("not installed (memsync claude-code swap installs it); the worker listens "
                                            "for it") and "last day: 1 prompts, 1 injected" in injection["line"]
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert not socket_path(managed.data_dir).exists()  # removed at exit
    done, _ = run_hook(managed.data_dir, json.dumps(payload).encode())
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
