"""The local vector copy: writer and reader on real files, and kept in step with a real (embedded)
Chroma by resync, edits, deletes, compaction and a fill from Chroma (checked by ``verify``)."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import Kind
from memsync.config.formats.vector_copy import ENTRIES_FILE, LIVE_OFFSET, Manifest, copy_dir
from memsync.config.settings import Settings
from memsync.search.models import Filters, Window
from memsync.search.vectorcopy import VectorCopy
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.pipeline.sink import ChromaSink, MirroredSink
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.stores.compact import compact
from memsync.worker.stores.vectorcopy import VectorCopyWriter, fill_from_store, open_writer
from tests.conftest import FakeEmbedder, make_db, mixed_records

MODEL, DIM = "test-model", 8
ALL = Window(0, None, None, "all_time")


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def meta(project: str = "alpha", epoch: int = 1000, type_: str = "discovery", merged: str = "") -> dict[str, object]:
    return {"project": project, "merged_into_project": merged, "created_at_epoch": epoch, "type": type_}


def writer(tmp_path: Path, fresh: bool = True) -> VectorCopyWriter:
    return VectorCopyWriter(Settings(data_dir=tmp_path), "gen1", MODEL, DIM, fresh=fresh)


def reader(tmp_path: Path) -> VectorCopy | None:
    return VectorCopy.open(Settings(data_dir=tmp_path), "gen1", MODEL, DIM)


def nearest(copy: VectorCopy, q: np.ndarray, n: int = 10, kinds: tuple[Kind, ...] = tuple(Kind),
            filters: Filters | None = None, window: Window = ALL) -> list[tuple[Kind, int]]:
    hits, _ = copy.nearest(q, copy.candidates(kinds, filters or Filters(), window), n)
    return [(h.kind, h.id) for h in hits]


def test_ranks_like_float_cosine_within_filters(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vecs = unit(rng, 200)
    ids = [f"prompt_{i}" for i in range(200)]
    metas = [meta("alpha" if i % 2 else "beta", epoch=i) for i in range(200)]
    w = writer(tmp_path)
    w.put(ids, vecs, metas)
    copy = reader(tmp_path)
    assert copy is not None and len(copy) == 200
    q = vecs[7] * 0.6 + vecs[9] * 0.4
    q /= np.linalg.norm(q)
    exact = np.argsort(-(vecs @ q))
    assert nearest(copy, q, 5) == [(Kind.PROMPT, int(i)) for i in exact[:5]]
    hits, done = copy.nearest(q, copy.candidates(tuple(Kind), Filters(), ALL), 3)
    assert abs(hits[0].similarity - float(vecs[exact[0]] @ q)) < 0.02 and not done
    # Window and project before the cut: only odd ids (alpha) with epoch >= 150.
    got = nearest(copy, q, 100, filters=Filters(project="alpha"), window=Window(90, 150, None, "window"))
    expected = [int(i) for i in exact if i % 2 and i >= 150]
    assert got == [(Kind.PROMPT, i) for i in expected]
    assert nearest(copy, q, kinds=(Kind.OBSERVATION,)) == []
    assert nearest(copy, q, filters=Filters(project="nobody")) == []
    w.close()


def test_write_again_relabel_delete_and_merged_projects(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    a, b = unit(rng, 2)
    w = writer(tmp_path)
    w.put(["obs_1_narrative", "obs_2_narrative"], np.stack([a, b]), [meta(), meta(type_="bugfix")])
    w.put(["obs_1_narrative"], b[None, :], [meta()])  # edited text: the new vector wins
    copy = reader(tmp_path)
    assert copy is not None
    hits, _ = copy.nearest(b, copy.candidates(tuple(Kind), Filters(), ALL), 10)
    assert sorted(h.id for h in hits) == [1, 2] and all(h.similarity > 0.98 for h in hits)
    assert nearest(copy, b, filters=Filters(types=("bugfix",))) == [(Kind.OBSERVATION, 2)]
    w.relabel(["obs_2_narrative"], [meta("old", merged="alpha")])  # a project merge
    copy = reader(tmp_path)
    assert copy is not None
    assert nearest(copy, b, filters=Filters(project="alpha")) != []
    assert (Kind.OBSERVATION, 2) in nearest(copy, b, filters=Filters(project="old"))
    w.delete(["obs_1_narrative", "obs_9_title"])  # an absent id is ignored
    copy = reader(tmp_path)
    assert copy is not None and nearest(copy, a) == [(Kind.OBSERVATION, 2)]
    assert sorted(w.doc_ids()) == ["obs_2_narrative"]
    fields = list(w.manifest.fields)
    assert w.missing(["obs_2_fact_7", "obs_2_narrative"]) == ["obs_2_fact_7"]
    assert w.manifest.fields == fields  # a lookup never grows the code tables
    w.relabel(["obs_5_text"], [meta()])  # a document the copy lacks: no longer complete
    assert reader(tmp_path) is None and not w.complete
    w.close()


def test_a_short_write_is_completed_and_a_full_disk_fails_the_append_whole(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # os.pwrite may write part of its bytes and return the count without an error (a file system
    # filling up mid-write): an append must not count bytes that are not on disk.
    rng = np.random.default_rng(5)
    vecs = unit(rng, 40)
    real_pwrite = os.pwrite
    w = writer(tmp_path)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(os, "pwrite", lambda fd, data, offset: real_pwrite(fd, bytes(data)[:7], offset))
            w.put([f"prompt_{i}" for i in range(20)], vecs[:20], [meta(epoch=i) for i in range(20)])
        full = iter([True])  # one short write, then the disk is full

        def filling(fd: int, data: bytes, offset: int) -> int:
            if next(full, False):
                return real_pwrite(fd, bytes(data)[:len(data) // 2], offset)
            raise OSError(errno.ENOSPC, "No space left on device")

        with monkeypatch.context() as patched, pytest.raises(OSError, match="No space left"):
            patched.setattr(os, "pwrite", filling)
            w.put([f"prompt_{i}" for i in range(20, 40)], vecs[20:], [meta(epoch=i) for i in range(20, 40)])
        manifest = Manifest.read(copy_dir(Settings(data_dir=tmp_path), "gen1"))
        assert manifest is not None and manifest.count == 20  # the failed append is not counted
        w.put([f"prompt_{i}" for i in range(20, 40)], vecs[20:], [meta(epoch=i) for i in range(20, 40)])
    finally:
        w.close()
    copy = reader(tmp_path)
    assert copy is not None and len(copy) == 40
    for i in (0, 19, 20, 39):  # every vector whole, none a hole of zeros
        assert nearest(copy, vecs[i], 1) == [(Kind.PROMPT, i)]


@pytest.mark.parametrize("name", ["vectors.i8", ENTRIES_FILE])
def test_a_file_cut_short_under_its_writer_is_never_written_past_its_end(tmp_path: Path, name: str) -> None:
    # A write past the end of a file leaves a hole, and reading a hole through a mapping on a full
    # tmpfs is a SIGBUS in the reader: the writer fails instead, and its check discards the copy.
    rng = np.random.default_rng(9)
    w = writer(tmp_path)
    try:
        w.put([f"prompt_{i}" for i in range(200)], unit(rng, 200), [meta(epoch=i) for i in range(200)])
        path = copy_dir(Settings(data_dir=tmp_path), "gen1") / name
        short = path.with_name(name + ".short")
        short.write_bytes(path.read_bytes()[:101])
        os.replace(short, path)  # a shorter file (a new inode), as the soak damages a copy
        with pytest.raises(OSError, match="shorter than its manifest"):
            w.put(["prompt_900"], unit(rng, 1), [meta()])
        if name == ENTRIES_FILE:
            with pytest.raises(OSError, match="shorter than its manifest"):
                w.delete(["prompt_7"])  # a dead mark past the end would leave a hole too
        assert path.stat().st_size == 101  # nothing written past the end: no hole
        assert w.check() is not None
        w.discard("cut short")
        w.put(["prompt_1"], unit(rng, 1), [meta()])
        assert w.check() is None and w.doc_ids() == ["prompt_1"]
    finally:
        w.close()


def test_crash_leftovers_are_repaired_and_other_writers_seen(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    v = unit(rng, 3)
    first = writer(tmp_path)
    first.put(["prompt_1"], v[:1], [meta()])
    second = writer(tmp_path)  # e.g. a resync beside the worker
    second.put(["prompt_1", "prompt_2"], v[1:], [meta(), meta()])
    first.put(["prompt_3"], v[:1], [meta()])  # sees the second writer's entries first
    assert sorted(first.doc_ids()) == ["prompt_1", "prompt_2", "prompt_3"]
    # A crash between an append and its dead mark leaves two live entries for prompt_1.
    path = copy_dir(Settings(data_dir=tmp_path), "gen1") / ENTRIES_FILE
    with open(path, "r+b") as fh:
        fh.seek(0 * 34 + LIVE_OFFSET)
        fh.write(b"\x01")
        fh.seek(0, 2)
        fh.write(b"\xff" * 100)  # and a torn append past the manifest's count
    copy = reader(tmp_path)
    assert copy is not None and len(copy) == 4  # the torn bytes are not read
    third = writer(tmp_path)  # the next writer marks the older duplicate dead
    copy = reader(tmp_path)
    assert copy is not None
    hits = nearest(copy, v[0], 10)
    assert sorted(hits) == [(Kind.PROMPT, 1), (Kind.PROMPT, 2), (Kind.PROMPT, 3)]
    third.put(["prompt_4"], v[2:], [meta()])  # overwrites the torn bytes
    assert reader(tmp_path) is not None and sorted(third.doc_ids())[-1] == "prompt_4"
    for w in (first, second, third):
        w.close()


def test_another_model_or_an_incomplete_copy_is_not_used(tmp_path: Path) -> None:
    w = writer(tmp_path, fresh=False)  # a generation synced before memsync kept a copy
    w.put(["prompt_1"], unit(np.random.default_rng(4), 1), [meta()])
    assert reader(tmp_path) is None
    w.mark_complete()
    assert reader(tmp_path) is not None
    assert VectorCopy.open(Settings(data_dir=tmp_path), "gen1", "other-model", DIM) is None
    other = VectorCopyWriter(Settings(data_dir=tmp_path), "gen1", "other-model", DIM, fresh=True)
    assert other.doc_ids() == [] and Manifest.read(copy_dir(Settings(data_dir=tmp_path), "gen1")) is not None
    assert VectorCopy.open(Settings(data_dir=tmp_path), "gen1", "other-model", DIM) is not None
    w.close()
    other.close()


def test_off_means_no_copy_and_no_stale_one(settings: Settings, fake_embedder: FakeEmbedder) -> None:
    make_db(settings.db, mixed_records(3))
    resync(settings, embedder=fake_embedder)
    assert verify(settings).copy_drift == 0
    s = settings.model_copy(update={"vector_copy": False})
    resync(s, embedder=fake_embedder)  # a sync without the copy: the old one would go stale
    assert not copy_dir(s, _active(s)).exists()
    assert verify(s).copy_drift is None


def _active(s: Settings) -> str:
    with SyncState(s.state_path) as state:
        name = state.get_meta(ACTIVE_COLLECTION)
    assert name
    return name


def test_resync_edits_deletes_and_compaction_keep_the_copy_exact(settings: Settings,
                                                                 fake_embedder: FakeEmbedder) -> None:
    make_db(settings.db, mixed_records(20))
    resync(settings, embedder=fake_embedder)
    report = verify(settings)
    assert report.clean and report.copy_drift == 0
    conn = sqlite3.connect(settings.db)
    conn.execute("UPDATE observations SET narrative = 'rewritten narrative' WHERE id = 3")
    conn.execute("UPDATE observations SET merged_into_project = 'gamma' WHERE id = 4")  # a relabel
    conn.execute("DELETE FROM user_prompts WHERE id = 5")
    conn.commit()
    conn.close()
    result = resync(settings, embedder=fake_embedder)
    assert result.updated and result.deleted
    report = verify(settings)
    assert report.clean and report.copy_drift == 0, report.examples
    copy = VectorCopy.open(settings, _active(settings), fake_embedder.model_id, fake_embedder.dimension)
    assert copy is not None
    gamma = copy.candidates(tuple(Kind), Filters(project="gamma"), ALL)
    assert len(gamma) and {int(copy._entries[i]["row"]) for i in gamma} == {4}
    old = _active(settings)
    with stores.connect(settings) as handle, SyncState(settings.state_path) as state:
        done = compact(handle.client, settings, state, fake_embedder.model_id, fake_embedder.dimension)
    assert done.new and not copy_dir(settings, old).exists()
    report = verify(settings)
    assert report.clean and report.copy_drift == 0, report.examples
    # Drift is reported: a document dropped from the copy behind its back.
    with SyncState(settings.state_path) as state:
        w = open_writer(settings, state, done.new, fake_embedder.model_id, fake_embedder.dimension)
    assert w is not None
    w.delete(["prompt_1"])
    w.close()
    report = verify(settings)
    assert not report.clean and report.copy_drift == 1 and report.examples["copy_drift"] == ["prompt_1"]


def test_a_generation_without_a_copy_is_filled_from_chroma(settings: Settings, fake_embedder: FakeEmbedder) -> None:
    s = settings.model_copy(update={"vector_copy": False})
    make_db(s.db, mixed_records(15))
    resync(s, embedder=fake_embedder)
    name = _active(s)
    with stores.connect(settings) as handle, SyncState(settings.state_path) as state:
        collection = stores.open_collection(handle.client, settings, fake_embedder.model_id, fake_embedder.dimension)
        w = open_writer(settings, state, name, fake_embedder.model_id, fake_embedder.dimension)
        assert w is not None and not w.complete
        acknowledged = state.acknowledged_ids(name)
        assert not fill_from_store(w, collection, acknowledged, budget=20)  # a slice at a time
        assert VectorCopy.open(settings, name, fake_embedder.model_id, fake_embedder.dimension) is None
        assert fill_from_store(w, collection, acknowledged)
        w.close()
    report = verify(settings)
    assert report.clean and report.copy_drift == 0
    # A plain resync fills a copy too (a data directory from before the copy existed).
    vectors_dir = settings.data_dir / "vectors"
    for path in sorted(vectors_dir.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    assert resync(settings, embedder=fake_embedder).written == 0
    assert verify(settings).copy_drift == 0


def _full_disk(*args: object, **kwargs: object) -> None:
    raise OSError(28, "No space left on device")


def test_a_copy_write_that_fails_is_dropped_and_rebuilt_by_the_next_pass(
        settings: Settings, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is written through a MirroredSink: a failed write leaves Chroma and the records
    whole, declares the copy incomplete (searches use Chroma), drops it for the rest of the pass
    and tells its owner once; the next pass fills it from Chroma again."""
    from structlog.testing import capture_logs

    from memsync.worker.process import logs

    make_db(settings.db, mixed_records(6))
    logs.configure()  # before capturing: a first configuration inside would replace the capture

    with monkeypatch.context() as patched, capture_logs() as logged:
        patched.setattr(VectorCopyWriter, "put", _full_disk)
        first = resync(settings, embedder=fake_embedder)
    failed = [e for e in logged if e["event"] == "vector_copy_failed"]
    assert first.added > 0 and [e["op"] for e in failed] == ["put"]
    assert VectorCopy.open(settings, _active(settings), fake_embedder.model_id, fake_embedder.dimension) is None
    assert verify(settings).in_chroma == first.added
    assert resync(settings, embedder=fake_embedder).written == 0  # filled from Chroma, nothing re-embedded
    assert verify(settings).copy_drift == 0


def test_a_mirrored_sink_tells_its_owner_once_and_then_writes_the_store_alone(
        settings: Settings, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    make_db(settings.db, mixed_records(2))
    resync(settings, embedder=fake_embedder)
    name = _active(settings)
    dropped: list[str] = []

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("damaged entries")

    monkeypatch.setattr(VectorCopyWriter, "delete", broken)
    with stores.connect(settings) as handle, SyncState(settings.state_path) as state:
        collection = stores.open_collection(handle.client, settings, fake_embedder.model_id, fake_embedder.dimension)
        w = open_writer(settings, state, name, fake_embedder.model_id, fake_embedder.dimension)
        assert w is not None and w.complete
        mirror = MirroredSink(ChromaSink(collection), w, on_drop=lambda: dropped.append("dropped"))
        before = mirror.count()
        mirror.delete(["prompt_1"])
        mirror.delete(["prompt_2"])  # the copy is no longer asked
        assert mirror.copy is None and dropped == ["dropped"] and not w.complete
        assert mirror.count() == before - 2
        w.close()


def test_the_daemon_reopens_a_copy_its_pass_dropped_and_fills_it_without_embedding(
        settings: Settings, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy write that fails in the worker's pass closes the worker's copy (the mirror's
    ``on_drop``); the step still succeeds, the copy check after the full pass opens the copy again
    and idle steps fill it from Chroma: nothing is embedded again and the copy ends level with the store."""
    from structlog.testing import capture_logs

    from memsync.worker.loop import daemon
    from memsync.worker.process import logs

    make_db(settings.db, mixed_records(6))
    logs.configure()  # before capturing: a first configuration inside would replace the capture
    monkeypatch.setattr(daemon, "make_embedder", lambda *a, **k: fake_embedder)

    worker = daemon.Worker(settings)
    worker._start()
    try:
        worker.request_reconcile()
        worker._ensure_open()
        dropped = worker._target.copy
        assert dropped is not None
        with monkeypatch.context() as patched, capture_logs() as logged:
            patched.setattr(VectorCopyWriter, "put", _full_disk)
            worker.step()
        assert [e["op"] for e in logged if e["event"] == "vector_copy_failed"] == ["put"]
        assert not worker.health.status.degraded and worker.health.status.passes == 1
        reopened = worker._target.copy
        assert reopened is not None and reopened is not dropped and not reopened.complete
        embedded = fake_embedder.embedded
        assert embedded > 0
        for _ in range(5):  # the check reopens it, then an idle step fills it
            worker.step()
            if worker._target.copy is not None and worker._target.copy.complete:
                break
        assert worker._target.copy is not None and worker._target.copy.complete
        assert fake_embedder.embedded == embedded  # filled from Chroma, nothing re-embedded
    finally:
        worker._shutdown()
    assert VectorCopy.open(settings, _active(settings), fake_embedder.model_id, fake_embedder.dimension) is not None
    report = verify(settings)
    assert report.clean and report.copy_drift == 0, report


@pytest.mark.parametrize("n", [1, 4097])
def test_chunked_scoring_matches_one_product(tmp_path: Path, n: int) -> None:
    rng = np.random.default_rng(5)
    vecs = unit(rng, n)
    w = writer(tmp_path)
    w.put([f"prompt_{i}" for i in range(n)], vecs, [meta()] * n)
    copy = reader(tmp_path)
    assert copy is not None
    hits, done = copy.nearest(vecs[-1], copy.candidates(tuple(Kind), Filters(), ALL), n)
    assert done and len(hits) == n and hits[0].id == n - 1
    w.close()


@pytest.mark.parametrize("every", [1, 3])  # 1: a dense span, scored in blocks; 3: gathered positions
def test_a_scan_split_over_two_threads_scores_every_document_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   every: int) -> None:
    monkeypatch.setattr("memsync.search.vectorcopy.PARALLEL_MIN", 64)
    monkeypatch.setattr("memsync.search.vectorcopy.CHUNK", 50)  # parts end inside and between chunks
    rng = np.random.default_rng(6)
    n = 1001
    vecs = unit(rng, n)
    w = writer(tmp_path)
    w.put([f"prompt_{i}" for i in range(n)], vecs, [meta(epoch=i) for i in range(n)])
    copy = reader(tmp_path)
    assert copy is not None
    positions = np.arange(0, n, every, dtype=np.intp)
    q = vecs[501]
    hits, done = copy.nearest(q, positions, len(positions))
    assert done and sorted(h.id for h in hits) == positions.tolist() and hits[0].id == 501
    assert max(abs(h.similarity - float(vecs[h.id] @ q)) for h in hits if h.similarity > 0) < 0.02
    monkeypatch.setattr("memsync.search.vectorcopy.PARALLEL_MIN", 10**9)  # the same scan on one thread
    alone, _ = copy.nearest(q, positions, len(positions))
    # The same scores (BLAS may round the last bit differently where a part starts mid-chunk).
    one = {h.id: h.similarity for h in alone}
    assert one.keys() == {h.id for h in hits} and all(abs(one[h.id] - h.similarity) < 1e-6 for h in hits)
    w.close()


def _answers(copy: VectorCopy, queries: np.ndarray) -> list[list[tuple[Kind, int]]]:
    windows = [ALL, Window(90, 5_000, None, "window"), Window(90, 2_000, 6_000, "window")]
    return [nearest(copy, q, 20, filters=f, window=w) for q in queries for w in windows
            for f in (Filters(), Filters(project="alpha"))]


def test_reorder_drops_the_dead_sorts_by_date_and_changes_no_answer(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("memsync.worker.stores.vectorcopy.REORDER_MIN", 100)
    rng = np.random.default_rng(11)
    n = 600
    vecs = unit(rng, n)
    epochs = rng.permutation(n) * 17  # written out of date order, as a first sync of several kinds is
    w = writer(tmp_path)
    w.put([f"prompt_{i}" for i in range(n)], vecs, [meta("alpha" if i % 3 else "beta", int(epochs[i]))
                                                    for i in range(n)])
    w.delete([f"prompt_{i}" for i in range(0, n, 4)])  # a quarter dead
    w.relabel(["prompt_1"], [meta("gamma", int(epochs[1]))])
    other = writer(tmp_path)  # another process's writer, opened before the rewrite
    before = reader(tmp_path)
    assert before is not None
    queries = unit(rng, 4)
    expected = _answers(before, queries)
    assert w.needs_reorder()
    result = w.reorder()
    assert (result.kept, result.dropped) == (n - n // 4, n // 4 + 1)  # the relabel left one more dead
    assert not w.needs_reorder()
    after = reader(tmp_path)
    assert after is not None and after.manifest.layout == 1
    assert after.manifest.count == after.manifest.ordered == n - n // 4
    assert np.all(np.diff(np.asarray(after._entries["epoch"])) >= 0)
    assert sorted(p.name for p in copy_dir(Settings(data_dir=tmp_path), "gen1").iterdir()) == [
        "entries.1.bin", "lock", "manifest.json", "vectors.1.i8"]
    assert _answers(after, queries) == expected
    assert _answers(before, queries) == expected  # a reader that mapped the old files keeps them
    # The other writer follows the new positions: its delete and write land on the right entries.
    other.delete(["prompt_2"])
    other.put(["prompt_3"], vecs[5:6], [meta("alpha", 10**6)])
    assert "prompt_2" not in other.doc_ids()
    latest = reader(tmp_path)
    assert latest is not None
    assert nearest(latest, vecs[5], 1, window=Window(90, 10**6, None, "window")) == [(Kind.PROMPT, 3)]
    assert (Kind.PROMPT, 2) not in nearest(latest, vecs[2], n)
    w.close()
    other.close()


def test_a_window_reads_the_ordered_slice_and_the_tail_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    n = 400
    vecs = unit(rng, n + 100)
    w = writer(tmp_path)
    w.put([f"prompt_{i}" for i in range(n)], vecs[:n], [meta("alpha" if i % 2 else "beta", int(rng.integers(0, 10_000)))
                                                        for i in range(n)])
    w.reorder()
    # Appended after the rewrite: new rows, and edits of old rows with old dates (out of order).
    w.put([f"prompt_{i}" for i in range(n, n + 100)], vecs[n:], [meta("alpha", int(rng.integers(0, 12_000)))
                                                                 for _ in range(100)])
    w.put([f"prompt_{i}" for i in range(0, 50)], vecs[:50], [meta("beta", int(rng.integers(0, 10_000)))
                                                             for _ in range(50)])
    copy = reader(tmp_path)
    assert copy is not None and copy.manifest.ordered == n and copy.manifest.count == n + 150
    e = np.asarray(copy._entries)
    for start, end in [(None, None), (2_000, None), (None, 3_000), (4_000, 4_500), (11_000, None), (0, 0)]:
        for project in (None, "alpha"):
            window = Window(90, start, end, "window")
            got = copy.candidates(tuple(Kind), Filters(project=project), window)
            mask = e["live"] == 1
            if start is not None:
                mask &= e["epoch"] >= start
            if end is not None:
                mask &= e["epoch"] <= end
            if project is not None:
                mask &= e["project"] == copy.manifest.projects.index(project)
            assert got.tolist() == np.flatnonzero(mask).tolist(), (start, end, project)
    w.close()


def test_a_crashed_rewrite_leaves_the_copy_as_it_was(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    vecs = unit(rng, 50)
    w = writer(tmp_path)
    w.put([f"prompt_{i}" for i in range(50)], vecs, [meta(epoch=i) for i in range(50)])
    w.close()
    directory = copy_dir(Settings(data_dir=tmp_path), "gen1")
    # Killed while writing the next layout. mapped-file write reviewed: new files no manifest names, so unmapped
    (directory / "vectors.1.i8").write_bytes(b"\x01" * 100)  # mapped-file write reviewed: as above
    (directory / "entries.1.bin").write_bytes(b"\x02" * 10)  # mapped-file write reviewed: as above
    again = writer(tmp_path)
    assert not (directory / "vectors.1.i8").exists() and not (directory / "entries.1.bin").exists()
    copy = reader(tmp_path)
    assert copy is not None and nearest(copy, vecs[7], 1) == [(Kind.PROMPT, 7)]
    again.close()


def test_resync_leaves_the_copy_in_date_order(settings: Settings, fake_embedder: FakeEmbedder,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("memsync.worker.stores.vectorcopy.REORDER_MIN", 1)  # this corpus is small
    make_db(settings.db, mixed_records(20))
    resync(settings, embedder=fake_embedder)
    copy = VectorCopy.open(settings, _active(settings), fake_embedder.model_id, fake_embedder.dimension)
    assert copy is not None and copy.manifest.ordered == copy.manifest.count > 0
    assert np.all(np.diff(np.asarray(copy._entries["epoch"])) >= 0)
    report = verify(settings)
    assert report.clean and report.copy_drift == 0


def test_searches_reuse_one_mapping_until_the_copy_changes(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    w = writer(tmp_path)
    w.put(["prompt_1", "prompt_2"], unit(rng, 2), [meta(), meta()])
    first, second = reader(tmp_path), reader(tmp_path)
    assert first is not None and second is not None
    assert np.shares_memory(first._vectors, second._vectors)  # the same pages, not a second mapping
    w.delete(["prompt_1"])  # a mark in place: seen through the mapping already held
    third = reader(tmp_path)
    assert third is not None and np.shares_memory(first._vectors, third._vectors)
    assert [h.id for h in third.nearest(unit(rng, 1)[0], third.candidates(tuple(Kind), Filters(), ALL), 5)[0]] == [2]
    w.put(["prompt_3"], unit(rng, 1), [meta()])  # appended: mapped again, with the new entry
    fourth = reader(tmp_path)
    assert fourth is not None and len(fourth) == 3 and not np.shares_memory(first._vectors, fourth._vectors)
    w.close()
