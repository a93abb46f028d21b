"""Compaction: the next generation built from the live vectors (no re-embedding), records copied,
pointer switched, old generation dropped; space back; and the worker doing it by itself."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memsync.chroma import collections as stores
from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.stores.compact import compact, due, reclaim
from scripts.benchlib import settings_env
from tests.conftest import FakeEmbedder, make_db, mixed_records

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # churn rounds and a worker process: 8-16 s each


def churn_rounds(settings: Settings, embedder: FakeEmbedder, rounds: int) -> None:
    """Edit every observation's narrative and delete/re-add prompts' text, resyncing each time."""
    for r in range(rounds):
        conn = sqlite3.connect(settings.db)
        conn.execute("UPDATE observations SET narrative = narrative || ?", (f" round {r}",))
        conn.execute("UPDATE user_prompts SET prompt_text = prompt_text || ?", (f" round {r}",))
        conn.commit()
        conn.close()
        resync(settings, embedder=embedder)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_compaction_copies_live_vectors_switches_and_reclaims_space(settings: Settings,
                                                                    fake_embedder: FakeEmbedder) -> None:
    s = settings.model_copy(update={"batch_size": 500, "read_batch_rows": 500})
    make_db(s.db, mixed_records(400))
    resync(s, embedder=fake_embedder)
    fresh_bytes = dir_bytes(s.chroma_dir)
    churn_rounds(s, fake_embedder, 3)
    with SyncState(s.state_path) as state:
        old = state.get_meta(ACTIVE_COLLECTION)
        assert old and state.churn(old) >= 3 * 800 and due(s, state, old)
        live = state.live_docs(old)
    bloated = dir_bytes(s.chroma_dir)
    embedded_before = fake_embedder.embedded
    with stores.connect(s) as handle, SyncState(s.state_path) as state:
        result = compact(handle.client, s, state, fake_embedder.model_id, fake_embedder.dimension)
        assert not result.interrupted and result.copied == live and result.new != old
        assert state.get_meta(ACTIVE_COLLECTION) == result.new and state.churn(str(result.new)) == 0
        assert not due(s, state, str(result.new)) and state.live_docs(old) == 0
        names = [c if isinstance(c, str) else c.name for c in handle.client.list_collections()]
        assert old not in names
    assert fake_embedder.embedded == embedded_before  # nothing re-embedded
    report = verify(s)
    assert report.clean and report.in_chroma == live and report.duplicates == 0
    assert resync(s, embedder=fake_embedder).written == 0  # the copied records describe it exactly
    # chromadb leaves the dropped generation's files behind (upstream #5259); reclaim frees them.
    assert bloated > 1.2 * fresh_bytes and dir_bytes(s.chroma_dir) > bloated, (fresh_bytes, bloated)
    freed = reclaim(s.chroma_dir)
    after = dir_bytes(s.chroma_dir)
    assert freed > 0 and after < fresh_bytes * 1.2, (fresh_bytes, bloated, after)
    assert verify(s).clean and resync(s, embedder=fake_embedder).written == 0


def test_interrupted_compaction_is_continued_by_the_next(settings: Settings, fake_embedder: FakeEmbedder) -> None:
    import threading

    make_db(settings.db, mixed_records(30))
    resync(settings, embedder=fake_embedder)
    stop = threading.Event()
    stop.set()
    with stores.connect(settings) as handle, SyncState(settings.state_path) as state:
        first = compact(handle.client, settings, state, fake_embedder.model_id, fake_embedder.dimension, stop)
        assert first.interrupted and first.new is None
        assert verify(settings, client=handle.client).clean  # the old generation still serves
        # The half-built generation already holds a copy of prompt 1 ...
        building = stores.begin_rebuild(handle.client, settings, fake_embedder.model_id, fake_embedder.dimension)
        old = handle.client.get_collection(state.get_meta(ACTIVE_COLLECTION))
        got = old.get(ids=["prompt_1"], include=["embeddings", "metadatas"])
        building.upsert(ids=got["ids"], embeddings=got["embeddings"], metadatas=got["metadatas"])
    # ... and then prompt 1 is deleted and the deletion synced, before the compaction continues.
    conn = sqlite3.connect(settings.db)
    conn.execute("DELETE FROM user_prompts WHERE id = 1")
    conn.commit()
    conn.close()
    assert resync(settings, embedder=fake_embedder).deleted == 1
    with stores.connect(settings) as handle, SyncState(settings.state_path) as state:
        second = compact(handle.client, settings, state, fake_embedder.model_id, fake_embedder.dimension)
        assert not second.interrupted and second.new == building.name
        assert handle.client.get_collection(second.new).get(ids=["prompt_1"])["ids"] == []
        report = verify(settings, client=handle.client)
    assert report.clean and report.orphan == 0


def test_the_worker_compacts_by_itself_when_idle(tmp_path: Path) -> None:
    from tests.conftest import free_port

    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="managed",
                 chroma_port=free_port())
    make_db(s.db, mixed_records(5))
    env = settings_env(s, MEMSYNC_COMPACT_IDLE_S="0", MEMSYNC_COMPACT_MIN_CHURN="3",
                       MEMSYNC_COMPACT_CHURN_FRACTION="0.1")
    s.data_dir.mkdir(parents=True)
    with (s.data_dir / "worker.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "memsync", "worker", "--poll-interval", "0.2"], env=env,
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        try:
            def status() -> dict[str, object]:
                from memsync.config.formats.worker_status import read_worker_status

                return read_worker_status(s.data_dir) or {}

            deadline = time.monotonic() + 120
            while not status().get("reconciles"):
                assert time.monotonic() < deadline and proc.poll() is None, (s.data_dir / "worker.log").read_text()
                time.sleep(0.1)
            with SyncState(s.state_path) as state:
                first = state.get_meta(ACTIVE_COLLECTION)
            conn = sqlite3.connect(s.db)
            conn.execute("UPDATE observations SET narrative = narrative || ' edited'")
            conn.commit()
            conn.close()
            proc.send_signal(signal.SIGUSR1)  # reconcile now: the 5 edits become churn (5 of 35 live)
            deadline = time.monotonic() + 120
            while not status().get("compactions"):
                assert time.monotonic() < deadline and proc.poll() is None, (s.data_dir / "worker.log").read_text()
                time.sleep(0.1)
            with SyncState(s.state_path) as state:
                assert state.get_meta(ACTIVE_COLLECTION) != first
        finally:
            proc.terminate()
            assert proc.wait(60) == 0
    assert verify(s).clean
    log_text = (s.data_dir / "worker.log").read_text()
    assert '"event": "compacted"' in log_text and '"event": "space_reclaimed"' in log_text
