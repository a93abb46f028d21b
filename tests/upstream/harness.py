"""The real claude-mem worker, run by the tests: its published, bundled ``worker-service.cjs`` on
the Bun runtime, both installed by ``make test`` into ``.upstream/`` at the versions that
``tests/upstream/versions.json`` pins (the one owner; the Makefile reads it too).

The worker runs in the foreground (``--daemon``) on a free loopback port, with a temporary HOME and
data directory, Chroma off and every telemetry switch off (without them it calls an analytics
host). Rows go in through its own ``POST /api/import``, so claude-mem's SessionStore and migrations
write the database, not memsync's test helpers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VERSIONS: dict[str, str] = json.loads((ROOT / "tests" / "upstream" / "versions.json").read_text())
CLAUDE_MEM_VERSION = VERSIONS["claude-mem"]
WORKER_SCRIPT = ROOT / ".upstream" / f"claude-mem-{CLAUDE_MEM_VERSION}" / "package" / "plugin" / "scripts" \
    / "worker-service.cjs"
BUN = ROOT / ".upstream" / f"bun-{VERSIONS['bun']}" / "node_modules" / ".bin" / "bun"
INSTALLED = WORKER_SCRIPT.parents[3] / ".installed"
NO_TELEMETRY = {"DO_NOT_TRACK": "1", "DISABLE_TELEMETRY": "1", "CLAUDE_MEM_TELEMETRY": "false",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
START_SECONDS = 60.0  # it answers in under a second here; a loaded CI machine gets room
STOP_SECONDS = 15.0  # SIGTERM: it checkpoints the WAL and exits in about two seconds


class HarnessMissing(RuntimeError):
    """The real claude-mem is not installed: run ``make test`` (or the target it names)."""


class ClaudeMemWorker:
    """One running claude-mem worker: ``url``, the ``db`` it writes, rows in through ``import_rows``."""

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.data_dir = home / ".claude-mem"
        self.db = self.data_dir / "claude-mem.db"
        self.url = f"http://127.0.0.1:{port}"
        self.log = home / "worker.log"
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ClaudeMemWorker:
        """Start the worker and return once ``/api/health`` names the pinned version."""
        if not INSTALLED.exists():
            raise HarnessMissing(f"the real claude-mem is not installed ({INSTALLED} missing): run `make test` "
                                 f"(or `make {INSTALLED.relative_to(ROOT)}`), which needs node and npm")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
               "CLAUDE_MEM_DATA_DIR": str(self.data_dir), "CLAUDE_MEM_WORKER_PORT": str(self.port),
               "CLAUDE_MEM_WORKER_HOST": "127.0.0.1", "CLAUDE_MEM_CHROMA_ENABLED": "false", **NO_TELEMETRY}
        with self.log.open("wb") as log:
            # Its own session (process group) so that stop() reaches anything it spawned.
            self.proc = subprocess.Popen([str(BUN), str(WORKER_SCRIPT), "--daemon"], env=env, cwd=self.home,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + START_SECONDS
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"claude-mem's worker exited ({self.proc.returncode}): {self.log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                health = self.request("GET", "/api/health")
                if health.get("version") == CLAUDE_MEM_VERSION:
                    return self
                raise RuntimeError(f"port {self.port} answers another version: {health.get('version')}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"claude-mem's worker not healthy in {START_SECONDS}s: {self.log_tail()}")
            time.sleep(0.05)  # poll interval of the deadline loop, not a wait for an event

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """One JSON request to the worker; its JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
        return answer

    def import_rows(self, sessions: Sequence[dict[str, Any]] = (), summaries: Sequence[dict[str, Any]] = (),
                    observations: Sequence[dict[str, Any]] = (),
                    prompts: Sequence[dict[str, Any]] = ()) -> dict[str, int]:
        """Rows written by claude-mem's own store (``POST /api/import``); its counts of imported and
        skipped rows (it skips duplicates: sessions by platform + content session id, observations by
        memory session + title + epoch, summaries by memory session, prompts by session + number)."""
        answer = self.request("POST", "/api/import", {"sessions": list(sessions), "summaries": list(summaries),
                                                      "observations": list(observations), "prompts": list(prompts)})
        if not answer.get("success"):
            raise RuntimeError(f"claude-mem refused the import: {answer}")
        stats: dict[str, int] = answer["stats"]
        return stats

    def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after ``STOP_SECONDS``; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=STOP_SECONDS)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # anything it spawned that outlived it
            os.killpg(proc.pid, signal.SIGKILL)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
