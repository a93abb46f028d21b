"""A claude-mem database holding every row shape the upstream-readable store must carry (title-only,
empty facts, NULL lists, merged projects, odd platforms, prompts without a session, ...), for
``tests/worker/test_upstream_store.py`` and ``tests/system/test_upstream_client.py``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import make_db

LONG = "A long narrative about the cache. " * 300  # 10,200 characters: stored whole, embedded cut

SESSIONS = [  # (id, content_session_id, memory_session_id, project, platform_source)
    (1, "c1", "m1", "alpha", "claude"),
    (2, "c2", "m2", "beta", " Codex CLI "),
    (3, "c3", "m3", "gamma", ""),
    (4, "c4", None, "alpha", "Cursor"),  # memory_session_id not assigned yet
]
OBSERVATIONS: list[dict[str, Any]] = [
    {"memory_session_id": "m1", "project": "alpha", "type": "bugfix", "title": "Fix the cache", "subtitle": "in m1",
     "narrative": "The cache kept stale rows.", "facts": '["stale rows came back", "TTL was 0"]',
     "concepts": '["gotcha", "caching"]', "files_read": '["src/a.py", "src/b.py"]', "files_modified": '["src/a.py"]'},
    {"memory_session_id": "m1", "project": "alpha", "type": "discovery", "title": "Only a title"},  # no documents
    {"memory_session_id": "m1", "project": "alpha", "type": "", "title": None, "subtitle": "",
     "narrative": "  padded narrative  ", "facts": "[]", "concepts": "[]", "files_read": "[]"},
    {"memory_session_id": "m2", "project": "beta", "type": "change", "title": "Codex work", "text": "legacy text",
     "facts": '["", "a real fact"]', "files_read": "not-json/path.py", "files_modified": '"single.py"'},
    {"memory_session_id": "m2", "project": "beta", "merged_into_project": "alpha", "type": "decision",
     "title": "Merged", "narrative": "Merged from beta into alpha.", "concepts": '["why"]'},
    {"memory_session_id": "m3", "project": "gamma", "type": "feature", "title": "Gamma", "narrative": LONG,
     "facts": '["gamma fact"]'},
    {"memory_session_id": "m-missing", "project": "delta", "type": "refactor", "title": "No session",
     "narrative": "Its session row is gone."},
]
SUMMARIES: list[dict[str, Any]] = [
    {"memory_session_id": "m1", "project": "alpha", "request": "Fix caching", "investigated": "the TTL",
     "learned": "TTL 0 means forever", "completed": "set a TTL", "next_steps": "watch it", "notes": "none",
     "prompt_number": 3},
    {"memory_session_id": "m2", "project": "beta", "merged_into_project": "alpha", "learned": "merged learning",
     "prompt_number": None},
    {"memory_session_id": "m3", "project": "gamma"},  # every field NULL: no documents
    {"memory_session_id": "m3", "project": "gamma", "request": "gamma request", "prompt_number": 0},
]
PROMPTS: list[dict[str, Any]] = [
    {"session_db_id": 1, "content_session_id": "c1", "prompt_number": 1, "prompt_text": "please fix the cache"},
    {"session_db_id": 2, "content_session_id": "c2", "prompt_number": 2, "prompt_text": "codex, look at beta"},
    {"session_db_id": None, "content_session_id": "c9", "prompt_number": 1, "prompt_text": "no session"},  # skipped
    {"session_db_id": 4, "content_session_id": "c4", "prompt_number": 7, "prompt_text": "cursor prompt"},
    {"session_db_id": 1, "content_session_id": "c1", "prompt_number": 2, "prompt_text": ""},
]


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def shapes_db(path: Path, empty: Callable[[Path, list[Any]], Path] = make_db) -> Path:
    """A current-schema database holding every row shape above: rows written into the file that
    ``empty`` creates (memsync's demo DDL unless given claude-mem's own, ``written_db``), by hand,
    as their explicit ids, merged projects and odd platforms are not what ``/api/import`` writes."""
    empty(path, [])
    conn = sqlite3.connect(path)
    with conn:
        for sid, content, memory, project, platform in SESSIONS:
            _insert(conn, "sdk_sessions", {"id": sid, "content_session_id": content, "memory_session_id": memory,
                                           "project": project, "platform_source": platform,
                                           "started_at": "2026-11-01T00:00:00Z", "started_at_epoch": 1_793_000_000_000})
        for i, row in enumerate(OBSERVATIONS):
            _insert(conn, "observations", {**row, "created_at": "2026-11-02T00:00:00Z",
                                           "created_at_epoch": 1_793_000_100_000 + i})
        for i, row in enumerate(SUMMARIES):
            _insert(conn, "session_summaries", {**row, "created_at": "2026-11-02T00:00:00Z",
                                                "created_at_epoch": 1_793_000_200_000 + i})
        for i, row in enumerate(PROMPTS):
            _insert(conn, "user_prompts", {**row, "created_at": "2026-11-02T00:00:00Z",
                                           "created_at_epoch": 1_793_000_300_000 + i})
    conn.close()
    return path
