"""The claude-mem DDL, both eras: only for ``memsync db init``, the demo and test fixtures.

Written from the schema notes (``../shared/claude-mem-schema.md``); memsync never creates or
alters tables in a user's database.
"""

from __future__ import annotations

import sqlite3

from memsync.config.claude_mem.schema import FTS_TABLES, KINDS, TABLES, Era, Kind

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
CREATE INDEX idx_user_prompts_lookup ON user_prompts(session_db_id, prompt_number);
CREATE INDEX idx_observations_sdk_session ON observations(memory_session_id);
CREATE INDEX idx_sdk_sessions_project ON sdk_sessions(project);
CREATE INDEX idx_observations_merged_into ON observations(merged_into_project);
CREATE INDEX idx_summaries_merged_into ON session_summaries(merged_into_project);
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
CREATE INDEX idx_observations_sdk_session ON observations(sdk_session_id);
CREATE INDEX idx_user_prompts_lookup ON user_prompts(claude_session_id, prompt_number);
CREATE INDEX idx_sdk_sessions_project ON sdk_sessions(project);
CREATE INDEX idx_observations_project ON observations(project);
CREATE INDEX idx_summaries_project ON session_summaries(project);
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
