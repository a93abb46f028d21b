"""Every error memsync raises on purpose, in one tree named by what the caller should do.

    MemsyncError
    ├── ConfigError            fix the setup, then rerun: a bad setting, a store locked by another process
    │   ├── ModelMismatchError  the collection was built with another embedding model or dimension
    │   ├── EmbeddingError     the embedding provider refused us: bad key, unknown model, wrong dimension
    │   ├── StoreRefused       Chroma answered but refused us: token, tenant, database, certificate
    │   ├── SettingsError      a setting or the config file is unusable (config.settings)
    │   ├── SchemaError        the file is not a claude-mem database (config.claude_mem.schema)
    │   ├── ClaudeSettingsError  Claude Code's settings file cannot be edited safely (config.claude_code.settings_file)
    │   └── DatabaseMismatch   the data directory belongs to another database: give this one its own
    │                          (config.formats.database_owner)
    ├── InvalidRequest         a value the caller gave is refused: change the request
    │   ├── RecordRefError     not a record id, kind or ISO date (config.records)
    │   │   └── InvalidRecordId  written as a record id, but no record can have its number (config.records)
    │   ├── RecordError        an import record that cannot be imported: its line and why (worker.seed.importer)
    │   └── SearchError        a search the engine cannot answer: bad anchor, unknown id (search.models)
    │       └── BadRequest     a request value a front end refuses: past a limit, a bad date (search.request)
    ├── BadData                data memsync cannot use, handled where met (a failed row); retrying will not help
    │   ├── RowError           a source row with nothing usable (worker.rows.documents)
    │   ├── RejectedBatch      a batch Chroma refused for its data (worker.pipeline.sink)
    │   └── DocIdError         not a memsync/claude-mem document id (config.docids)
    ├── SourceUnavailable      the agent's database is missing, locked or unreadable: retry later
    │   └── QueryTimeout       a statement ran past its time limit: retry, or ask less (search.sql)
    ├── StoreUnavailable       Chroma is down, slow or refused the call: retry with backoff
    │   └── StoreDamaged       Chroma answers but cannot read a collection: rebuild it from the database
    ├── EmbeddingUnavailable   the embedding endpoint is down, slow or rate-limiting: retry with backoff
    ├── VectorUnavailable      a search cannot ask the vector store now: answer full-text only (search.vectorstore)
    ├── TextIndexDamaged       memsync's text index cannot be read: FTS5 answers, the worker rebuilds it
    │                          (config.formats.text_index)
    ├── ChannelError           the injection channel cannot be used: that prompt gets no memory, the rest goes on
    │                          (config.inject_channel)
    └── NoSpace                a write failed for lack of disk space: free space, then retry

An error is defined beside the code that raises it when only that code raises it (the module in
brackets); this tree is where they are all listed, and tests/test_error_tree.py checks the drawing
against the classes. A private class (``_ServerExited``) is control flow inside its module and is
not drawn. A native library's panic (a BaseException) becomes the error of the side that made the
call at one boundary, ``config.native``. Each boundary translates the tree once, with one table
read through :func:`closest`: the CLI's exit codes (``cli.commands.options``), the HTTP API's
status and body (``servers.http_api``), the MCP tools' error text (``servers.mcp_boundary``).
The refused-value and bad-data errors are ``ValueError`` too and the two timeouts of a read ``RuntimeError``,
as the code that catches them around third-party calls expects.
A message is one line of printable text: what another process printed goes into one only through
:func:`one_line`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

# Terminal escape sequences: CSI (colours, cursor moves), OSC (titles, links), and the two-byte ones.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def one_line(output: str | bytes, limit: int | None = None) -> str:
    """What a process printed (``output``: a server's log, a command's stderr) as one line of
    printable text for an error message, keeping its end (``limit`` characters at most, the last
    ones: where a failing process says why). Escape sequences (colours, cursor moves) go; a line
    redrawn in place with carriage returns (a progress bar) keeps its last state; a line without a
    letter or digit (a drawing, such as the logo ``chroma run`` prints in ``(`` and ``#``) says
    nothing and goes; the other lines are joined with `` | ``; any other control character
    becomes a space. Printable one-line text comes back unchanged."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    kept = []
    for raw in _ESCAPES.sub("", text).replace("\r\n", "\n").split("\n"):
        line = raw.rstrip("\r").rsplit("\r", 1)[-1]
        line = "".join(ch if ch.isprintable() else " " for ch in line).strip()
        if any(ch.isalnum() for ch in line):
            kept.append(line)
    joined = " | ".join(kept)
    return joined if limit is None or len(joined) <= limit else "..." + joined[-limit:]

T = TypeVar("T")


class MemsyncError(Exception):
    """Base of every error memsync raises on purpose."""


class ConfigError(MemsyncError):
    """A configuration problem: retrying will not help until the user changes something."""


class ModelMismatchError(ConfigError):
    """The collection was built with another embedding model or dimension."""


class EmbeddingError(ConfigError):
    """The embedding model or endpoint cannot be used as configured (missing model, a key or model
    the endpoint refuses, vectors of another dimension); the message names the setting to fix."""


class StoreRefused(ConfigError):
    """A Chroma server answered but will not serve us as configured: credentials refused (HTTP
    401/403), a tenant or database it does not have, a certificate we do not trust. The message
    names the server and the setting to fix, never a secret. Commands exit 2; the worker keeps
    asking at the backoff cap (``worker.loop.daemon``), since the fix is often made on the server."""


class InvalidRequest(MemsyncError, ValueError):
    """A value the caller gave is refused; the message names it and what is accepted. Retrying the
    same request will not help (CLI exit 2, HTTP 400, an MCP tool error that says what to change)."""


class BadData(MemsyncError, ValueError):
    """Data memsync met and cannot use: a source row it cannot turn into documents, a document id
    that is not memsync's, a batch the vector store refused. Handled where it is met (the row is
    recorded as failed with the reason, the id is skipped), never a crash, and retrying the same
    data will not help."""


class SourceUnavailable(MemsyncError):
    """The source database cannot be opened or read right now."""


class StoreUnavailable(MemsyncError):
    """The vector store cannot be reached or failed a call; transient."""


class EmbeddingUnavailable(MemsyncError):
    """The embedding endpoint did not answer (connection refused, timeout, 429, 5xx) after its
    retries; transient: the worker backs off and keeps the rows pending, a search answers lexically."""


class StoreDamaged(StoreUnavailable):
    """Chroma answers its heartbeat but fails to read a collection (an internal error on a read:
    a segment it can no longer load, e.g. after its disk filled up mid-write). Retrying does not
    help; the collection is a derived copy of the database, so the cure is to drop and re-derive
    it (the worker and ``resync`` do that for a local store; ``resync --rebuild`` anywhere)."""

    # What the user can do, when the raiser knows better than the default (a remote server).
    DEFAULT_CURE = ("`memsync resync` (or a running worker) recreates it from the database; "
                    "`memsync resync --rebuild` builds a new one beside it")

    def __init__(self, problem: str, collection: str, cure: str = DEFAULT_CURE) -> None:
        super().__init__(f"{problem}: {cure}")  # every place that shows it names the cure
        self.problem, self.collection, self.cure = problem, collection, cure


class NoSpace(MemsyncError):
    """A write to memsync's own files or to the local Chroma store failed because its file system
    is full. The message names the directory and the fix; commands exit 1, the worker backs off
    and recovers by itself once space is free again."""


def closest(exc: MemsyncError, table: Mapping[type[MemsyncError], T]) -> T:
    """The entry of ``table`` for ``exc``'s own class or, failing that, its nearest base in the
    tree: a boundary lists only the branches it treats apart, and ``MemsyncError`` for the rest."""
    for cls in type(exc).__mro__:
        if issubclass(cls, MemsyncError) and cls in table:
            return table[cls]
    return table[MemsyncError]
