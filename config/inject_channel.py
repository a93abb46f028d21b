"""The per-prompt injection channel: where the running worker listens, what goes over it, how long
the hook waits. Standard library only: the hook client (``memsync.inject_client``) imports this
module in a new process per prompt, before anything heavy could load (a test holds it to that).

- **Where.** A unix socket, ``DATA_DIR/inject.sock``, mode 0600: only the user can connect. AF_UNIX
  paths are limited to 104 bytes on macOS (108 on Linux), so when that path is longer than
  :data:`MAX_SOCKET_PATH` bytes the socket is ``/tmp/memsync-<uid>/<16 hex digits>.sock`` instead:
  the digits are the start of the SHA-256 of the data directory's resolved path, the directory is
  created 0700, and a directory there that is not the user's own and private is refused (by the
  worker and by the client: another user could otherwise plant a socket and read the prompts).
  ``/tmp`` rather than ``$TMPDIR``: macOS's ``$TMPDIR`` is itself about 50 bytes long.
- **What.** One JSON line each way. The request is the hook's payload as Claude Code sent it, plus
  ``"v": 1``; the reply is ``{"context": str | null, "refs": [str], "tokens": int}`` or
  ``{"error": str}``.
- **How long.** The client gives up :data:`CLIENT_TIMEOUT_S` after it starts (connect, send and
  reply together), silently and with exit 0: a prompt is never held up by memory.
- **Windows:** not supported (no AF_UNIX path sockets in Python there); the worker does not listen
  and the client exits 0 at once.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from memsync.config.errors import MemsyncError

# Not `import typing` (nor dataclasses, which imports inspect): every millisecond of import is paid
# on every prompt.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

SOCKET_NAME = "inject.sock"
MAX_SOCKET_PATH = 100  # bytes; macOS's sun_path holds 104 with its terminating NUL, Linux's 108
SHORT_DIR_ROOT = Path("/tmp")
PROTOCOL_VERSION = 1
CLIENT_TIMEOUT_S = 1.0  # from the client's start to its last byte read
# The largest hook payload accepted (a prompt of about this many bytes): more is refused by the
# client as garbage. A request line is at most this plus the protocol's few bytes.
MAX_PAYLOAD_BYTES = 512 * 1024
MAX_REPLY_BYTES = 256 * 1024  # a reply holds at most inject_budget_tokens of text (1,500 at most)
EVENT = "UserPromptSubmit"
# Claude Code's SessionStart with source "compact": the session (same id) goes on from a summary of
# its conversation, so the memories injected before may be gone from it (checked with 2.1.332: a
# `/compact` runs it with the session's id; `/clear` starts a new id, startup and resume do not match).
COMPACT_EVENT = "SessionStart"
COMPACT_SOURCE = "compact"
SUPPORTED = sys.platform != "win32"


def compacted(payload: Mapping[str, Any]) -> bool:
    """Whether a hook payload says its session's conversation was just compacted (see
    ``COMPACT_EVENT``): the worker forgets what it injected in that session, nothing is injected."""
    return payload.get("hook_event_name") == COMPACT_EVENT and payload.get("source") == COMPACT_SOURCE


class ChannelError(MemsyncError):
    """The channel cannot be used (an unsafe short-path directory, a malformed line): the prompt
    gets no memory, the worker and the hook go on."""


def socket_path(data_dir: Path) -> Path:
    """The worker's injection socket for ``data_dir`` (see the module docstring for the short rule)."""
    own = data_dir.expanduser() / SOCKET_NAME
    if len(os.fsencode(str(own.absolute()))) <= MAX_SOCKET_PATH:
        return own
    import hashlib  # only for a long data directory

    digest = hashlib.sha256(os.fsencode(str(data_dir.expanduser().resolve()))).hexdigest()[:16]
    return short_dir() / f"{digest}.sock"


def short_dir() -> Path:
    """The directory of the short socket paths: one per user, 0700."""
    return SHORT_DIR_ROOT / f"memsync-{os.getuid()}"


def check_private_dir(path: Path, *, create: bool) -> None:
    """ChannelError unless ``path`` is a real directory of this user that nobody else can enter
    (created 0700 when ``create`` and missing). Checked before a short-path socket is bound or
    connected to: ``/tmp`` is shared."""
    if create:
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ChannelError(f"cannot create {path}: {exc.strerror or exc}") from exc
    try:
        st = path.lstat()
    except OSError as exc:
        raise ChannelError(f"{path}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ChannelError(f"{path} is not a private directory of this user (0700): refused")


# The hook process's CLAUDE_PROJECT_DIR, which claude-mem's project rule puts before cwd: Claude Code
# sets it in the hook's environment, not in its payload, so the client adds it under this name.
PROJECT_DIR_FIELD = "claude_project_dir"
PROJECT_DIR_ENV = "CLAUDE_PROJECT_DIR"  # owned here so that the client need not import the project rule


def _json_object(line: bytes, what: str) -> dict[str, Any]:
    """One line of the channel as a JSON object; ChannelError naming ``what`` when it is not one."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ChannelError(f"{what} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ChannelError(f"{what} is not a JSON object")
    return data


def request_line(payload: dict[str, Any]) -> bytes:
    """The request for one hook payload: the payload as received plus the protocol version."""
    return json.dumps({**payload, "v": PROTOCOL_VERSION}, ensure_ascii=False).encode() + b"\n"


def parse_request(line: bytes) -> dict[str, Any]:
    """The payload of a request line; ChannelError when it is not one (bad JSON, not an object,
    another protocol version)."""
    data = _json_object(line, "request")
    if data.pop("v", None) != PROTOCOL_VERSION:
        raise ChannelError(f"request is not protocol version {PROTOCOL_VERSION}")
    return data


class Reply:
    """What the worker answers: the context to inject (None: nothing), its refs and tokens, or an error."""

    __slots__ = ("context", "error", "refs", "tokens")

    def __init__(self, context: str | None = None, refs: list[str] | None = None, tokens: int = 0,
                 error: str | None = None) -> None:
        self.context = context
        self.refs: list[str] = refs or []
        self.tokens = tokens
        self.error = error

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reply) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self) -> str:
        return f"Reply(context={self.context!r}, refs={self.refs!r}, tokens={self.tokens}, error={self.error!r})"

    def line(self) -> bytes:
        """The reply as its JSON line."""
        body: dict[str, Any] = ({"error": self.error} if self.error is not None else
                                {"context": self.context, "refs": self.refs, "tokens": self.tokens})
        return json.dumps(body, ensure_ascii=False).encode() + b"\n"

    @classmethod
    def parse(cls, line: bytes) -> Reply:
        """A reply line read back; ChannelError when it is not one."""
        data = _json_object(line, "reply")
        if isinstance(data.get("error"), str):
            return cls(error=data["error"])
        context, refs, tokens = data.get("context"), data.get("refs", []), data.get("tokens", 0)
        if (context is not None and not isinstance(context, str)) or not isinstance(refs, list) \
                or not isinstance(tokens, int):
            raise ChannelError("reply has the wrong shape")
        return cls(context=context or None, refs=[str(r) for r in refs], tokens=tokens)


def hook_output(context: str) -> str:
    """Claude Code's UserPromptSubmit hook output carrying ``context``."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": EVENT, "additionalContext": context}})


_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def setting_off(value: object) -> bool:
    """Whether a raw ``inject`` value (environment text or TOML value) turns injection off, read as
    pydantic reads a bool (``0/false/no/off``, any case)."""
    if isinstance(value, bool):
        return not value
    return isinstance(value, str) and value.lower() in _FALSE
