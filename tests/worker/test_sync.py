"""Sync is exact and idempotent: real SQLite files, real embedded Chroma, a fake embedder."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import TABLES, Kind
from memsync.config.docids import parse_doc_id
from memsync.config.formats.embedding_store import store_path
from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline import sync as sync_module
from memsync.worker.pipeline.resync import resync
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.pipeline.sync import CHUNKS_IN_FLIGHT, Destination, Syncer, SyncOptions, SyncResult
from memsync.worker.pipeline.syncpass import EVERY_ROW, Scope, StoreCollection, SyncPass
from memsync.worker.rows.documents import SourceRow
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState
from memsync.worker.stores.embedstore import EmbeddingStore
from tests.conftest import BASE_MS, FakeEmbedder, make_db, mixed_records, obs, prompt, summary, write


class RecordingSink:
    """A real ChromaSink that remembers which ids each call wrote."""

    def __init__(self, inner: ChromaSink) -> None:
        self.inner = inner
        self.upserted: list[str] = []
        self.relabelled: list[str] = []
        self.deleted: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def upsert(
        self, ids: Sequence[str], embeddings: npt.NDArray[np.float32], metadatas: Sequence[dict[str, Any]],
        documents: Sequence[str] | None = None,
    ) -> None:
        self.inner.upsert(ids, embeddings, metadatas, documents)
        self.upserted += ids

    def update_metadata(self, ids: Sequence[str], metadatas: Sequence[dict[str, Any]]) -> None:
        self.inner.update_metadata(ids, metadatas)
        self.relabelled += ids

    def delete(self, ids: Sequence[str]) -> None:
        self.inner.delete(ids)
        self.deleted += ids

    def count(self) -> int:
        return self.inner.count()

    def iter_metadata(self, page: int = 5000) -> Any:
        return self.inner.iter_metadata(page)


def run(settings: Settings, client: Any, embedder: FakeEmbedder, **kw: Any) -> tuple[SyncResult, RecordingSink]:
    col = stores.open_collection(client, settings, embedder.model_id, embedder.dimension)
    sink = RecordingSink(ChromaSink(col))
    with SourceReader(settings.db) as reader, SyncState(settings.state_path) as state:
        state.set_meta("active_collection", col.name)
        options = SyncOptions(read_batch_rows=settings.read_batch_rows, batch_size=settings.batch_size)
        syncer = Syncer(reader, state, Destination(col.name, sink), embedder, options)
        return syncer.run(**kw), sink


def metadata_of(client: Any, settings: Settings, doc_id: str) -> dict[str, Any]:
    col = stores.open_collection(client, settings, "all-MiniLM-L6-v2-int8", 384)
    got = col.get(ids=[doc_id], include=["metadatas"])
    return dict(got["metadatas"][0]) if got["ids"] else {}


class TestIdempotence:
    def test_first_sync_adds_every_document_and_verify_is_clean(
        self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        result, sink = run(settings, chroma, fake_embedder)
        # 12 prompts (1 doc) + 12 observations (narrative + 2 facts) + 12 summaries (3 fields)
        assert result.added == 12 + 36 + 36
        assert result.unchanged == result.updated == result.deleted == 0
        assert len(set(sink.upserted)) == len(sink.upserted) == 84
        report = verify(settings, chroma)
        assert report.clean and report.expected == report.in_chroma == 84

    def test_second_sync_embeds_and_writes_nothing(
        self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        run(settings, chroma, fake_embedder)
        embedded_before = fake_embedder.embedded
        result, sink = run(settings, chroma, fake_embedder)
        assert (result.added, result.updated, result.deleted, result.unchanged) == (0, 0, 0, 84)
        assert result.line() == "0 added, 0 updated, 0 deleted, 84 unchanged"
        assert fake_embedder.embedded == embedded_before
        assert sink.upserted == sink.relabelled == sink.deleted == []


class TestChanges:
    @pytest.fixture(autouse=True)
    def _synced(self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder) -> None:
        run(settings, chroma, fake_embedder)

    def test_edit_of_narrative_reembeds_exactly_that_document(
        self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(settings.db, "UPDATE observations SET narrative = 'Rewritten narrative' WHERE id = 3")
        result, sink = run(settings, chroma, fake_embedder)
        assert sink.upserted == ["obs_3_narrative"]
        assert sink.relabelled == sink.deleted == []
        assert (result.added, result.updated, result.deleted) == (0, 1, 0)
        assert verify(settings, chroma).clean

    def test_deleted_row_deletes_its_documents_only(
        self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(settings.db, "DELETE FROM session_summaries WHERE id = 5")
        write(settings.db, "DELETE FROM user_prompts WHERE id = 12")  # the last row: deletion at the tail
        result, sink = run(settings, chroma, fake_embedder)
        assert sorted(sink.deleted) == ["prompt_12", "summary_5_completed", "summary_5_learned", "summary_5_request"]
        assert sink.upserted == sink.relabelled == []
        assert result.deleted == 4
        assert verify(settings, chroma).clean

    def test_fact_removed_from_list_deletes_that_fact_document(
        self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(settings.db, "UPDATE observations SET facts = ? WHERE id = 2", json.dumps(["fact 1.0"]))
        result, sink = run(settings, chroma, fake_embedder)
        assert sink.deleted == ["obs_2_fact_1"]
        assert sink.upserted == sink.relabelled == []
        assert verify(settings, chroma).clean

    def test_project_merge_relabels_without_embedding(
        self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(settings.db, "UPDATE observations SET merged_into_project = 'alpha' WHERE id = 2")
        before = fake_embedder.embedded
        result, sink = run(settings, chroma, fake_embedder)
        assert sorted(sink.relabelled) == ["obs_2_fact_0", "obs_2_fact_1", "obs_2_narrative"]
        assert sink.upserted == sink.deleted == []
        assert fake_embedder.embedded == before
        assert metadata_of(chroma, settings, "obs_2_narrative")["merged_into_project"] == "alpha"
        # Undoing the merge removes the key again (Chroma merges metadata; memsync sends None).
        write(settings.db, "UPDATE observations SET merged_into_project = NULL WHERE id = 2")
        run(settings, chroma, fake_embedder)
        assert "merged_into_project" not in metadata_of(chroma, settings, "obs_2_narrative")
        assert verify(settings, chroma).clean

    def test_new_rows_are_added_and_nothing_else_written(
        self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        from memsync.worker.seed.importer import import_records

        import_records(settings.db, [obs(100, "gamma")])
        result, sink = run(settings, chroma, fake_embedder)
        assert sorted(sink.upserted) == ["obs_13_fact_0", "obs_13_fact_1", "obs_13_narrative"]
        assert result.added == 3 and result.updated == result.deleted == 0


    def test_a_tail_pass_logs_one_line_per_batch_it_had(
        self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        from structlog.testing import capture_logs

        from memsync.worker.seed.importer import import_records

        import_records(settings.db, [obs(100, "gamma")])
        with capture_logs() as logged:  # the worker's fast path: only rows above each watermark
            result, _ = run(settings, chroma, fake_embedder,
                            start_after={Kind.OBSERVATION: 12, Kind.SUMMARY: 12, Kind.PROMPT: 12})
        batches = [e for e in logged if e["event"] == "sync_batch"]
        assert result.added == 3
        assert [(e["kind"], e["rows"], e["embed"]) for e in batches] == [("observation", 1, 3)]


class TestProjectFilter:
    def test_project_resync_touches_only_that_project(
        self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        result, sink = run(settings, chroma, fake_embedder, project="beta")
        projects = {metadata_of(chroma, settings, d)["project"] for d in sink.upserted}
        assert projects == {"beta"} and result.added == 42
        # A later full sync adds the rest and deletes nothing of beta.
        result, sink = run(settings, chroma, fake_embedder)
        assert result.added == 42 and result.deleted == 0 and result.unchanged == 42
        assert verify(settings, chroma).clean


class ReadingReader(SourceReader):
    """A real reader that remembers the ids of every row it read in full (``read_batch``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.full: list[tuple[Kind, int]] = []

    def read_batch(
        self, kind: Kind, after_id: int, limit: int, project: str | None = None, up_to: int | None = None
    ) -> list[SourceRow]:
        rows = super().read_batch(kind, after_id, limit, project, up_to)
        self.full += [(kind, r.id) for r in rows]
        return rows


def run_reading(
    settings: Settings, client: Any, embedder: FakeEmbedder, **kw: Any
) -> tuple[SyncResult, RecordingSink, list[tuple[Kind, int]]]:
    """``run``, and which rows the pass read in full."""
    col = stores.open_collection(client, settings, embedder.model_id, embedder.dimension)
    sink = RecordingSink(ChromaSink(col))
    with ReadingReader(settings.db) as reader, SyncState(settings.state_path) as state:
        options = SyncOptions(read_batch_rows=settings.read_batch_rows, batch_size=settings.batch_size)
        syncer = Syncer(reader, state, Destination(col.name, sink), embedder, options)
        return syncer.run(**kw), sink, reader.full


class TestUnchangedRowsAreNotRead:
    """A pass compares each batch's row hashes (computed in SQL) with the records and reads in full
    only the batches that differ (cheap when unchanged); edits, deletes and stray records anywhere still count."""

    @pytest.fixture
    def synced(self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder) -> Settings:
        make_db(settings.db, mixed_records(40))  # 40 rows per kind; batches of 7
        # The setup's pass upserts in one chunk per batch read: the chunks are not what is tested
        # here, and 56 upserts of 5 were most of each test's time.
        first, _, _ = run_reading(settings.model_copy(update={"batch_size": 256}), chroma, fake_embedder)
        assert first.added == 40 * 7 and first.failed_rows == 0
        return settings

    def test_an_unchanged_pass_reads_no_row_and_logs_no_batch(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        from structlog.testing import capture_logs

        with capture_logs() as logged:
            result, sink, full = run_reading(synced, chroma, fake_embedder)
        assert (result.written, result.unchanged, result.rows) == (0, 40 * 7, 120)
        assert full == [] and sink.upserted == sink.deleted == []
        assert [e["event"] for e in logged] == ["sync_done"]

    def test_an_edit_in_the_middle_is_found_and_only_its_batch_is_read(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(synced.db, "UPDATE observations SET narrative = 'an edit deep inside' WHERE id = 20")
        result, sink, full = run_reading(synced, chroma, fake_embedder)
        assert sink.upserted == ["obs_20_narrative"] and result.updated == 1 and result.written == 1
        # Only its range: (19, 26], counting 7 from the newest row down (40, 33, 26, ...).
        assert full == [(Kind.OBSERVATION, i) for i in range(20, 27)]
        assert verify(synced, chroma).clean

    def test_rows_deleted_at_a_batch_edge_and_past_the_tail_are_found(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(synced.db, "DELETE FROM observations WHERE id IN (14, 39, 40)")
        write(synced.db, "DELETE FROM user_prompts WHERE id = 40")
        result, sink, _ = run_reading(synced, chroma, fake_embedder)
        assert sorted(sink.deleted) == sorted(
            [f"obs_{i}_{f}" for i in (14, 39, 40) for f in ("narrative", "fact_0", "fact_1")] + ["prompt_40"])
        assert result.deleted == 10 and result.added == result.updated == 0
        assert verify(synced, chroma).clean
        again, _, full = run_reading(synced, chroma, fake_embedder)
        assert again.written == 0 and full == []

    def test_a_stray_record_past_the_last_row_is_cleaned_up(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        with SyncState(synced.state_path) as state:  # an intent whose row never reached the records
            state.record_intents("memsync-g1", Kind.SUMMARY, [("summary_99_request", 99)], fake_embedder.model_id)
        result, sink, _ = run_reading(synced, chroma, fake_embedder)
        assert sink.deleted == ["summary_99_request"] and result.deleted == 1
        again, _, full = run_reading(synced, chroma, fake_embedder)
        assert again.written == 0 and full == []

    def test_text_that_is_not_utf8_hashes_alike_in_sql_and_in_python(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(synced.db, "UPDATE observations SET narrative = CAST(x'e29c93fffe6f6b' AS TEXT) WHERE id = 3")
        changed, sink, _ = run_reading(synced, chroma, fake_embedder)
        assert sink.upserted == ["obs_3_narrative"]
        again, _, full = run_reading(synced, chroma, fake_embedder)
        assert again.written == 0 and again.unchanged == 40 * 7 and full == []

    def test_a_new_derivation_version_derives_every_row_again_and_writes_nothing(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from memsync.worker.rows import documents

        monkeypatch.setattr(documents, "ROW_HASH_SALT", documents.ROW_HASH_SALT + b"next:")
        result, sink, full = run_reading(synced, chroma, fake_embedder)
        assert len(full) == 120 and result.written == 0 and result.unchanged == 40 * 7
        again, _, full = run_reading(synced, chroma, fake_embedder)
        assert again.written == 0 and full == []

    def test_an_unchanged_project_pass_reads_no_row(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        result, _, full = run_reading(synced, chroma, fake_embedder, project="beta")
        assert result.written == 0 and result.rows == 60 and full == []
        write(synced.db, "UPDATE session_summaries SET learned = 'beta learned more' WHERE id = 2")
        result, sink, full = run_reading(synced, chroma, fake_embedder, project="beta")
        assert sink.upserted == ["summary_2_learned"] and {k for k, _ in full} == {Kind.SUMMARY}

    def test_a_row_failed_too_often_is_not_read_again(
        self, synced: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        write(synced.db, "UPDATE observations SET created_at_epoch = 0, created_at = 'never' WHERE id = 9")
        for _ in range(3):  # max_row_attempts
            result, _, full = run_reading(synced, chroma, fake_embedder)
            assert result.failed_rows == 1 and (Kind.OBSERVATION, 9) in full
        result, _, full = run_reading(synced, chroma, fake_embedder)
        assert result.failed_rows == 1 and result.written == 0 and full == []


class TestCrashSafety:
    def test_crash_between_upsert_and_record_leaves_no_hidden_orphan(
        self, settings: Settings, source_db: Path, fake_embedder: FakeEmbedder
    ) -> None:
        """A crash after Chroma acknowledged but before the record was written: the intent record
        lets the next pass delete the document when its row vanished meanwhile."""

        class Crash(BaseException):
            pass

        class CrashingState(SyncState):
            def record_synced(self, *a: Any, **k: Any) -> None:
                raise Crash

        with stores.connect(settings) as handle:
            col = stores.open_collection(handle.client, settings, fake_embedder.model_id, fake_embedder.dimension)
            with SourceReader(settings.db) as reader, CrashingState(settings.state_path) as state:
                syncer = Syncer(reader, state, Destination(col.name, ChromaSink(col)), fake_embedder,
                                SyncOptions(read_batch_rows=50, batch_size=5))
                with pytest.raises(Crash):
                    syncer.run()
            # The chunks in flight when the first one failed (5 documents each) reached Chroma; no
            # record holds their hashes. Their rows vanish.
            landed = [parse_doc_id(i) for i in col.get(include=[])["ids"]]
            assert 5 <= len(landed) <= 5 * CHUNKS_IN_FLIGHT and len(landed) % 5 == 0
            assert {d.kind for d in landed} == {Kind.OBSERVATION}
            for sid in {d.sqlite_id for d in landed}:
                write(settings.db, "DELETE FROM observations WHERE id = ?", sid)
            result, _ = run(settings, handle.client, fake_embedder)
            assert result.deleted == len(landed)
            assert verify(settings, handle.client).clean


class TestResyncEntryPoint:
    def test_resync_and_rebuild_switch_generation(
        self, settings: Settings, source_db: Path, fake_embedder: FakeEmbedder
    ) -> None:
        first = resync(settings, embedder=fake_embedder)
        assert first.collection == "memsync-g1" and first.added == 84
        rebuilt = resync(settings, rebuild=True, embedder=fake_embedder)
        assert rebuilt.collection == "memsync-g2" and rebuilt.added == 84
        with stores.connect(settings) as handle:
            names = sorted(c.name for c in handle.client.list_collections())
            assert names == ["memsync", "memsync-g2"]
            assert stores.active_collection_name(handle.client, settings) == "memsync-g2"
        again = resync(settings, embedder=fake_embedder)
        assert again.collection == "memsync-g2" and again.written == 0 and again.unchanged == 84
        assert verify(settings).clean

    def test_dry_run_writes_nothing(self, settings: Settings, source_db: Path, fake_embedder: FakeEmbedder) -> None:
        planned = resync(settings, scope=Scope(dry_run=True), embedder=fake_embedder)
        assert planned.added == 84 and planned.dry_run
        assert fake_embedder.embedded == 0
        report = verify(settings)
        assert report.missing == 84 and report.in_chroma == 0

    def test_stop_event_interrupts_between_batches_and_rerun_continues(
        self, settings: Settings, source_db: Path, fake_embedder: FakeEmbedder
    ) -> None:
        import threading

        stop = threading.Event()
        calls = [0]

        def progress(rows: int, docs: int) -> None:
            calls[0] += 1
            stop.set()  # as if Ctrl-C arrived during the first batch

        partial = resync(settings, stop=stop, progress=progress, embedder=fake_embedder)
        assert partial.interrupted and 0 < partial.added < 84 and calls[0] == 1
        assert verify(settings).in_chroma == partial.added == fake_embedder.embedded
        rest = resync(settings, embedder=fake_embedder)
        assert rest.added == 84 - partial.added and not rest.interrupted
        assert verify(settings).clean


def test_stop_inside_a_batch_reports_only_what_was_written(
    settings: Settings, source_db: Path
) -> None:
    import threading

    stop = threading.Event()

    class StopAfterFirstChunk(FakeEmbedder):
        def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            stop.set()  # Ctrl-C while the first chunk (batch_size=5) is being embedded
            return super().embed(texts)

    embedder = StopAfterFirstChunk()
    partial = resync(settings, stop=stop, embedder=embedder)
    assert partial.interrupted and partial.added == embedder.embedded == 5 and partial.updated == 0
    assert verify(settings).in_chroma == 5


def test_model_mismatch_names_rebuild(settings: Settings, source_db: Path, fake_embedder: FakeEmbedder) -> None:
    from memsync.config.errors import ModelMismatchError

    resync(settings, embedder=fake_embedder)
    with stores.connect(settings) as handle, pytest.raises(ModelMismatchError, match="resync --rebuild"):
        stores.open_collection(handle.client, settings, "another-model", 768)


def test_legacy_database_syncs(tmp_path: Path, settings: Settings, fake_embedder: FakeEmbedder) -> None:
    from memsync.config.claude_mem.schema import Era

    make_db(settings.db, mixed_records(5), era=Era.LEGACY)
    result = resync(settings, embedder=fake_embedder)
    assert result.added == 5 + 15 + 15 and result.failed_rows == 0
    assert verify(settings).clean


class TestOutcomes:
    """Per-batch outcomes are values: summed on the sync thread, never shared with the upsert thread."""

    def test_outcomes_sum_field_by_field_and_any_interruption_interrupts(self) -> None:
        from memsync.worker.pipeline.sync import STOPPED, Outcome

        a = Outcome(added=2, unchanged=5, rows=3, upsert_seconds=0.5, failures=(("prompt", 1, "bad"),))
        b = Outcome(added=-1, updated=1, rows=4, upsert_seconds=0.25, failures=(("summary", 2, "worse"),))
        total = a + b
        assert (total.added, total.updated, total.unchanged, total.rows) == (1, 1, 5, 7)
        assert total.upsert_seconds == 0.75 and total.failures == (("prompt", 1, "bad"), ("summary", 2, "worse"))
        assert not total.interrupted and (total + STOPPED).interrupted

    def test_a_pass_result_carries_its_outcome_under_the_same_names(self) -> None:
        from memsync.worker.pipeline.sync import Outcome

        result = SyncResult.of("c", Outcome(added=3, deleted=1, reused=2, read_seconds=0.1), 1.5, dry_run=False)
        assert (result.collection, result.added, result.deleted, result.reused) == ("c", 3, 1, 2)
        assert result.read_seconds == 0.1 and result.seconds == 1.5 and result.written == 4



def test_a_pass_whose_upstream_store_did_not_open_keeps_its_own_and_waits(
        settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder) -> None:
    """The daemon hands the pass what its target holds; an upstream-readable store whose opening
    failed (a full disk while its format was bound) is None. memsync's own pass stands and the
    upstream pass waits for the next one, as before the passes were shared (a Syncer without a sink
    would stop the worker on its first write)."""
    s = settings.model_copy(update={"upstream_store": True})
    col = stores.open_collection(chroma, s, fake_embedder.model_id, fake_embedder.dimension)
    with SourceReader(s.db) as reader, SyncState(s.state_path) as state:
        sync = SyncPass(s, reader, state, StoreCollection(None, due=False), SyncOptions.from_settings(s))
        result = sync.run(Destination(col.name, ChromaSink(col)), fake_embedder, lambda: None, EVERY_ROW)
    assert result.added == 12 + 36 + 36 and result.upstream is None and not result.interrupted


class TestNewestFirst:
    """A full pass compares id ranges from the newest rows backward, the kinds interleaved by date."""

    def test_a_first_sync_writes_the_newest_rows_first_kinds_interleaved(
        self, settings: Settings, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        # Observations are many and old-to-new; prompts and summaries few. Ranges of 7 rows.
        records = [obs(i) for i in range(40)] + [prompt(i) for i in range(30, 40)] + [summary(i) for i in range(36, 40)]
        make_db(settings.db, records)
        result, sink = run(settings, chroma, fake_embedder)
        assert result.rows == 54 and verify(settings, chroma).clean
        order = [parse_doc_id(d) for d in sink.upserted]
        with sqlite3.connect(settings.db) as conn:
            epochs = {(kind, int(i)): int(e) for kind, table in TABLES.items()
                      for i, e in conn.execute(f"SELECT id, created_at_epoch FROM {table}")}
        seen = [epochs[(d.kind, d.sqlite_id)] for d in order]
        # The first documents written are the newest rows of every kind, not observation 1.
        assert {d.kind for d in order[:40]} == {Kind.OBSERVATION, Kind.PROMPT, Kind.SUMMARY}
        assert seen[0] >= BASE_MS + 33 * 1000 and min(seen[:40]) > BASE_MS + 20 * 1000
        assert order[-1].kind is Kind.OBSERVATION and seen[-1] < BASE_MS + 7 * 1000  # the oldest come last

    def test_rows_deleted_anywhere_are_found_going_backward(
        self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        run(settings, chroma, fake_embedder)
        # The first row, one in the middle of a range, and the last (the ranges' both ends).
        write(settings.db, "DELETE FROM observations WHERE id IN (1, 6, 12)")
        result, sink = run(settings, chroma, fake_embedder)
        assert {parse_doc_id(d).sqlite_id for d in sink.deleted} == {1, 6, 12} and sink.upserted == []
        assert verify(settings, chroma).clean

    def test_a_pass_stopped_midway_is_finished_by_the_next_without_a_gap(
        self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        col = stores.open_collection(chroma, settings, fake_embedder.model_id, fake_embedder.dimension)
        sink = RecordingSink(ChromaSink(col))
        options = SyncOptions(read_batch_rows=settings.read_batch_rows, batch_size=settings.batch_size)
        with SourceReader(settings.db) as reader, SyncState(settings.state_path) as state:
            state.set_meta("active_collection", col.name)
            stopper = Syncer(reader, state, Destination(col.name, sink), fake_embedder, options)
            real = sink.upsert

            def upsert_then_stop(*a: Any, **kw: Any) -> None:
                real(*a, **kw)
                if len(sink.upserted) > 20:
                    options.stop.set()

            sink.upsert = upsert_then_stop  # type: ignore[method-assign]
            first = stopper.run()
        assert first.interrupted and 0 < len(sink.upserted) < 100
        second, _ = run(settings, chroma, fake_embedder)
        assert not second.interrupted and verify(settings, chroma).clean

    def test_a_full_pass_yields_to_new_rows_and_goes_on_where_it_was(
        self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder
    ) -> None:
        col = stores.open_collection(chroma, settings, fake_embedder.model_id, fake_embedder.dimension)
        sink = RecordingSink(ChromaSink(col))
        asked: list[int] = []

        def new_rows_wait() -> bool:
            asked.append(len(sink.upserted))
            return len(asked) == 1  # rows arrive once, after the first range

        options = SyncOptions(read_batch_rows=settings.read_batch_rows, batch_size=settings.batch_size,
                              yield_to=new_rows_wait)
        with SourceReader(settings.db) as reader, SyncState(settings.state_path) as state:
            state.set_meta("active_collection", col.name)
            syncer = Syncer(reader, state, Destination(col.name, sink), fake_embedder, options)
            first = syncer.run()
            assert first.interrupted and first.resume is not None and len(asked) == 1
            assert set(first.resume) == set(Kind) and all(0 < below < 12 for below in first.resume.values())
            newest = {parse_doc_id(d).sqlite_id for d in sink.upserted}
            assert min(newest) > 1  # the newest rows went first
            write(settings.db, "INSERT INTO user_prompts (content_session_id, prompt_number, prompt_text, "
                               "created_at, created_at_epoch) VALUES ('alpha-s0', 9, 'new while syncing', "
                               "'2026-01-01T00:00:00Z', 1767225600000)")
            tail = syncer.run(start_after=state.watermarks(col.name))
            assert "prompt_13" in sink.upserted and not tail.interrupted
            rest = syncer.run(resume=first.resume)
        assert not rest.interrupted and rest.resume is None
        assert len(sink.upserted) == len(set(sink.upserted))  # nothing written twice
        assert verify(settings, chroma).clean

    def test_a_full_pass_yields_in_the_middle_of_a_range_and_embeds_nothing_twice(
        self, settings: Settings, source_db: Path, chroma: Any, fake_embedder: FakeEmbedder,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # Chunks of 2 documents, so that a range below the top ones has several to ask between.
        monkeypatch.setattr(sync_module, "FIRST_CHUNK_DOCS", 2)
        col = stores.open_collection(chroma, settings, fake_embedder.model_id, fake_embedder.dimension)
        sink = RecordingSink(ChromaSink(col))
        asked_from: list[str] = []

        def new_rows_wait() -> bool:
            asked_from.append(sys._getframe(1).f_code.co_name)
            return asked_from[-1] == "_write_embedded" and asked_from.count("_write_embedded") == 1

        options = SyncOptions(read_batch_rows=settings.read_batch_rows, batch_size=settings.batch_size,
                              yield_to=new_rows_wait)
        with SourceReader(settings.db) as reader, SyncState(settings.state_path) as state, \
                EmbeddingStore(store_path(settings)) as store:
            state.set_meta("active_collection", col.name)
            syncer = Syncer(reader, state, Destination(col.name, sink), fake_embedder, options, store)
            first = syncer.run()
            assert first.interrupted and first.resume is not None
            assert asked_from[-1] == "_write_embedded"  # it yielded between two chunks of one range
            written = set(sink.upserted)
            # The range it left is not through: its written documents are below the cursor, and
            # none of their rows is marked.
            left = [parse_doc_id(d) for d in written if parse_doc_id(d).sqlite_id <= first.resume.get(
                parse_doc_id(d).kind, 0)]
            assert left
            for doc in left:
                assert state.rows_in_range(col.name, doc.kind, doc.sqlite_id - 1, doc.sqlite_id) == {}
            embedded_before = fake_embedder.embedded
            rest = syncer.run(resume=first.resume)
            assert not rest.interrupted and rest.resume is None
            # What the left range had written is unchanged, so it is neither written nor embedded again.
            assert not written & set(sink.upserted[len(written):])
            assert len(sink.upserted) == len(set(sink.upserted))
            assert fake_embedder.embedded - embedded_before == len(sink.upserted) - len(written) - rest.reused
        assert verify(settings, chroma).clean
