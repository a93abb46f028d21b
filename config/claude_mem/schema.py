"""The claude-mem source database contract: table and column names of both schema eras, era
detection by column introspection, and the DDL used only by ``memsync db init`` and test fixtures.

Everything outside this module speaks *logical* column names (the current schema's); the era
mapping translates them to what a given file actually has (5.x: ``sdk_session_id`` for
``memory_session_id``, ``claude_session_id`` for ``content_session_id``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import StrEnum


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

    def select_list(self, table: str, alias: str) -> str:
        """A SELECT list yielding every logical column of ``table`` (NULL where absent), by name."""
        parts = []
        for logical in LOGICAL_COLUMNS[table]:
            physical = self.column(table, logical)
            parts.append(f'{alias}."{physical}" AS "{logical}"' if physical else f'NULL AS "{logical}"')
        return ", ".join(parts)


class SchemaError(Exception):
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


# ---------------------------------------------------------------------------------------------
# DDL: only for `memsync db init`, the demo and test fixtures. Written from the schema notes.

_CURRENT_DDL = """
CREATE TABLE sdk_sessions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  content_session_id TEXT NOT NULL,
  memory_session_id TEXT UNIQUE,
  project TEXT NOT NULL,
  platform_source TEXT NOT NULL DEFAULT 'claude',
  user_prompt TEXT,
  started_at TEXT NOT NULL,
  started_at_epoch INTEGER NOT NULL,
  completed_at TEXT,
  completed_at_epoch INTEGER,
  status TEXT NOT NULL DEFAULT 'active',
  worker_port INTEGER,
  prompt_counter INTEGER DEFAULT 0,
  custom_title TEXT
);
CREATE TABLE observations (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  memory_session_id TEXT NOT NULL REFERENCES sdk_sessions(memory_session_id) ON DELETE CASCADE,
  project TEXT NOT NULL,
  text TEXT,
  type TEXT NOT NULL,
  title TEXT, subtitle TEXT, facts TEXT, narrative TEXT, concepts TEXT,
  files_read TEXT, files_modified TEXT,
  prompt_number INTEGER,
  discovery_tokens INTEGER DEFAULT 0,
  created_at TEXT NOT NULL,
  created_at_epoch INTEGER NOT NULL,
  content_hash TEXT,
  generated_by_model TEXT,
  relevance_count INTEGER DEFAULT 0,
  merged_into_project TEXT,
  agent_type TEXT, agent_id TEXT, metadata TEXT,
  synced_at INTEGER, origin_device_id TEXT, origin_local_id TEXT,
  sync_rev TEXT NOT NULL DEFAULT '1'
);
CREATE TABLE session_summaries (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  memory_session_id TEXT NOT NULL,
  project TEXT NOT NULL,
  request TEXT, investigated TEXT, learned TEXT, completed TEXT, next_steps TEXT,
  files_read TEXT, files_edited TEXT, notes TEXT,
  prompt_number INTEGER,
  discovery_tokens INTEGER DEFAULT 0,
  created_at TEXT NOT NULL,
  created_at_epoch INTEGER NOT NULL,
  merged_into_project TEXT,
  synced_at INTEGER, origin_device_id TEXT, origin_local_id TEXT,
  sync_rev TEXT NOT NULL DEFAULT '1'
);
CREATE TABLE user_prompts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_db_id INTEGER REFERENCES sdk_sessions(id) ON DELETE CASCADE,
  content_session_id TEXT NOT NULL,
  prompt_number INTEGER NOT NULL,
  prompt_text TEXT NOT NULL,
  created_at TEXT NOT NULL,
  created_at_epoch INTEGER NOT NULL,
  synced_at INTEGER, origin_device_id TEXT, origin_local_id TEXT,
  sync_rev TEXT NOT NULL DEFAULT '1'
);
CREATE INDEX idx_observations_project ON observations(project);
CREATE INDEX idx_observations_created ON observations(created_at_epoch);
CREATE INDEX idx_summaries_project ON session_summaries(project);
CREATE INDEX idx_prompts_session ON user_prompts(session_db_id);
"""

_LEGACY_DDL = """
CREATE TABLE sdk_sessions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  claude_session_id TEXT UNIQUE NOT NULL,
  sdk_session_id TEXT UNIQUE,
  project TEXT NOT NULL,
  user_prompt TEXT,
  started_at TEXT NOT NULL,
  started_at_epoch INTEGER NOT NULL,
  completed_at TEXT,
  completed_at_epoch INTEGER,
  status TEXT NOT NULL DEFAULT 'active',
  worker_port INTEGER,
  prompt_counter INTEGER DEFAULT 0
);
CREATE TABLE observations (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sdk_session_id TEXT NOT NULL,
  project TEXT NOT NULL,
  text TEXT,
  type TEXT NOT NULL,
  title TEXT, subtitle TEXT, facts TEXT, narrative TEXT, concepts TEXT,
  files_read TEXT, files_modified TEXT,
  prompt_number INTEGER,
  created_at TEXT NOT NULL,
  created_at_epoch INTEGER NOT NULL
);
CREATE TABLE session_summaries (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  sdk_session_id TEXT NOT NULL,
  project TEXT NOT NULL,
  request TEXT, investigated TEXT, learned TEXT, completed TEXT, next_steps TEXT,
  files_read TEXT, files_edited TEXT, notes TEXT,
  prompt_number INTEGER,
  created_at TEXT NOT NULL,
  created_at_epoch INTEGER NOT NULL
);
CREATE TABLE user_prompts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  claude_session_id TEXT NOT NULL,
  prompt_number INTEGER NOT NULL,
  prompt_text TEXT NOT NULL,
  created_at TEXT NOT NULL,
  created_at_epoch INTEGER NOT NULL
);
"""


def _fts_ddl(kind: Kind) -> str:
    fts, cols = FTS_TABLES[kind]
    table = TABLES[kind]
    col_list = ", ".join(cols)
    new_vals = ", ".join(f"new.{c}" for c in cols)
    old_vals = ", ".join(f"old.{c}" for c in cols)
    return f"""
CREATE VIRTUAL TABLE {fts} USING fts5({col_list}, content='{table}', content_rowid='id');
CREATE TRIGGER {table}_ai AFTER INSERT ON {table} BEGIN
  INSERT INTO {fts}(rowid, {col_list}) VALUES (new.id, {new_vals});
END;
CREATE TRIGGER {table}_ad AFTER DELETE ON {table} BEGIN
  INSERT INTO {fts}({fts}, rowid, {col_list}) VALUES ('delete', old.id, {old_vals});
END;
CREATE TRIGGER {table}_au AFTER UPDATE ON {table} BEGIN
  INSERT INTO {fts}({fts}, rowid, {col_list}) VALUES ('delete', old.id, {old_vals});
  INSERT INTO {fts}(rowid, {col_list}) VALUES (new.id, {new_vals});
END;
"""


def create_database(path: str, era: Era = Era.CURRENT, fts: bool = True) -> None:
    """Create an empty claude-mem database (WAL mode) with the tables of ``era`` and, optionally,
    the FTS5 tables and their triggers. Refuses to touch an existing file."""
    import os

    if os.path.exists(path):
        raise FileExistsError(f"{path} already exists; memsync never modifies an existing database")
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_CURRENT_DDL if era is Era.CURRENT else _LEGACY_DDL)
        if fts and era is Era.CURRENT:
            for kind in KINDS:
                conn.executescript(_fts_ddl(kind))
        conn.commit()
    finally:
        conn.close()
