"""Sync records bound to the store they describe: a store wiped, partly lost, restored or replaced,
and records lost or damaged, are all repaired by the next pass, embedding only what is really
missing or changed (real embedded Chroma, a counting fake embedder). What is missing is written
again from the embedding store (``worker.stores.embedstore``): ``reused`` counts it, and nothing is
embedded."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from memsync.chroma import collections as stores
from memsync.config.docids import parse_doc_id
from memsync.config.settings import Settings
from memsync.worker.checks.verify import VerifyReport, verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.pipeline.target import align_records, check_store
from memsync.worker.process import logs
from memsync.worker.rows.state import DAMAGED_SUFFIX, HELD_SUFFIX, SyncState
from memsync.worker.stores.vectorcopy import open_writer
from tests.conftest import FakeEmbedder, make_db, mixed_records

N = 20  # rows per kind: 60 rows, 140 documents


def synced(settings: Settings) -> tuple[int, FakeEmbedder]:
    make_db(settings.db, mixed_records(N))
    # One upsert per batch read (the fixture's chunks of 5 are for the passes under test).
    first = resync(settings.model_copy(update={"batch_size": 256}), embedder=FakeEmbedder())
    assert first.added == 140 and verify(settings).clean
    return first.added, FakeEmbedder()


def clean(settings: Settings, total: int) -> VerifyReport:
    report = verify(settings)
    assert report.clean, report
    assert report.in_chroma == report.expected == total
    assert report.copy_drift == 0  # the vector copy holds exactly what Chroma holds
    return report


@contextlib.contextmanager
def raw_collection(settings: Settings) -> Iterator[Any]:
    """The active generation through a plain chromadb client on the embedded store (as another
    tool, or a restore, would change it; same client settings, as chromadb requires in-process)."""
    import chromadb

    client = chromadb.PersistentClient(path=str(settings.chroma_dir), settings=stores._chroma_settings())
    try:
        pointer = client.get_collection(settings.collection)
        yield client.get_collection(pointer.metadata[stores.ACTIVE_KEY])
    finally:
        client.close()


def test_store_directory_deleted_is_refilled_by_the_next_resync(settings: Settings) -> None:
    total, embedder = synced(settings)
    shutil.rmtree(settings.chroma_dir)
    with capture_logs() as logged:
        again = resync(settings, embedder=embedder)
    assert again.added == total == again.reused and embedder.embedded == 0 and again.unchanged == 0
    aligned = [e for e in logged if e["event"] == logs.STORE_ALIGNED]
    assert len(aligned) == 1 and aligned[0]["reason"] == "identity" and aligned[0]["lost"] == total
    clean(settings, total)
    third = resync(settings, embedder=embedder)  # and then it is settled
    assert third.written == 0 and third.unchanged == total and third.reused == embedder.embedded == 0


def test_a_tenth_deleted_in_the_store_is_re_driven_exactly(settings: Settings) -> None:
    total, embedder = synced(settings)
    with raw_collection(settings) as col:
        ids = sorted(col.get(include=[])["ids"])[::10]
        col.delete(ids=ids)
    again = resync(settings, embedder=embedder)
    assert again.added == len(ids) == again.reused and embedder.embedded == 0
    assert again.updated == again.deleted == 0
    clean(settings, total)


def test_a_loss_that_keeps_the_count_is_found_by_the_audit(settings: Settings) -> None:
    total, embedder = synced(settings)
    with raw_collection(settings) as col:
        got = col.get(ids=["obs_3_narrative"], include=["embeddings", "metadatas"])
        col.delete(ids=["obs_3_narrative"])
        # An orphan of the same count (a restored document of a row the source no longer has), and a
        # document whose metadata an older backup holds (another content hash).
        col.add(ids=["obs_999_narrative"], embeddings=got["embeddings"], metadatas=got["metadatas"])
        col.update(ids=["prompt_5"], metadatas=[{"content_hash": "older"}])
    unnoticed = resync(settings, embedder=embedder)  # count equal, audit not due: nothing to see
    assert unnoticed.written == 0
    audit = settings.model_copy(update={"store_audit_interval_s": 0.001})
    again = resync(audit, embedder=embedder)
    assert (again.added, again.updated, again.deleted) == (1, 1, 1) and again.reused == 2 and embedder.embedded == 0
    clean(settings, total)


def test_state_db_deleted_is_rebuilt_from_the_store_without_embedding(settings: Settings) -> None:
    total, embedder = synced(settings)
    for p in settings.state_path.parent.glob(settings.state_path.name + "*"):
        p.unlink()
    again = resync(settings, embedder=embedder)
    assert embedder.embedded == 0 and again.written == 0 and again.unchanged == total
    clean(settings, total)
    with SyncState(settings.state_path) as state:
        assert state.live_docs(again.collection) == total


def test_state_db_overwritten_with_garbage_is_moved_aside_and_rebuilt(settings: Settings) -> None:
    total, embedder = synced(settings)
    for p in settings.state_path.parent.glob(settings.state_path.name + "-*"):
        p.unlink()
    settings.state_path.write_bytes(b"this is not a database " * 200)
    with capture_logs() as logged:
        again = resync(settings, embedder=embedder)
    damaged = [e for e in logged if e["event"] == logs.STATE_DAMAGED]
    assert len(damaged) == 1 and DAMAGED_SUFFIX in damaged[0]["moved_to"]
    assert Path(damaged[0]["moved_to"]).read_bytes().startswith(b"this is not")
    assert embedder.embedded == 0 and again.written == 0
    clean(settings, total)


def test_both_lost_state_and_a_tenth_of_the_store_embed_only_the_missing(settings: Settings) -> None:
    total, embedder = synced(settings)
    with raw_collection(settings) as col:
        ids = sorted(col.get(include=[])["ids"])[1::10]
        col.delete(ids=ids)
    settings.state_path.unlink()
    again = resync(settings, embedder=embedder)
    assert again.added == len(ids) == again.reused and embedder.embedded == 0
    clean(settings, total)


def test_copy_entries_of_documents_the_store_lost_are_removed(settings: Settings) -> None:
    """Alignment alone (no pass yet) leaves the copy holding exactly the store's documents."""
    total, embedder = synced(settings)
    with raw_collection(settings) as col:
        ids = sorted(col.get(include=[])["ids"])[::7]
        col.delete(ids=ids)
    with SyncState(settings.state_path) as state, stores.connect(settings) as handle:
        sink = ChromaSink(stores.open_collection(handle.client, settings, embedder.model_id, embedder.dimension))
        copy = open_writer(settings, state, sink.name, embedder.model_id, embedder.dimension)
        assert copy is not None
        try:
            check = check_store(settings, state, sink, copy, embedder.model_id)
            assert check.reason == "count" and check.repaired
            assert check.aligned is not None and check.aligned.lost == check.aligned.copy_removed == len(ids)
            assert (check.store_documents, check.records_documents) == (total - len(ids), total)
            assert state.live_docs(sink.name) == total - len(ids)
            assert sorted(copy.doc_ids()) == sorted(sink.collection.get(include=[])["ids"])
            again = check_store(settings, state, sink, copy, embedder.model_id)
            assert again.reason is None and not again.repaired  # the cheap check: counts equal now
        finally:
            copy.close()
    clean_after = resync(settings, embedder=embedder)
    assert clean_after.added == len(ids)
    clean(settings, total)


def test_worker_pass_repairs_a_deleted_store_and_reports_it(settings: Settings,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from memsync.worker.loop import daemon

    total, embedder = synced(settings)
    monkeypatch.setattr(daemon, "make_embedder", lambda *a, **k: embedder)
    shutil.rmtree(settings.chroma_dir)
    result = daemon.Worker(settings).once()
    assert result.added == total == result.reused and embedder.embedded == 0
    status = json.loads((settings.data_dir / "worker.json").read_text())
    assert status["store_repairs"] == 1 and status["store_read_at_ms"] > 0
    # counted again after the repair's pass: equal
    assert status["store_documents"] == status["records_documents"] == total
    assert status["store_differs_since_ms"] is None
    clean(settings, total)
    again = daemon.Worker(settings).once()
    assert again.written == 0 and embedder.embedded == 0
    status = json.loads((settings.data_dir / "worker.json").read_text())
    assert status["store_repairs"] == 0 and status["store_documents"] == status["records_documents"] == total


def test_rebuild_stays_the_explicit_full_rebuild(settings: Settings) -> None:
    total, embedder = synced(settings)
    shutil.rmtree(settings.chroma_dir)
    rebuilt = resync(settings, rebuild=True, embedder=embedder)
    assert rebuilt.added == total == rebuilt.reused and embedder.embedded == 0
    clean(settings, total)


def test_running_worker_notices_its_embedded_store_deleted(settings: Settings,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The health check sees the directory gone, reconnects to a new store and refills it."""
    from memsync.worker.loop import daemon

    make_db(settings.db, mixed_records(N))
    embedder = FakeEmbedder()
    monkeypatch.setattr(daemon, "make_embedder", lambda *a, **k: embedder)
    worker = daemon.Worker(settings)
    worker._start()
    try:
        worker.request_reconcile()
        worker.step()
        total = embedder.embedded
        assert total == 140 and worker.health.status.store_repairs == 0
        shutil.rmtree(settings.chroma_dir)
        worker._request_health()
        worker.step()  # the check fails: degraded, the connection dropped
        assert worker.health.status.degraded and worker._target.sink is None
        worker.step()  # reconnected to a new, empty store: aligned and refilled
        assert worker.health.status.store_repairs == 1 and embedder.embedded == total  # refilled from the store
        assert not worker.health.status.degraded
    finally:
        worker._shutdown()
    clean(settings, total)


def test_each_kind_of_difference_is_told_apart_and_a_second_alignment_finds_none(settings: Settings) -> None:
    """A store that lost a document, holds one under another hash, one the records only intended,
    and one no row can claim: each is counted as what it is, the copy follows, and the records then
    describe the store exactly (the ids are compared in SQLite, ``HeldIds``)."""
    total, embedder = synced(settings)
    with raw_collection(settings) as col:
        ids = sorted(col.get(include=[])["ids"])
        lost, rehashed, intended = ids[0], ids[1], ids[2]
        col.delete(ids=[lost])
        col.update(ids=[rehashed], metadatas=[{"content_hash": "changed-elsewhere"}])
        col.upsert(ids=["not-a-memsync-id"], embeddings=[[0.0] * embedder.dimension], metadatas=[{"x": 1}])
    with SyncState(settings.state_path) as state, stores.connect(settings) as handle:
        state._conn.execute("UPDATE docs SET content_hash = NULL WHERE doc_id = ?", (intended,))
        sink = ChromaSink(stores.open_collection(handle.client, settings, embedder.model_id, embedder.dimension))
        copy = open_writer(settings, state, sink.name, embedder.model_id, embedder.dimension)
        assert copy is not None
        try:
            held = f"{settings.state_path.name}{HELD_SUFFIX}-"
            crashed = settings.state_path.with_name(f"{held}{2**22 + 1}")  # above pid_max: no such process
            crashed.write_bytes(b"left by a crash " * 64)
            running = settings.state_path.with_name(f"{held}1")  # init's: a process that runs
            running.write_bytes(b"")
            result = align_records(state, sink, copy, embedder.model_id, page=7)  # pages of 7: many pages
            assert not crashed.exists() and running.exists()  # a live process's scratch is left to it
            assert sorted(p.name for p in settings.state_path.parent.glob(f"{held}*")) == [running.name]
            assert (result.lost, result.rehashed, result.adopted, result.foreign) == (1, 1, 1, 1)
            rows = {(d.kind, d.sqlite_id) for d in map(parse_doc_id, (lost, rehashed, intended))}
            assert result.store_documents == total - 1 and result.copy_removed == 1 and result.rows == len(rows)
            assert "not-a-memsync-id" not in sink.collection.get(include=[])["ids"]
            assert sorted(copy.doc_ids()) == sorted(sink.collection.get(include=[])["ids"])
            assert state.live_docs(sink.name) == total - 1
            again = align_records(state, sink, copy, embedder.model_id, page=7)
            assert again.changed == 0 and again.store_documents == total - 1
        finally:
            copy.close()
    assert resync(settings, embedder=embedder).added == 1  # the lost one; the others only re-checked
    clean(settings, total)
