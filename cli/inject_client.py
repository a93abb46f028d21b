"""``memsync claude-code inject``: the Claude Code hook client, a new process per prompt.

It reads the hook's JSON payload on stdin, asks the running ``memsync worker`` of the data
directory over its unix socket (``memsync.config.inject_channel``), and prints Claude Code's hook
output when the worker has a memory for the prompt; otherwise nothing. A ``SessionStart`` payload
of a compaction (``compacted``) is passed on the same way: the worker then forgets what it injected
in that session, and nothing is printed. Standard library only, and
dispatched before the command's click group loads (``memsync.entry``): Python's start plus this
module is the whole cost of a prompt that gets nothing.

It never exits non-zero and never prints on stdout anything but the hook output: a hook that fails
would put an error in front of the user on every prompt. Nothing listening (no worker, no socket,
a stale one) is the ordinary case and is silent; garbage on stdin, an unknown event, an unsafe
socket directory or a worker's error is one line on stderr. Everything, from start to the last
byte read, is bounded by ``CLIENT_TIMEOUT_S``.

Where the worker is: the data directory of ``--data-dir``, else ``MEMSYNC_DATA_DIR``, else the
config file's ``data_dir`` (``--config``, ``MEMSYNC_CONFIG`` or ``~/.memsync/config.toml``), else
``~/.memsync``, as the settings model reads them; the demo database's own directory when ``--db``
(or its variable, or the file) names the demo database. ``inject`` off in the environment or the
file: exit 0 at once, without connecting.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import time
from pathlib import Path

from memsync.config.inject_channel import (
    CLIENT_TIMEOUT_S,
    EVENT,
    MAX_PAYLOAD_BYTES,
    MAX_REPLY_BYTES,
    PROJECT_DIR_ENV,
    PROJECT_DIR_FIELD,
    SUPPORTED,
    ChannelError,
    Reply,
    check_private_dir,
    compacted,
    hook_output,
    request_line,
    setting_off,
    short_dir,
    socket_path,
)

TYPE_CHECKING = False  # no `import typing`: its milliseconds are paid on every prompt
if TYPE_CHECKING:
    from typing import Any

PREFIX = "MEMSYNC_"
DEFAULT_DATA_DIR = Path("~/.memsync")
DEFAULT_CONFIG_FILE = Path("~/.memsync/config.toml")  # the settings model's (a test keeps them equal)
DEMO_DIR, DEMO_DB_NAME = "demo", "claude-mem.db"  # config.formats.database_owner's (a test keeps them equal)


def main(argv: list[str]) -> int:
    """Run the hook for ``argv`` (the arguments after ``claude-code inject``); always 0."""
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        _run(argv, deadline)
    except Exception as exc:  # noqa: BLE001 - a hook must never fail the prompt; say why on stderr
        _say(f"{type(exc).__name__}: {exc}")
    return 0


def _run(argv: list[str], deadline: float) -> None:
    if not SUPPORTED:
        return
    options = _options(argv)
    config = _config(options.get("config"))
    if setting_off(os.environ.get(PREFIX + "INJECT", config.get("inject"))):
        return
    raw = _read_stdin(deadline)
    if raw is None:
        _say(f"no hook payload on stdin within {CLIENT_TIMEOUT_S:.1f} s: nothing injected")
        return
    if len(raw) > MAX_PAYLOAD_BYTES:
        _say(f"hook payload over {MAX_PAYLOAD_BYTES // 1024} KiB: nothing injected")
        return
    payload = _payload(raw)
    if payload is None:
        return
    path = socket_path(_data_dir(options, config))
    if path.parent == short_dir():
        try:
            check_private_dir(path.parent, create=False)
        except ChannelError as exc:
            if path.parent.exists():
                _say(str(exc))
            return
    reply = _ask(path, request_line(payload), deadline)
    if reply is None:
        return
    if reply.error is not None:
        _say(f"the worker could not answer: {reply.error}")
    elif reply.context and not compacted(payload):  # a compaction's hook output would be another event's
        sys.stdout.write(hook_output(reply.context) + "\n")
        sys.stdout.flush()


def _payload(raw: bytes) -> dict[str, Any] | None:
    """The hook payload, or None after one stderr line saying why it is not one to answer."""
    try:
        payload = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        _say("hook payload is not UTF-8: nothing injected")
        return None
    except ValueError:
        _say("hook payload is not JSON: nothing injected")
        return None
    if not isinstance(payload, dict):
        _say("hook payload is not a JSON object: nothing injected")
        return None
    if compacted(payload):
        return payload  # the worker forgets what it injected in the session; nothing to print
    event = payload.get("hook_event_name")
    if event != EVENT:
        _say(f"hook event {str(event)[:40]!r} is not {EVENT}: nothing injected")
        return None
    if not isinstance(payload.get("prompt"), str):
        _say("hook payload has no prompt: nothing injected")
        return None
    # claude-mem's project rule reads the hook's own environment (CLAUDE_PROJECT_DIR before cwd) and,
    # with no cwd in the payload, the hook's own directory: only this process knows either.
    project_dir = os.environ.get(PROJECT_DIR_ENV)
    if project_dir is not None:
        payload[PROJECT_DIR_FIELD] = project_dir
    if not isinstance(payload.get("cwd"), str):
        payload["cwd"] = os.getcwd()
    return payload


def _ask(path: Path, request: bytes, deadline: float) -> Reply | None:
    """The worker's reply, or None: nothing listening, or no answer before ``deadline`` (silent)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return None  # no worker: the ordinary case
        except TimeoutError:
            return None
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return None  # a slow worker: the prompt goes on without memory
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise ChannelError("reply too long")
        line = b"".join(chunks)
        return Reply.parse(line) if line.strip() else None
    except (BrokenPipeError, ConnectionResetError):
        return None  # the worker stopped while answering
    finally:
        sock.close()


def _read_stdin(deadline: float) -> bytes | None:
    """All of stdin (at most one byte past the payload limit), or None when it does not end before
    ``deadline``."""
    fd = sys.stdin.fileno()
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_PAYLOAD_BYTES:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _options(argv: list[str]) -> dict[str, str]:
    """``--data-dir``, ``--db`` and ``--config`` (``--name value`` or ``--name=value``); others ignored."""
    known = {"--data-dir": "data_dir", "--db": "db", "--config": "config"}
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name in known:
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            found[known[name]] = value
        i += 1
    return found


def _config(explicit: str | None) -> dict[str, Any]:
    """The config file's table as the settings model finds it (none: empty); an unreadable file
    leaves the defaults (the worker itself would refuse it: then nothing listens anyway)."""
    named = explicit or os.environ.get(PREFIX + "CONFIG")
    path = Path(named).expanduser() if named else DEFAULT_CONFIG_FILE.expanduser()
    try:
        with path.open("rb") as fh:
            import tomllib

            data = tomllib.load(fh)
    except (OSError, ValueError):
        return {}
    table = data.get("memsync", data)
    return table if isinstance(table, dict) else {}


def _data_dir(options: dict[str, str], config: dict[str, Any]) -> Path:
    """The data directory whose worker answers, by the settings' precedence and the demo rule."""
    data_dir = Path(_value("data_dir", options, config) or DEFAULT_DATA_DIR).expanduser()
    db = _value("db", options, config)
    if db and Path(db).expanduser() == data_dir / DEMO_DIR / DEMO_DB_NAME:
        return data_dir / DEMO_DIR
    return data_dir


def _value(key: str, options: dict[str, str], config: dict[str, Any]) -> str | None:
    value = options.get(key) or os.environ.get(PREFIX + key.upper()) or config.get(key)
    return str(value) if value else None


def _say(message: str) -> None:
    """The one stderr line of a hook that injects nothing for a reason worth saying."""
    try:
        sys.stderr.write(f"memsync claude-code inject: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
