"""Derived files damaged on disk: the vector copy (vectors.i8 / entries.bin
truncated, entries.bin garbage) and the text index (tantivy's meta.json, a segment file deleted or
garbled). After each: nothing raises, searches answer and say honestly what answered, status and
verify report the damage, one ``worker --once`` pass repairs it, and verify is clean again."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from memsync.config.claude_mem.schema import Kind
from memsync.config.formats.text_index import index_path, unreadable
from memsync.config.formats.vector_copy import ENTRIES_FILE, MANIFEST_FILE, VECTORS_FILE, Manifest, copy_dir
from memsync.config.settings import Settings
from memsync.main import main
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.search.textindex import TextIndex
from memsync.search.vectorcopy import VectorCopy
from memsync.servers.render import header
from memsync.worker.checks.status import status
from memsync.worker.checks.verify import verify
from memsync.worker.loop import daemon
from memsync.worker.loop.maintenance import CopyCheck, fill_copy
from memsync.worker.pipeline.target import SyncTarget
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.stores import textsync
from memsync.worker.stores.textsync import TextSync
from memsync.worker.stores.vectorcopy import VectorCopyWriter
from tests.conftest import FakeEmbedder, make_db, mixed_records

ROWS = 8  # per kind
MODEL, DIM = FakeEmbedder.model_id, FakeEmbedder.dimension


def _active(s: Settings) -> str:
    with SyncState(s.state_path) as state:
        name = state.get_meta(ACTIVE_COLLECTION)
    assert name
    return name


@pytest.fixture
def synced(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A database synced by the worker's own pass: Chroma, the vector copy and the text index."""
    make_db(settings.db, mixed_records(ROWS))
    embedder = FakeEmbedder()
    monkeypatch.setattr(daemon, "make_embedder", lambda *a, **k: embedder)
    daemon.Worker(settings.model_copy(update={"batch_size": 256})).once()  # chunks of 5 are not tested here
    report = verify(settings)
    assert report.clean and report.copy_drift == 0 and report.copy_damaged is None
    return settings


def _search(s: Settings, mode: Mode = Mode.HYBRID) -> tuple[Mode, str, int]:
    """A search that reads both derived files: a project filter (the vector copy answers it)."""
    engine = Searcher(s, embedder=FakeEmbedder())
    try:
        resp = engine.search(SearchRequest(query="caching", filters=Filters(project="alpha"), window_days=0, mode=mode))
        return resp.mode, resp.reason or "", len(resp.results)
    finally:
        engine.close()


def _once(s: Settings) -> list[dict[str, object]]:
    with capture_logs() as logged:
        daemon.Worker(s).once()
    return logged


def overwrite(path: Path, data: bytes) -> None:
    """Replace a file's bytes in place, as damage on disk does: never shorter for a moment, so no
    reader that mapped it (the search's cached copy, tantivy's segments) can fault past its end."""
    with open(path, "r+b") as fh:
        fh.write(data)


def _damage_copy(s: Settings, how: str) -> None:
    directory = copy_dir(s, _active(s))
    manifest = Manifest.read(directory)
    assert manifest is not None and manifest.count > 10 and manifest.crc is not None
    # Cut short in place on purpose: this process's search mapped these very inodes, and must map a
    # file of another size again rather than read its cached mapping (search.vectorcopy._mapped).
    # Safe here: that search returned (no thread reads the mapping), and the mapping is used again
    # only after a stat shows the same size.
    if how == "truncate_vectors":
        with open(directory / VECTORS_FILE, "r+b") as fh:
            fh.truncate(manifest.dim * (manifest.count // 2))  # mapped-file write reviewed: see above
    elif how == "truncate_entries":
        with open(directory / ENTRIES_FILE, "r+b") as fh:
            fh.truncate(32 * 3 + 5)  # mapped-file write reviewed: see above
    else:  # garbage in place of every entry, the same size
        size = (directory / ENTRIES_FILE).stat().st_size
        overwrite(directory / ENTRIES_FILE, np.random.default_rng(7).bytes(size))


class TestVectorCopyDamage:
    @pytest.mark.parametrize("how", ["truncate_vectors", "truncate_entries", "garbage_entries"])
    def test_damaged_copy_is_reported_unused_and_rebuilt_by_one_pass(self, synced: Settings, how: str) -> None:
        s = synced
        mode, reason, n = _search(s)
        assert mode is Mode.HYBRID and "vector copy" not in reason and n
        _damage_copy(s, how)
        copy, why = VectorCopy.open_checked(s, _active(s), MODEL, DIM)
        assert copy is None and why
        # Search: Chroma answers the filtered side, and the reason says why.
        mode, reason, n = _search(s)
        assert mode is Mode.HYBRID and n and "semantic: Chroma (vector copy damaged" in reason
        # Status and verify name the damage (not "documents differ").
        st = status(s).vector_copy
        assert st["damaged"] and st["complete"] is False
        report = verify(s)
        assert not report.clean and report.copy_damaged and report.copy_drift is None
        assert report.missing == report.orphan == report.stale == 0
        # One worker pass discards the copy (logged) and fills it again from Chroma.
        logged = _once(s)
        assert [e for e in logged if e["event"] == "vector_copy_damaged"]
        assert [e for e in logged if e["event"] == "vector_copy_filled"]
        report = verify(s)
        assert report.clean and report.copy_drift == 0 and report.copy_damaged is None, report
        copy, why = VectorCopy.open_checked(s, _active(s), MODEL, DIM)
        assert copy is not None and why is None and len(copy) >= 7 * ROWS
        assert "damaged" not in status(s).vector_copy
        mode, reason, n = _search(s)
        assert mode is Mode.HYBRID and "vector copy" not in reason and n

    @pytest.mark.parametrize("how", ["truncate_entries", "garbage_entries"])
    def test_the_running_workers_check_discards_a_copy_damaged_under_it_and_reopens_a_closed_one(
            self, synced: Settings, how: str) -> None:
        s = synced
        target = SyncTarget(s, FakeEmbedder())
        try:
            with SyncState(s.state_path) as state:
                assert target.open(state) and target.copy is not None and target.copy.complete
                _damage_copy(s, how)
                if how == "truncate_entries":
                    target.close_copy()  # as after a write that failed on the short file (worker.pipeline.sync)
                with capture_logs() as logged:
                    CopyCheck().run(target, state)
                assert [e for e in logged if e["event"] == "vector_copy_damaged"]
                assert target.copy is not None and not target.copy.complete
                fill_copy(target, state, budget=None)
                assert target.copy.complete
        finally:
            target.close()
        report = verify(s)
        assert report.clean and report.copy_drift == 0, report

    def test_a_copy_damaged_under_its_running_writer_is_found_by_the_check_and_discarded(self,
                                                                                        tmp_path: Path) -> None:
        s = Settings(data_dir=tmp_path)
        w = VectorCopyWriter(s, "gen1", "m", 4, fresh=True)
        try:
            rng = np.random.default_rng(3)
            w.put([f"prompt_{i}" for i in range(50)], rng.standard_normal((50, 4)).astype(np.float32),
                  [{"project": "alpha", "created_at_epoch": i} for i in range(50)])
            w.delete(["prompt_3"])  # marking dead in place keeps the checksum
            assert w.check() is None and VectorCopy.open(s, "gen1", "m", 4) is not None
            entries = copy_dir(s, "gen1") / ENTRIES_FILE
            data = bytearray(entries.read_bytes())
            data[40] ^= 0xFF  # one byte of the second entry's epoch: its codes are still valid
            overwrite(entries, bytes(data))
            assert w.check() == "entries.bin does not match its checksum"
            assert VectorCopy.open(s, "gen1", "m", 4) is None
            w.discard("test")
            assert not w.complete and w.doc_ids() == [] and w.check() is None
        finally:
            w.close()

    def test_a_version_2_manifest_is_checked_by_size_and_codes_and_gets_its_checksum(self, tmp_path: Path) -> None:
        s = Settings(data_dir=tmp_path)
        w = VectorCopyWriter(s, "gen1", "m", 4, fresh=True)
        w.put([f"prompt_{i}" for i in range(20)], np.ones((20, 4), np.float32), [{"project": "a"}] * 20)
        w.close()
        path = copy_dir(s, "gen1") / MANIFEST_FILE
        old = json.loads(path.read_text())
        path.write_text(json.dumps({**{k: v for k, v in old.items() if k != "entries_crc"}, "version": 2}))
        v2 = Manifest.read(copy_dir(s, "gen1"))
        assert v2 is not None and v2.crc is None
        assert VectorCopy.open(s, "gen1", "m", 4) is not None  # no checksum to compare: sizes and codes
        w = VectorCopyWriter(s, "gen1", "m", 4, fresh=False)  # records it, no rebuild
        w.close()
        again = Manifest.read(copy_dir(s, "gen1"))
        assert again is not None and again.crc == old["entries_crc"] and again.count == 20 and again.complete


def _damage_index(s: Settings, how: str) -> None:
    path = index_path(s)
    segments = sorted(p for p in path.iterdir() if p.suffix in (".idx", ".term", ".store"))
    assert segments
    if how == "meta_json":
        (path / "meta.json").write_text("{garbage")
    elif how == "meta_json_deleted":  # a reader must not create an empty index in its place
        (path / "meta.json").unlink()
    elif how == "delete_segment":
        segments[0].unlink()
    elif how == "garble_postings":  # random bytes at an offset of the postings, size and footer kept
        postings = next(p for p in segments if p.suffix == ".idx")
        size = postings.stat().st_size
        with open(postings, "r+b") as fh:
            fh.seek(size // 4)
            fh.write(os.urandom(min(512, size // 2)))
    else:
        overwrite(segments[0], os.urandom(segments[0].stat().st_size))


def garble_in_place(s: Settings) -> None:
    """Flip bytes inside the largest postings file and put its mtime back: size, inode and mtime
    as they were (bit rot), so no stat shows it."""
    postings = max((p for p in index_path(s).iterdir() if p.suffix == ".idx"), key=lambda p: p.stat().st_size)
    st = postings.stat()
    with open(postings, "r+b") as fh:
        fh.seek(st.st_size // 4)
        data = fh.read(16)
        fh.seek(st.st_size // 4)
        fh.write(bytes(b ^ 0xFF for b in data))
    os.utime(postings, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = postings.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def wait_removed(path: Path, seconds: float = 10.0) -> None:
    """``shutil.rmtree(path)``, tried again while something still writes into the directory."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            shutil.rmtree(path)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)

class TestTextIndexDamage:
    @pytest.mark.parametrize("how", ["meta_json", "meta_json_deleted", "delete_segment", "garble_segment",
                                     "garble_postings"])
    def test_damaged_index_is_named_in_search_and_status_and_rebuilt_by_one_pass(self, synced: Settings,
                                                                                 how: str) -> None:
        s = synced
        assert status(s).text_index["answers"] == "text index"
        _damage_index(s, how)
        index, why = TextIndex.open_checked(s)
        assert index is None and why
        for mode in (Mode.HYBRID, Mode.LEXICAL):
            answered, reason, n = _search(s, mode)
            assert answered is mode and n and "lexical: FTS5 (text index unreadable, rebuilding" in reason
        assert (index_path(s) / "meta.json").exists() is (how != "meta_json_deleted")  # no reader created one
        st = status(s).text_index
        assert st["answers"] == "FTS5" and st["damaged"] and st["rebuilding"] is False  # no worker is up
        assert "no worker is running to rebuild it" in st["why"]
        assert verify(s).text_index_damaged == st["damaged"] and not verify(s).clean
        logged = _once(s)
        rebuilding = [e for e in logged if e["event"] == "text_index_rebuilding"]
        assert len(rebuilding) == 1 and rebuilding[0]["reason"]
        assert not [e for e in logged if e["event"] == "text_index_failed"]
        assert unreadable(index_path(s)) is None
        st = status(s).text_index
        assert st["answers"] == "text index" and st["pending_rows"] == 0 and "damaged" not in st
        answered, reason, n = _search(s)
        assert answered is Mode.HYBRID and n and "FTS5" not in reason
        assert verify(s).clean

    def test_a_refresh_that_fails_is_said_by_status_while_the_worker_runs(
            self, synced: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
        # A refresh that fails every time was a log line only: status said the index was up to date
        # or not built yet, while every search matched words through FTS5.
        s = synced
        opts = ["--db", str(s.db), "--data-dir", str(s.data_dir)]
        worker = daemon.Worker(s)
        try:
            with monkeypatch.context() as broken:
                broken.setattr(textsync.TextIndexWriter, "refresh",
                               lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left on device")))
                assert worker._text_step(force_full=True) is False
            assert "No space left on device" in (worker.health.status.text_index_error or "")
            worker.health.status.heartbeat_ms = int(time.time() * 1000)  # as the running loop writes it
            worker.health.status.write(s.data_dir)
            st = status(s).text_index  # built before: it still answers, as last refreshed
            assert st["answers"] == "text index" and "No space left on device" in st["failing"]
            out = CliRunner().invoke(main, ["status", *opts], catch_exceptions=False).stdout
            assert ("text index: failing (OSError: [Errno 28] No space left on device): the worker's refreshes "
                    "fail, searches use it as last refreshed, 0 newer rows through FTS5") in out
            assert worker._text_step(force_full=True) is True  # the disk has room again
            assert worker.health.status.text_index_error is None
            worker.health.status.write(s.data_dir)
            assert "failing" not in status(s).text_index
        finally:
            worker._text.close()

    def test_an_index_damaged_under_the_running_writer_is_rebuilt_at_its_full_refresh(self, tmp_path: Path) -> None:
        s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", chroma_port=9,
                     text_index_append_s=0)
        make_db(s.db, mixed_records(3))
        text = TextSync(s)
        try:
            assert text.step(force_full=True) is not None
            _damage_index(s, "delete_segment")
            with capture_logs() as logged:
                result = text.step(force_full=True)
            assert result is not None and set(result.rebuilt) == {k.value for k in Kind}
            assert [e["event"] for e in logged if e["event"].startswith("text_index")][0] == "text_index_rebuilding"
        finally:
            text.close()
        index, why = TextIndex.open_checked(s)
        assert index is not None and why is None

    @pytest.mark.parametrize("how", ["garble_postings", "meta_json_deleted"])
    def test_the_running_writer_finds_damage_at_its_next_step_without_a_full_refresh(self, tmp_path: Path,
                                                                                     how: str) -> None:
        # Each step compares memsync's record with tantivy's meta.json and checks the checksums of
        # the files that changed since it last looked: no wait for the reconcile interval.
        s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", chroma_port=9,
                     text_index_append_s=3600)
        make_db(s.db, mixed_records(3))
        text = TextSync(s)
        try:
            assert text.step(force_full=True) is not None
            assert text.step() is None  # nothing due, nothing wrong
            _damage_index(s, how)
            with capture_logs() as logged:
                result = text.step()
            assert result is not None and set(result.rebuilt) == {k.value for k in Kind}
            assert [e["event"] for e in logged if e["event"].startswith("text_index")][0] == "text_index_rebuilding"
        finally:
            text.close()
        assert unreadable(index_path(s)) is None

    def test_damage_keeping_size_and_mtime_is_found_by_the_running_writers_next_full_check(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # Bit rot: the stat the per-step check remembers does not move, so only a full check, which
        # recomputes every checksum, can find it; the worker's reconcile (SIGUSR1 too) asks for one.
        s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", chroma_port=9,
                     text_index_append_s=3600)
        make_db(s.db, mixed_records(3))
        monkeypatch.setattr(daemon, "make_embedder", lambda *a, **k: FakeEmbedder())
        worker = daemon.Worker(s)
        text = worker._text  # the worker's own, as its loop steps it
        try:
            assert text.step(force_full=True) is not None
            assert text.step() is None  # nothing due: this look remembers every file as whole
            garble_in_place(s)
            assert text.step() is None  # the remembered stat matches: the per-step check cannot see it
            assert unreadable(index_path(s)) is not None  # a new process (status, verify) does
            worker.request_reconcile()  # what SIGUSR1 and the reconcile job call
            with capture_logs() as logged:
                result = text.step()
            assert result is not None and set(result.rebuilt) == {k.value for k in Kind}
            assert [e["event"] for e in logged if e["event"].startswith("text_index")][0] == "text_index_rebuilding"
        finally:
            text.close()
        assert unreadable(index_path(s)) is None

    @pytest.mark.parametrize("then", ["reconcile", "retry"])
    def test_a_failed_writer_still_finds_damage_at_the_next_reconcile_or_retry(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, then: str) -> None:
        # The database gone during a reconcile closes the writer; with the database back and idle,
        # nothing is due by change, yet the index is checked and rebuilt at the next reconcile,
        # or at the retry due after a failure without one.
        s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", chroma_port=9,
                     text_index_append_s=3600)
        make_db(s.db, mixed_records(3))
        text = TextSync(s)
        try:
            assert text.step(force_full=True) is not None
            if then == "retry":
                monkeypatch.setattr(textsync, "RETRY_S", 0.0)  # the full refresh after a failure is due at once
            away = tmp_path / "away.db"
            s.db.rename(away)
            text.request_full()
            with capture_logs() as logged:
                assert text.step() is None
            assert [e for e in logged if e["event"] == "text_index_failed"]
            away.rename(s.db)
            garble_in_place(s)  # kept size and mtime: found by a full check only
            if then == "reconcile":
                assert text.step() is None  # idle and its retry not due yet: nothing looked at
                text.request_full()
            with capture_logs() as logged:
                result = text.step()
            assert result is not None and set(result.rebuilt) == {k.value for k in Kind}
            assert [e["event"] for e in logged if e["event"].startswith("text_index")][0] == "text_index_rebuilding"
        finally:
            text.close()
        assert unreadable(index_path(s)) is None

    def test_a_garbled_memsync_meta_file_is_reported_and_rebuilt(self, tmp_path: Path) -> None:
        s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", chroma_port=9,
                     text_index_append_s=0)
        make_db(s.db, mixed_records(3))
        TextSync(s).step(force_full=True)
        (index_path(s) / "memsync-meta.json").write_text("{not json")
        assert TextIndex.open_checked(s) == (None, "its meta file is unreadable")
        text = TextSync(s)
        with capture_logs() as logged:
            assert text.step(force_full=True) is not None
        text.close()
        assert [e for e in logged if e["event"] == "text_index_rebuilding"]
        assert TextIndex.open(s) is not None
        # A merge the closed writer abandoned may still write its last file in tantivy's background
        # thread (TextIndexWriter.close does not wait for it): remove the directory once it is still.
        wait_removed(index_path(s))
        assert TextIndex.open_checked(s) == (None, None)  # never built: no damage to report


def test_the_command_line_and_the_json_name_what_answered_and_what_is_damaged(synced: Settings) -> None:
    s = synced
    _damage_copy(s, "garbage_entries")
    _damage_index(s, "garble_segment")
    engine = Searcher(s, embedder=FakeEmbedder())
    try:
        resp = engine.search(SearchRequest(query="caching", filters=Filters(project="alpha"), window_days=0))
    finally:
        engine.close()
    assert resp.mode is Mode.HYBRID and resp.results
    shown = header(resp, 0)
    assert shown.startswith("mode: hybrid (") and "lexical: FTS5 (text index unreadable, rebuilding" in shown
    assert "semantic: Chroma (vector copy damaged" in shown
    assert resp.to_json()["reason"] == resp.reason
    opts = ["--db", str(s.db), "--data-dir", str(s.data_dir), "--chroma-mode", "embedded"]
    st = CliRunner().invoke(main, ["status", *opts], catch_exceptions=False)
    assert "text index: damaged (" in st.stdout and "lexical searches use FTS5 meanwhile" in st.stdout
    assert "); no worker is running to rebuild it (`memsync worker --once` does); lexical" in st.stdout
    assert "vector copy: damaged (entries.bin" in st.stdout and "the worker rebuilds it" in st.stdout
    out = CliRunner().invoke(main, ["status", "--json", *opts], catch_exceptions=False)
    text_index = json.loads(out.stdout)["text_index"]
    assert text_index["answers"] == "FTS5" and text_index["damaged"]
    ver = CliRunner().invoke(main, ["verify", *opts], catch_exceptions=False)
    assert ver.exit_code == 1 and "vector copy damaged (entries.bin" in ver.stdout and "differ" not in ver.stdout
    assert "; text index damaged (" in ver.stdout and "the worker discards and rebuilds it" in ver.stdout
