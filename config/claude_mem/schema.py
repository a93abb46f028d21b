"""The claude-mem source database contract: table and column names of both schema eras, era
detection by column introspection, and the SQL that ties a row to its session. The DDL that
creates such a file (``memsync db init``, tests) is in :mod:`memsync.config.claude_mem.ddl`.

Everything outside this module speaks *logical* column names (the current schema's); the era
mapping translates them to what a given file actually has (5.x: ``sdk_session_id`` for
``memory_session_id``, ``claude_session_id`` for ``content_session_id``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import StrEnum

from memsync.config.errors import ConfigError


class Kind(StrEnum):
    """The three kinds of memory row. Ids are unique only within one kind."""

    OBSERVATION = "observation"
    SUMMARY = "summary"
    PROMPT = "prompt"


KINDS: tuple[Kind, ...] = (Kind.OBSERVATION, Kind.SUMMARY, Kind.PROMPT)

TABLES: dict[Kind, str] = {
    Kind.OBSERVATION: "observations",
    Kind.SUMMARY: "session_summaries",
    Kind.PROMPT: "user_prompts",
}
SESSIONS_TABLE = "sdk_sessions"

FTS_TABLES: dict[Kind, tuple[str, tuple[str, ...]]] = {
    Kind.OBSERVATION: ("observations_fts", ("title", "subtitle", "narrative", "text", "facts", "concepts")),
    Kind.SUMMARY: (
        "session_summaries_fts",
        ("request", "investigated", "learned", "completed", "next_steps", "notes"),
    ),
    Kind.PROMPT: ("user_prompts_fts", ("prompt_text",)),
}

# Logical columns memsync reads, per table, in the current schema's names.
OBSERVATION_COLUMNS: tuple[str, ...] = (
    "id", "memory_session_id", "project", "text", "type", "title", "subtitle", "facts", "narrative",
    "concepts", "files_read", "files_modified", "prompt_number", "created_at", "created_at_epoch",
    "merged_into_project",
)
SUMMARY_FIELDS: tuple[str, ...] = ("request", "investigated", "learned", "completed", "next_steps", "notes")
SUMMARY_COLUMNS: tuple[str, ...] = (
    "id", "memory_session_id", "project", *SUMMARY_FIELDS, "files_read", "files_edited",
    "prompt_number", "created_at", "created_at_epoch", "merged_into_project",
)
PROMPT_COLUMNS: tuple[str, ...] = (
    "id", "session_db_id", "content_session_id", "prompt_number", "prompt_text", "created_at",
    "created_at_epoch",
)
SESSION_COLUMNS: tuple[str, ...] = (
    "id", "content_session_id", "memory_session_id", "project", "platform_source", "user_prompt",
    "started_at", "started_at_epoch", "status",
)
LOGICAL_COLUMNS: dict[str, tuple[str, ...]] = {
    "observations": OBSERVATION_COLUMNS,
    "session_summaries": SUMMARY_COLUMNS,
    "user_prompts": PROMPT_COLUMNS,
    "sdk_sessions": SESSION_COLUMNS,
}

# 5.x names for logical columns that were renamed.
LEGACY_NAMES: dict[str, str] = {
    "memory_session_id": "sdk_session_id",
    "content_session_id": "claude_session_id",
}


class Era(StrEnum):
    """Which generation of the claude-mem schema a file has."""

    CURRENT = "current"
    LEGACY = "legacy"


@dataclass(frozen=True, slots=True)
class SourceSchema:
    """What one source file has: its era and, per table, logical name -> physical column (or None)."""

    era: Era
    columns: dict[str, dict[str, str | None]]
    fts: dict[Kind, bool]

    def column(self, table: str, logical: str) -> str | None:
        """The physical column for a logical one, or None when this file lacks it."""
        return self.columns.get(table, {}).get(logical)

    def select_columns(self, table: str, alias: str) -> list[tuple[str, str]]:
        """(SQL expression, logical name) of every logical column of ``table`` (NULL where absent)."""
        out = []
        for logical in LOGICAL_COLUMNS[table]:
            physical = self.column(table, logical)
            out.append((f'{alias}."{physical}"' if physical else "NULL", logical))
        return out

    def select_list(self, table: str, alias: str) -> str:
        """A SELECT list yielding every logical column of ``table`` (NULL where absent), by name."""
        return ", ".join(f'{expr} AS "{name}"' for expr, name in self.select_columns(table, alias))

    def session_match(self, kind: Kind, row_alias: str, session_alias: str) -> str:
        """The SQL condition tying a row of ``kind`` (alias ``row_alias``) to its ``sdk_sessions`` row.

        The one owner of the prompt -> session -> project join: prompts match by ``session_db_id``
        (the session's primary key, an index lookup) where the file has it, else by
        ``content_session_id`` (5.x files, UNIQUE there); observations and summaries by
        ``memory_session_id``. ``"0"`` (never true) when this file lacks the columns."""
        pair = self.session_key(kind)
        return f'{session_alias}."{pair[1]}" = {row_alias}."{pair[0]}"' if pair else "0"

    def session_key(self, kind: Kind) -> tuple[str, str] | None:
        """(the row's column, the session's column) that :meth:`session_match` compares, physical
        names; None when this file lacks them."""
        table = TABLES[kind]
        if kind is Kind.PROMPT and (by_id := self.column(table, "session_db_id")):
            return by_id, "id"
        key = "content_session_id" if kind is Kind.PROMPT else "memory_session_id"
        own, theirs = self.column(table, key), self.column(SESSIONS_TABLE, key)
        return (own, theirs) if own and theirs else None


class SchemaError(ConfigError):
    """The file is not a claude-mem database (a required table or column is missing)."""


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Physical column names of a table, in order (empty when the table does not exist)."""
    return [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall()]


def detect(conn: sqlite3.Connection) -> SourceSchema:
    """Introspect a source database: era by column names, read mapping, FTS tables present."""
    physical = {t: set(table_columns(conn, t)) for t in LOGICAL_COLUMNS}
    missing = [t for t, cols in physical.items() if not cols]
    if missing:
        raise SchemaError(f"not a claude-mem database: missing table(s) {', '.join(sorted(missing))}")
    era = Era.CURRENT if "memory_session_id" in physical["observations"] else Era.LEGACY
    mapping: dict[str, dict[str, str | None]] = {}
    for table, logical_cols in LOGICAL_COLUMNS.items():
        mapping[table] = {}
        for logical in logical_cols:
            if logical in physical[table]:
                mapping[table][logical] = logical
            elif LEGACY_NAMES.get(logical) in physical[table]:
                mapping[table][logical] = LEGACY_NAMES[logical]
            else:
                mapping[table][logical] = None
    for table, required in (("observations", "id"), ("session_summaries", "id"), ("user_prompts", "prompt_text")):
        if mapping[table][required] is None:
            raise SchemaError(f"not a claude-mem database: {table} has no {required} column")
    names = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    fts = {kind: FTS_TABLES[kind][0] in names for kind in KINDS}
    return SourceSchema(era=era, columns=mapping, fts=fts)
