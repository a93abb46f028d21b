"""Rows → documents: both schema eras agree, and malformed values never crash."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from memsync.config.claude_mem.schema import KINDS, Era, Kind
from memsync.config.claude_mem.values import parse_list
from memsync.config.settings import Settings
from memsync.worker.checks.status import status
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.rows.documents import (
    MAX_TEXT_CHARS,
    RowError,
    SourceRow,
    build_documents,
    epoch_ms,
    row_values_hash,
)
from memsync.worker.rows.source import SourceReader
from tests.conftest import FakeEmbedder, make_db, mixed_records, obs


def all_documents(db: Path) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    with SourceReader(db) as reader:
        for kind in KINDS:
            for rows in reader.iter_rows(kind, 100):
                for row in rows:
                    out += [(d.doc_id, d.text, d.metadata) for d in build_documents(row)]
    return out


class TestSchemaEras:
    def test_both_eras_produce_identical_documents(self, tmp_path: Path) -> None:
        records = mixed_records(9, projects=("alpha", "beta", "gamma"))
        current = make_db(tmp_path / "current.db", records, era=Era.CURRENT)
        legacy = make_db(tmp_path / "legacy.db", records, era=Era.LEGACY)
        with SourceReader(current) as a, SourceReader(legacy) as b:
            assert (a.schema.era, b.schema.era) == (Era.CURRENT, Era.LEGACY)
        docs_current, docs_legacy = all_documents(current), all_documents(legacy)
        assert len(docs_current) == 9 * 7
        assert docs_current == docs_legacy

    def test_prompt_project_comes_from_the_session_join(self, tmp_path: Path) -> None:
        for era in Era:
            db = make_db(tmp_path / f"{era.value}.db", [obs(1, "alpha"), *mixed_records(2, ("beta",))], era=era)
            docs = dict((d[0], d[2]) for d in all_documents(db))
            assert docs["prompt_1"]["project"] == "beta"
            assert docs["prompt_1"]["memory_session_id"] == "mem-beta-s0"

    def test_metadata_keys_are_the_upstream_ones(self, tmp_path: Path) -> None:
        db = make_db(tmp_path / "c.db", mixed_records(1))
        docs = {d[0]: d[2] for d in all_documents(db)}
        assert docs["obs_1_fact_1"] == {
            "sqlite_id": 1, "doc_type": "observation", "memory_session_id": "mem-alpha-s0", "project": "alpha",
            "platform_source": "claude", "created_at_epoch": docs["obs_1_fact_1"]["created_at_epoch"],
            "type": "bugfix", "title": "Fix bug 0", "subtitle": "in module 0", "concepts": "gotcha",
            "files_read": "src/m0.py", "field_type": "fact", "fact_index": 1,
            "content_hash": docs["obs_1_fact_1"]["content_hash"],
        }
        assert docs["summary_1_request"]["doc_type"] == "session_summary"
        assert docs["summary_1_request"]["field_type"] == "request"
        assert docs["prompt_1"]["doc_type"] == "user_prompt" and docs["prompt_1"]["prompt_number"] == 1
        assert all(v not in (None, "") for meta in docs.values() for v in meta.values())


class TestValues:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [(None, []), ("", []), ("[]", []), ('["a", "b"]', ["a", "b"]), ("src/app.py", ["src/app.py"]),
         ("[not json", ["[not json"]), ('"one"', ["one"]), ("[1, null, {\"x\": 2}]", ["1", "", '{"x": 2}']),
         ("42", ["42"])],
    )
    def test_parse_list(self, raw: Any, expected: list[str]) -> None:
        assert parse_list(raw) == expected

    def test_epochs_are_milliseconds_and_seconds_are_scaled(self) -> None:
        assert epoch_ms(1_780_000_000_000, None) == 1_780_000_000_000
        assert epoch_ms(1_780_000_000, None) == 1_780_000_000_000
        assert epoch_ms(None, "2026-01-01T00:00:00.000Z") == 1_767_225_600_000
        with pytest.raises(RowError):
            epoch_ms(None, "yesterday")

    def test_empty_fields_are_not_written_and_facts_keep_positions(self) -> None:
        row = SourceRow(Kind.OBSERVATION, 7, {"created_at_epoch": 1_780_000_000_000, "narrative": "  ",
                                              "title": None, "facts": '["", "second"]', "type": "change"})
        assert [d.doc_id for d in build_documents(row)] == ["obs_7_fact_1"]

    def test_long_text_is_cut_before_hashing(self) -> None:
        row = SourceRow(Kind.PROMPT, 1, {"created_at_epoch": 1_780_000_000_000, "prompt_text": "x" * 1_000_000})
        (doc,) = build_documents(row)
        assert len(doc.text) == MAX_TEXT_CHARS


MALFORMED = [
    {"narrative": None, "title": None, "subtitle": None, "facts": None, "concepts": None, "text": None},
    {"facts": "{not json", "concepts": "[[[", "files_read": "/bare/path.py", "files_modified": "null"},
    {"narrative": "n" * 1_000_000},
    {"narrative": "emoji 🚀🔥 and CJK 漢字かなカナ 한국어", "facts": ["事实 ✅", "😀"]},
    {"title": "\x00nul\x00byte", "narrative": "tab\tand\nnewline"},
    {"facts": '[1, 2, {"a": null}, null]', "concepts": '{"not": "a list"}'},
]


class TestMalformedRows:
    def test_resync_never_crashes_and_unusable_rows_are_failed(
        self, settings: Settings, fake_embedder: FakeEmbedder
    ) -> None:
        make_db(settings.db, [obs(i, **extra) for i, extra in enumerate(MALFORMED)] + mixed_records(3))
        conn = sqlite3.connect(settings.db)
        with conn:
            # Invalid UTF-8 bytes stored as TEXT, and a row with no usable timestamp at all.
            conn.execute("UPDATE observations SET narrative = CAST(x'e29c93fffe6f6b' AS TEXT) WHERE id = 1")
            conn.execute("UPDATE observations SET created_at_epoch = 0, created_at = 'sometime' WHERE id = 2")
        conn.close()
        result = resync(settings, embedder=fake_embedder)
        assert result.failed_rows == 1 and result.failures[0][:2] == ("observation", 2)
        assert result.added > 0
        report = verify(settings)
        assert report.clean and report.unusable_rows == 1
        st = status(settings)
        assert st.failures == [{"kind": "observation", "id": 2, "reason": "no usable created_at_epoch or created_at",
                                "attempts": 1}]
        assert st.total("observations").failed == 1
        again = resync(settings, embedder=fake_embedder)
        assert again.written == 0 and again.failed_rows == 1
        # Once the agent fixes the row, it syncs.
        conn = sqlite3.connect(settings.db)
        with conn:
            conn.execute("UPDATE observations SET created_at_epoch = 1780000000000 WHERE id = 2")
        conn.close()
        fixed = resync(settings, embedder=fake_embedder)
        assert fixed.failed_rows == 0 and fixed.added > 0
        assert status(settings).total("observations").failed == 0
        assert verify(settings).clean


def test_source_database_is_never_written(settings: Settings, fake_embedder: FakeEmbedder) -> None:
    """The database file's bytes and mtime, and its WAL's, are the same after resync, verify and
    status, while the app holds it open (as claude-mem does)."""
    import hashlib

    make_db(settings.db, mixed_records(10))
    app = sqlite3.connect(settings.db)  # the agent, running
    try:
        app.execute("INSERT INTO user_prompts(session_db_id, content_session_id, prompt_number, prompt_text, "
                    "created_at, created_at_epoch) VALUES (1, 'alpha-s0', 9, 'in the WAL', 'x', 1780000000000)")
        app.commit()
        files = [settings.db, Path(f"{settings.db}-wal")]

        def snapshot() -> list[tuple[str, int]]:
            return [(hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns) for f in files]

        before = snapshot()
        first = resync(settings, embedder=fake_embedder)
        assert first.added == 71  # the row still in the WAL was read too
        resync(settings, embedder=fake_embedder)
        verify(settings)
        status(settings)
        assert snapshot() == before
    finally:
        app.close()


def test_reader_refuses_writes(settings: Settings) -> None:
    make_db(settings.db, mixed_records(1))
    with SourceReader(settings.db) as reader, pytest.raises(sqlite3.OperationalError):
        reader._conn.execute("DELETE FROM observations")


def test_failing_row_is_retried_a_bounded_number_of_times(settings: Settings, fake_embedder: FakeEmbedder) -> None:
    make_db(settings.db, mixed_records(2))
    conn = sqlite3.connect(settings.db)
    with conn:
        conn.execute("UPDATE observations SET created_at_epoch = 0, created_at = 'never' WHERE id = 1")
    conn.close()
    bounded = settings.model_copy(update={"max_row_attempts": 2})
    attempts = []
    for _ in range(4):
        result = resync(bounded, embedder=fake_embedder)
        assert result.failed_rows == 1
        attempts.append(status(bounded).failures[0]["attempts"])
    assert attempts == [1, 2, 2, 2]  # tried twice, then left as failed until the row changes


class TestRowHashes:
    """The row hash SQLite computes for a pass (``row_hashes``) is the hash of the row a read
    returns (``row_values_hash``): otherwise every pass would read every row again."""

    @pytest.mark.parametrize("era", [Era.CURRENT, Era.LEGACY])
    def test_sql_and_python_agree_on_every_kind_of_cell(self, tmp_path: Path, era: Era) -> None:
        db = make_db(tmp_path / "c.db", [obs(i, **extra) for i, extra in enumerate(MALFORMED)] + mixed_records(4),
                     era=era)
        conn = sqlite3.connect(db)
        with conn:  # SQLite is typed per cell: a REAL, a BLOB, an integer and bad UTF-8 where text was
            conn.execute("UPDATE observations SET prompt_number = 2.5, title = x'00ff10' WHERE id = 1")
            conn.execute("UPDATE observations SET narrative = 12345, facts = NULL WHERE id = 2")
            conn.execute("UPDATE session_summaries SET learned = CAST(x'e29c93fffe6f6b' AS TEXT) WHERE id = 1")
            conn.execute("UPDATE user_prompts SET prompt_text = 1e300 WHERE id = 2")
        conn.close()
        with SourceReader(db) as reader:
            for kind in KINDS:
                rows = reader.read_batch(kind, 0, 1000)
                assert reader.row_hashes(kind, 0, 1000) == [(r.id, row_values_hash(r)) for r in rows]
                assert len({row_values_hash(r) for r in rows}) == len(rows)

    def test_any_changed_cell_changes_the_hash(self, tmp_path: Path) -> None:
        db = make_db(tmp_path / "c.db", mixed_records(2))
        with SourceReader(db) as reader:
            before = dict(reader.row_hashes(Kind.OBSERVATION, 0, 10))
        for sql in ("UPDATE observations SET narrative = narrative || ' ' WHERE id = 1",  # one more byte
                    "UPDATE observations SET prompt_number = 1.5 WHERE id = 1",  # an integer becomes a real
                    "UPDATE observations SET prompt_number = '1.5x' WHERE id = 1",  # then text
                    "UPDATE observations SET title = CAST(title AS BLOB) WHERE id = 1",  # same bytes, a blob
                    "UPDATE sdk_sessions SET platform_source = 'cursor'"):  # the session's cell
            conn = sqlite3.connect(db)
            with conn:
                conn.execute(sql)
            conn.close()
            with SourceReader(db) as reader:
                after = dict(reader.row_hashes(Kind.OBSERVATION, 0, 10))
            assert after[1] != before[1], sql
            before = after
