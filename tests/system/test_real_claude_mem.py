"""memsync on a database that the real claude-mem wrote: its released worker
(scripts/real_claude_mem.py) creates the schema with its own migrations and takes rows through its
``/api/import``; memsync then resyncs, verifies, searches and reports status on that file, reading
it only: the file's bytes are the same after every memsync command.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from memsync.config.claude_mem.schema import LOGICAL_COLUMNS
from memsync.config.claude_mem.version import TESTED_SCHEMA_VERSION
from memsync.config.settings import Settings
from scripts.real_claude_mem import ClaudeMemWorker
from tests import conftest as demo
from tests.system.test_e2e import memsync
from tests.upstream.written import Unwritable, import_payload, written_db

pytestmark = pytest.mark.slow
NOW_MS = int(time.time() * 1000)  # inside search's default 90-day window
NOT_A_LIST = "the uploader retried forever because the timeout was swallowed"


def iso(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch_ms / 1000))


def session(n: int, project: str) -> dict[str, Any]:
    """An ``sdk_sessions`` record as claude-mem's importSdkSession reads it."""
    t = NOW_MS - (10 - n) * 3_600_000
    return {"content_session_id": f"content-{n}", "memory_session_id": f"memory-{n}", "project": project,
            "platform_source": "claude", "user_prompt": f"first prompt of session {n}", "started_at": iso(t),
            "started_at_epoch": t, "completed_at": iso(t + 600_000), "completed_at_epoch": t + 600_000,
            "status": "completed"}


def observation(n: int, i: int, project: str, title: str, narrative: str, facts: str) -> dict[str, Any]:
    """An ``observations`` record as importObservation reads it: facts, concepts and files are the
    JSON text claude-mem stores, not lists."""
    t = NOW_MS - (10 - n) * 3_600_000 + (i + 1) * 1000
    return {"memory_session_id": f"memory-{n}", "project": project, "text": None, "type": "bugfix",
            "title": title, "subtitle": f"step {i}", "facts": facts, "narrative": narrative,
            "concepts": json.dumps(["gotcha", "how-it-works"]), "files_read": json.dumps([f"src/m{n}.py"]),
            "files_modified": json.dumps([]), "prompt_number": 1, "discovery_tokens": 40, "created_at": iso(t),
            "created_at_epoch": t}


def summary(n: int, project: str) -> dict[str, Any]:
    """A ``session_summaries`` record as importSessionSummary reads it (one per memory session)."""
    t = NOW_MS - (10 - n) * 3_600_000 + 500_000
    return {"memory_session_id": f"memory-{n}", "project": project, "request": f"Tidy the cache of session {n}",
            "investigated": "the eviction path", "learned": f"Lesson {n} about eviction order",
            "completed": "eviction fixed", "next_steps": "benchmark", "files_read": json.dumps(["src/cache.py"]),
            "files_edited": json.dumps([]), "notes": None, "prompt_number": 2, "discovery_tokens": 10,
            "created_at": iso(t), "created_at_epoch": t}


def prompt(n: int, number: int) -> dict[str, Any]:
    """A ``user_prompts`` record as importUserPrompt reads it (the session found by content id)."""
    t = NOW_MS - (10 - n) * 3_600_000 + number * 100
    return {"content_session_id": f"content-{n}", "prompt_number": number,
            "prompt_text": f"Please look at problem {n}.{number} in the scheduler", "created_at": iso(t),
            "created_at_epoch": t}


ROWS: dict[str, list[dict[str, Any]]] = {
    "sessions": [session(1, "alpha"), session(2, "alpha"), session(3, "beta")],
    "observations": [
        observation(1, 0, "alpha", "Stale rows in the cache", "The cache kept rows after their file changed.",
                    json.dumps(["rows keyed by path only", "mtime ignored"])),
        observation(1, 1, "alpha", "Eviction order reversed", "Oldest entries survived, newest were evicted.",
                    json.dumps(["LRU list walked backwards"])),
        observation(2, 0, "alpha", "Uploader never gave up", "Uploads hung when the network dropped.",
                    NOT_A_LIST),  # facts that are not a JSON array: claude-mem stores what it is given
        observation(3, 0, "beta", "Scheduler skipped jobs", "Jobs due at midnight were skipped.",
                    json.dumps(["off by one in the day boundary"])),
    ],
    "summaries": [summary(1, "alpha"), summary(2, "alpha"), summary(3, "beta")],
    "prompts": [prompt(1, 1), prompt(1, 2), prompt(2, 1), prompt(3, 1)],
}


def fingerprint(db: Path) -> list[tuple[str, str, float]]:
    """Name, content hash and mtime of the database and of its WAL when there is one. Not of the
    ``-shm`` file: that is the WAL index in shared memory, where every reader of a WAL database,
    read-only ones too, records its read marks; it holds no rows."""
    return [(p.name, hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime)
            for p in (db, db.with_name(db.name + "-wal")) if p.exists()]


@pytest.fixture
def written(claude_mem: ClaudeMemWorker) -> Path:
    """claude-mem's database with ROWS, written by its worker, which is then stopped (it checkpoints
    its WAL into the file on SIGTERM) so that nothing but memsync could touch the file afterwards."""
    stats = claude_mem.import_rows(**ROWS)
    assert stats == {"sessionsImported": 3, "sessionsSkipped": 0, "summariesImported": 3, "summariesSkipped": 0,
                     "observationsImported": 4, "observationsSkipped": 0, "promptsImported": 4,
                     "promptsSkipped": 0}
    claude_mem.stop()
    return claude_mem.db


@pytest.fixture
def on_written(written: Path, tmp_path: Path) -> Settings:
    """Settings on the database claude-mem wrote; embedded Chroma (as the ``settings`` fixture), so
    that a search between two commands reaches the vectors without a running ``memsync worker``."""
    return Settings(db=written, data_dir=tmp_path / "data", chroma_mode="embedded")


def test_memsync_reads_what_claude_mem_wrote_and_never_writes_it(on_written: Settings) -> None:
    db = on_written.db
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        assert con.execute("SELECT max(version) FROM schema_versions").fetchone() == (TESTED_SCHEMA_VERSION,)
        (uploader,) = con.execute("SELECT id FROM observations WHERE facts = ?", (NOT_A_LIST,)).fetchone()
    con.close()
    before = fingerprint(db)

    done = memsync(on_written, "resync", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] > 0
    verified = memsync(on_written, "verify", "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["clean"], verified.stdout + verified.stderr

    found = memsync(on_written, "search", "uploads hang when the network drops", "--json")
    assert found.returncode == 0, found.stderr
    answer = json.loads(found.stdout)
    assert answer["mode"] == "hybrid", answer
    assert (answer["results"][0]["kind"], answer["results"][0]["id"]) == ("observation", uploader), answer

    shown = memsync(on_written, "status")
    assert shown.returncode == 0, shown.stderr
    assert f"claude-mem schema version {TESTED_SCHEMA_VERSION}" in shown.stdout.splitlines()[0], shown.stdout
    assert "alpha" in shown.stdout and "beta" in shown.stdout, shown.stdout

    assert fingerprint(db) == before


def rows(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every logical column of every row memsync reads, per table, by id."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        out = {t: con.execute(f"SELECT {', '.join(cols)} FROM {t} ORDER BY id").fetchall()
               for t, cols in LOGICAL_COLUMNS.items()}
    con.close()
    return out


def test_written_db_holds_what_make_db_would_but_a_summary_per_memory_session(tmp_path: Path) -> None:
    """written_db (tests/upstream/written.py), which the system tests build their databases with:
    the same rows and ids as memsync's demo DDL and importer, in claude-mem's own schema; the one
    difference is the one claude-mem's import forces, a second summary of a session in a session
    of its own. A record it cannot write as given is refused, never written otherwise."""
    records = [*demo.mixed_records(5), demo.obs(20, "gamma", session="codex-run", memory_session_id="mem-codex",
                                                platform_source="codex", facts="not a list", created_at_epoch=None,
                                                created_at="2026-05-01T10:00:00.000Z"),
               demo.summary(21, "gamma", session="codex-run", memory_session_id="mem-codex", notes="n",
                            files_edited=["a.py"])]
    written = written_db(tmp_path / "written.db", records)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["written.db"]  # the whole database, no WAL beside it
    real, ddl = rows(written), rows(demo.make_db(tmp_path / "demo.db", records))
    with sqlite3.connect(f"file:{written}?mode=ro", uri=True) as con:
        assert con.execute("SELECT max(version) FROM schema_versions").fetchone() == (52,)
    con.close()
    assert real["observations"] == ddl["observations"] and real["user_prompts"] == ddl["user_prompts"]
    # Summaries 3 and 4 are the second ones of alpha-s0 and beta-s0: sessions alpha-s0#2, beta-s0#2.
    memory = LOGICAL_COLUMNS["session_summaries"].index("memory_session_id")
    pairs = list(zip(real["session_summaries"], ddl["session_summaries"], strict=True))
    assert {r[0]: r[memory] for r, d in pairs if r != d} == {3: "mem-alpha-s0#2", 4: "mem-beta-s0#2"}
    assert all(r[:memory] + r[memory + 1:] == d[:memory] + d[memory + 1:] for r, d in pairs)
    sessions = real["sdk_sessions"]
    assert sessions[:len(ddl["sdk_sessions"])] == ddl["sdk_sessions"]  # same ids: prompts' session_db_id
    assert [s[1:5] for s in sessions[len(ddl["sdk_sessions"]):]] == [
        ("alpha-s0#2", "mem-alpha-s0#2", "alpha", "claude"), ("beta-s0#2", "mem-beta-s0#2", "beta", "claude")]

    for bad, why in ((demo.obs(1, merged_into_project="beta"), "does not write merged_into_project"),
                     (demo.obs(1, platform_source="Claude Code"), "stores it normalised"),
                     (demo.obs(1, narrative="\udcff"), "not UTF-8")):
        with pytest.raises(Unwritable, match=why):
            import_payload([bad])
    with pytest.raises(Unwritable, match="duplicate"):
        import_payload([demo.prompt(0), demo.prompt(0, prompt_text="the same number again")])
