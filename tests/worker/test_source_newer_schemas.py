"""The reader reads what it knows and nothing else: the columns and tables 13.25.3 added (observations'
``metadata`` and sync columns, ``tool_uses``, ``sync_outbox``, ``sync_state``) and those upstream
main adds after it (v53-v64: ``sdk_sessions.cwd``, dedup and reinforcement columns, prompt identity,
new tables, no ``user_prompts_fts``) change no row it reads and no document it derives."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from memsync.config.claude_mem.schema import KINDS
from memsync.config.settings import Settings
from memsync.worker.pipeline.upstream import build_upstream_documents
from memsync.worker.rows.documents import build_documents
from memsync.worker.rows.source import SourceReader
from tests.conftest import make_db, mixed_records

# 13.25.3's DDL (worker-service.cjs) for the tables memsync never read before.
V13_25_3_TABLES = (
    """CREATE TABLE IF NOT EXISTS tool_uses (
      id INTEGER PRIMARY KEY AUTOINCREMENT, tool_use_id TEXT NOT NULL, content_session_id TEXT NOT NULL,
      memory_session_id TEXT, session_db_id INTEGER, project TEXT NOT NULL,
      platform_source TEXT NOT NULL DEFAULT 'claude', tool_name TEXT NOT NULL, tool_input TEXT,
      tool_response TEXT, cwd TEXT, prompt_number INTEGER, agent_type TEXT, agent_id TEXT,
      observation_id INTEGER, or_generation_id TEXT, or_session_id TEXT, content_hash TEXT,
      created_at TEXT NOT NULL, created_at_epoch INTEGER NOT NULL, UNIQUE(content_session_id, tool_use_id))""",
    """CREATE TABLE IF NOT EXISTS sync_outbox (
      id INTEGER PRIMARY KEY AUTOINCREMENT, op_uuid TEXT NOT NULL UNIQUE, rev TEXT NOT NULL DEFAULT '1',
      body TEXT NOT NULL, canonical_body TEXT, operation_sha256 TEXT, created_at_epoch INTEGER NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS sync_state (k TEXT PRIMARY KEY, v TEXT)",
    "CREATE TABLE schema_versions (id INTEGER PRIMARY KEY, version INTEGER UNIQUE NOT NULL, applied_at TEXT NOT NULL)",
)
# Upstream main's v53-v64 (SessionStore.ts), as far as they touch the tables memsync reads.
MAIN_V53_V64 = (
    "ALTER TABLE sdk_sessions ADD COLUMN cwd TEXT",  # v53
    "DROP TRIGGER IF EXISTS user_prompts_ai", "DROP TRIGGER IF EXISTS user_prompts_ad",  # v54
    "DROP TRIGGER IF EXISTS user_prompts_au", "DROP TABLE IF EXISTS user_prompts_fts",
    "CREATE INDEX IF NOT EXISTS idx_observations_project_nocase ON observations(project COLLATE NOCASE)",  # v55
    "ALTER TABLE observations ADD COLUMN occurrence_count INTEGER NOT NULL DEFAULT 1",  # v56
    "ALTER TABLE observations ADD COLUMN title_norm_key TEXT",
    "ALTER TABLE observations ADD COLUMN reinforcement_dates TEXT",  # v57
    "ALTER TABLE observations ADD COLUMN last_reinforced TEXT",
    "ALTER TABLE sdk_sessions ADD COLUMN project_key_source TEXT",  # v59
    "CREATE TABLE IF NOT EXISTS hook_spool_consumed (entry_key TEXT PRIMARY KEY, "  # v62
    "consumed_at_epoch_ms INTEGER NOT NULL)",
    "ALTER TABLE user_prompts ADD COLUMN native_prompt_id TEXT",  # after v64
    "ALTER TABLE user_prompts ADD COLUMN native_prompt_hash TEXT",
)


def read_all(db: Path, tmp: Path) -> dict[str, Any]:
    """Every row the reader reads, and the documents of both formats, by kind."""
    out: dict[str, Any] = {}
    with SourceReader.open(Settings(db=db, data_dir=tmp / "data")) as reader:
        for kind in KINDS:
            rows = [row for batch in reader.iter_rows(kind, 7) for row in batch]
            out[kind.value] = [(r.id, r.project, r.values) for r in rows]
            out[kind.value + "_docs"] = [(d.doc_id, d.text, d.metadata) for r in rows for d in build_documents(r)]
            out[kind.value + "_upstream"] = [(d.doc_id, d.text, d.metadata) for r in rows
                                             for d in build_upstream_documents(r)]
        out["schema_version"] = reader.schema_version()
    return out


def test_the_newer_columns_and_tables_change_nothing_memsync_reads(tmp_path: Path) -> None:
    plain = make_db(tmp_path / "plain.db", mixed_records(9))
    newer = make_db(tmp_path / "newer.db", mixed_records(9))
    conn = sqlite3.connect(newer)
    with conn:
        for sql in (*V13_25_3_TABLES, *MAIN_V53_V64):
            conn.execute(sql)
        conn.executemany("INSERT INTO schema_versions (version, applied_at) VALUES (?, '2026-11-25')",
                         [(v,) for v in range(4, 65)])
        conn.execute("UPDATE observations SET metadata = '{\"k\": 1}', synced_at = 1, origin_device_id = 'dev', "
                     "origin_local_id = id, sync_rev = '3', occurrence_count = 2, title_norm_key = 'fix bug', "
                     "reinforcement_dates = '[\"2026-11-25\"]', last_reinforced = '2026-11-25'")
        conn.execute("UPDATE sdk_sessions SET cwd = '/work/repo', project_key_source = 'path'")
        conn.execute("UPDATE user_prompts SET native_prompt_id = 'n' || id, native_prompt_hash = 'h', synced_at = 2")
        conn.execute("INSERT INTO tool_uses (tool_use_id, content_session_id, project, tool_name, created_at, "
                     "created_at_epoch) VALUES ('t1', 'alpha-s0', 'alpha', 'Read', 'x', 1)")
        conn.execute("INSERT INTO sync_outbox (op_uuid, body, created_at_epoch) VALUES ('u', '{}', 1)")
    conn.close()
    expected, got = read_all(plain, tmp_path / "a"), read_all(newer, tmp_path / "b")
    assert expected.pop("schema_version") is None and got.pop("schema_version") == 64
    assert got == expected
    assert len(got["prompt"]) == 9 and got["observation_docs"]
