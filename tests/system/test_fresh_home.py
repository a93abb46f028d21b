"""A first hour, scripted: a fresh HOME, `make run` as the README says, then the README's front-door
commands in order, in a second "terminal", while the worker runs; then Ctrl-C. The output people
see is checked against the README's samples (tests/test_readme.py holds their shapes)."""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from scripts.real_claude_mem import CLAUDE_CODE, NO_TELEMETRY
from tests.test_readme import READY, RESULT, SEARCH_HEAD, sample

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
READY_WITHIN_S = 300  # the demo's first sync (about 250 rows) takes seconds; a loaded CI machine more


def fresh_env(home: Path) -> dict[str, str]:
    """A new user's environment: nothing of memsync's, claude-mem's or Claude Code's set, Claude
    Code's CLI on PATH (what `claude-code swap` drives)."""
    path = f"{CLAUDE_CODE.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8", **NO_TELEMETRY}


def lines_of(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))


def test_make_run_then_the_readmes_commands(tmp_path: Path) -> None:
    assert CLAUDE_CODE.exists(), f"{CLAUDE_CODE} is missing: `make test` installs Claude Code's CLI there"
    home = tmp_path / "home"
    home.mkdir()
    env = fresh_env(home)
    log = (tmp_path / "worker.log").open("w")
    run = subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=log, text=True, start_new_session=True)
    out: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lines_of, args=(run.stdout, out), daemon=True)
    reader.start()
    printed: list[str] = []
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while not any(READY.match(line) for line in printed):
            assert run.poll() is None, f"make run ended ({run.returncode}): {printed}"
            try:
                printed.append(out.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"no ready line within {READY_WITHIN_S} s: {printed}")
        ready = next(m for line in printed if (m := READY.match(line)))
        assert ready.group(1) == ".venv/bin/memsync"  # the line names the command as make ran it

        def memsync(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([".venv/bin/memsync", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL)

        # The command the ready line suggests, then the README's own sample search: both answer by
        # meaning and words from the running worker, in the README's format.
        for args in (["search", *shlex.split(ready.group(2))], shlex.split(sample("$ .venv/bin/memsync")[0][2:])[1:]):
            done = memsync(*args)
            lines = done.stdout.splitlines()
            assert done.returncode == 0 and lines, (args, done.stderr)
            assert SEARCH_HEAD.match(lines[0]) and lines[0].startswith("mode hybrid"), lines[0]
            assert len(lines) >= 2 and all(RESULT.match(line) for line in lines[1:]), lines
        status = memsync("status")
        assert status.returncode == 0 and "worker: up" in status.stdout, status.stdout + status.stderr
        # The README's next step: what swap would do in Claude Code, and that restore finds nothing
        # to undo in a HOME swap never touched.
        dry = memsync("claude-code", "swap", "--dry-run")
        assert dry.returncode == 0 and "memsync" in dry.stdout, dry.stdout + dry.stderr
        assert not (home / ".claude" / "settings.json").exists() or "memsyncSwap" not in (
            home / ".claude" / "settings.json").read_text()
        undo = memsync("claude-code", "restore")
        assert undo.returncode == 0, undo.stdout + undo.stderr
    finally:
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in the first terminal
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        reader.join(timeout=10)
        if run.stdout is not None:
            run.stdout.close()
        log.close()
    while not out.empty():
        printed.append(out.get())
    assert sum(1 for line in printed if READY.match(line)) == 1  # once per start, on stdout (not a TTY here)
    left = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left under the test's HOME: {left}"
