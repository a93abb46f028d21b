"""``memsync db init`` / ``memsync db import``: a claude-mem database for people without claude-mem.

This writes only a database the user names for the purpose (never the agent's own, which memsync
opens read-only everywhere else). JSON lines format, one record per line:

    {"kind": "observation", "project": "p", "session": "s1", "type": "feature", "title": "...",
     "subtitle": "...", "narrative": "...", "text": null, "facts": ["..."], "concepts": ["..."],
     "files_read": ["a.py"], "files_modified": ["b.py"], "prompt_number": 1,
     "created_at": "2026-11-01T10:00:00.000Z", "merged_into_project": null}
    {"kind": "summary", "project": "p", "session": "s1", "request": "...", "investigated": "...",
     "learned": "...", "completed": "...", "next_steps": "...", "notes": "...",
     "files_read": [...], "files_edited": [...], "prompt_number": 1, "created_at": "..."}
    {"kind": "prompt", "project": "p", "session": "s1", "prompt_number": 1, "prompt_text": "...",
     "created_at": "..."}

``created_at_epoch`` (milliseconds) may be given instead of, or besides, ``created_at``. List
fields may be JSON lists (stored as JSON text) or strings (stored verbatim). A session is created
on first use: content session id = ``session``, memory session id = ``memory_session_id`` or
``mem-<session>``, platform ``platform_source`` or ``claude``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsync.config.claude_mem.ddl import create_database
from memsync.config.claude_mem.schema import (
    OBSERVATION_COLUMNS,
    PROMPT_COLUMNS,
    SUMMARY_COLUMNS,
    TABLES,
    Era,
    Kind,
    SourceSchema,
    detect,
)
from memsync.config.claude_mem.values import LIST_COLUMNS
from memsync.config.errors import InvalidRequest
from memsync.config.records import iso_from_ms, ms_from_iso


class RecordError(InvalidRequest):
    """A record cannot be imported; the message names the line and the problem."""


@dataclass(frozen=True, slots=True)
class ImportResult:
    """How many records of each kind were written, and sessions created."""

    observations: int
    summaries: int
    prompts: int
    sessions: int


def init_db(path: Path, era: Era = Era.CURRENT, fts: bool = True) -> None:
    """Create an empty claude-mem database (refuses an existing file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    create_database(str(path), era=era, fts=fts)


def _times(rec: Mapping[str, Any]) -> tuple[str, int]:
    if "created_at_epoch" in rec and rec["created_at_epoch"] is not None:
        ms = int(rec["created_at_epoch"])
        return str(rec.get("created_at") or iso_from_ms(ms)), ms
    if rec.get("created_at"):
        text = str(rec["created_at"])
        ms = ms_from_iso(text)
        return text, ms
    raise ValueError("needs created_at or created_at_epoch")


class _Writer:
    def __init__(self, conn: sqlite3.Connection, schema: SourceSchema) -> None:
        self.conn, self.schema = conn, schema
        self.sessions: dict[str, int] = {}
        self.created = 0

    def session(self, rec: Mapping[str, Any], created_at: str, ms: int) -> tuple[int, str, str]:
        name = str(rec.get("session") or "default")
        memory = str(rec.get("memory_session_id") or f"mem-{name}")
        project = str(rec.get("project") or "")
        if name not in self.sessions:
            col = self.schema.column
            content_col = col("sdk_sessions", "content_session_id")
            found = self.conn.execute(
                f'SELECT id FROM sdk_sessions WHERE "{content_col}" = ?', (name,)
            ).fetchone()
            if found:
                self.sessions[name] = int(found[0])
            else:
                values: dict[str, Any] = {
                    "content_session_id": name, "memory_session_id": memory, "project": project,
                    "platform_source": rec.get("platform_source") or "claude", "started_at": created_at,
                    "started_at_epoch": ms, "status": "completed",
                }
                self.sessions[name] = self._insert("sdk_sessions", values)
                self.created += 1
        return self.sessions[name], name, memory

    def _insert(self, table: str, values: Mapping[str, Any]) -> int:
        cols, params = [], []
        for logical, value in values.items():
            physical = self.schema.column(table, logical)
            if physical is not None:
                cols.append(f'"{physical}"')
                params.append(value)
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        cur = self.conn.execute(sql, params)
        return int(cur.lastrowid or 0)

    def record(self, kind: Kind, rec: Mapping[str, Any]) -> None:
        created_at, ms = _times(rec)
        session_id, content, memory = self.session(rec, created_at, ms)
        if kind is Kind.PROMPT:
            if not rec.get("prompt_text"):
                raise ValueError("a prompt needs prompt_text")
            allowed: tuple[str, ...] = PROMPT_COLUMNS
            values: dict[str, Any] = {"session_db_id": session_id, "content_session_id": content,
                                      "prompt_number": int(rec.get("prompt_number") or 1)}
        else:
            allowed = OBSERVATION_COLUMNS if kind is Kind.OBSERVATION else SUMMARY_COLUMNS
            values = {"memory_session_id": memory, "project": str(rec.get("project") or "")}
            if kind is Kind.OBSERVATION:
                values["type"] = str(rec.get("type") or "discovery")
        for key in allowed:
            if key in ("id", "created_at", "created_at_epoch") or key in values or key not in rec:
                continue
            value = rec[key]
            values[key] = json.dumps(value) if key in LIST_COLUMNS and isinstance(value, list) else value
        values["created_at"], values["created_at_epoch"] = created_at, ms
        self._insert(TABLES[kind], values)


def import_records(path: Path, records: Iterable[Mapping[str, Any]]) -> ImportResult:
    """Append records to a claude-mem database in one transaction (all or nothing)."""
    conn = sqlite3.connect(str(path), timeout=30)
    counts = {k: 0 for k in Kind}
    try:
        conn.execute("PRAGMA busy_timeout=30000")
        writer = _Writer(conn, detect(conn))
        with conn:
            for n, rec in enumerate(records, start=1):
                if rec.get("kind") not in set(Kind):  # the kinds' own names: observation, summary, prompt
                    raise RecordError(f"record {n}: kind must be one of {', '.join(Kind)}")
                kind = Kind(rec["kind"])
                try:
                    writer.record(kind, rec)
                except (ValueError, TypeError, sqlite3.IntegrityError) as exc:
                    raise RecordError(f"record {n}: {exc}") from exc
                counts[kind] += 1
    finally:
        conn.close()
    return ImportResult(counts[Kind.OBSERVATION], counts[Kind.SUMMARY], counts[Kind.PROMPT], writer.created)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse a JSON-lines file; blank lines are skipped; errors name the line."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise RecordError(f"{path}:{n}: invalid JSON: {exc}") from exc
            if not isinstance(rec, dict):
                raise RecordError(f"{path}:{n}: each line must be a JSON object")
            out.append(rec)
    return out
