"""The vector copy's block checksums: recorded as vectors are appended (and rewritten), checked a
slice at a time by the worker and whole by ``status``, ``verify`` and ``worker --once``. Random
bytes written over the vectors file, its size unchanged, are found and the copy is rebuilt; a copy
of the previous format (no block checksums) gets them recorded, not a rebuild."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from memsync.config.formats import vector_copy
from memsync.config.formats.vector_copy import (
    MANIFEST_FILE,
    Manifest,
    block_count,
    copy_dir,
    vector_checksums,
    vectors_damage,
    vectors_file,
)
from memsync.config.settings import Settings
from memsync.main import main
from memsync.search.vectorcopy import VectorCopy
from memsync.worker.checks.status import status
from memsync.worker.checks.verify import verify
from memsync.worker.loop import maintenance
from memsync.worker.loop.maintenance import CopyCheck, fill_copy
from memsync.worker.pipeline.target import SyncTarget
from memsync.worker.rows.state import SyncState
from memsync.worker.stores.vectorcopy import VectorCopyWriter
from tests.conftest import FakeEmbedder
from tests.worker.test_derived_repair import _active, _once, _search, overwrite, synced

__all__ = ["synced"]  # the fixture, shared with the other damage tests

DIM = 4
BLOCK = 8  # vectors per block in these tests: many blocks from a few documents


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_copy, "BLOCK", BLOCK)


def _put(w: VectorCopyWriter, ids: range, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    w.put([f"prompt_{i}" for i in ids], rng.standard_normal((len(ids), w.dim)).astype(np.float32),
          [{"project": "alpha", "created_at_epoch": 1000 - i} for i in ids])


def _file_blocks(directory: Path, m: Manifest) -> list[int]:
    """The crc32 of each block of the first ``count`` vectors, from the file itself."""
    data = (directory / vectors_file(m.layout)).read_bytes()[:m.count * m.dim]
    step = BLOCK * m.dim
    return [zlib.crc32(data[i:i + step]) for i in range(0, len(data), step)]


def _flip(directory: Path, m: Manifest, vector: int) -> None:
    """One byte of one vector changed in place (the file's size unchanged)."""
    path = directory / vectors_file(m.layout)
    with open(path, "r+b") as fh:
        fh.seek(vector * m.dim + 1)
        byte = fh.read(1)
        fh.seek(vector * m.dim + 1)
        fh.write(bytes([byte[0] ^ 0x5A]))


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[VectorCopyWriter]:
    w = VectorCopyWriter(Settings(data_dir=tmp_path), "gen1", "m", DIM, fresh=True)
    yield w
    w.close()


class TestChecksums:
    @pytest.mark.parametrize("splits", [[3], [8], [5, 3, 1, 9, 20], [1] * 17, [40]])
    def test_appending_in_any_pieces_gives_the_checksums_of_whole_blocks(self, splits: list[int]) -> None:
        rng = np.random.default_rng(1)
        vectors = rng.integers(-127, 128, (sum(splits), DIM), dtype=np.int8)
        blocks: list[int] = []
        start = 0
        for n in splits:
            blocks = vector_checksums(blocks, start, vectors[start:start + n])
            start += n
        raw = vectors.tobytes()
        step = BLOCK * DIM
        assert blocks == [zlib.crc32(raw[i:i + step]) for i in range(0, len(raw), step)]
        assert len(blocks) == block_count(len(vectors))

    def test_the_writer_records_them_as_it_appends_relabels_and_marks_dead(self, writer: VectorCopyWriter) -> None:
        _put(writer, range(0, 5))
        _put(writer, range(5, 21), seed=1)
        writer.relabel(["prompt_2", "prompt_9"], [{"project": "beta"}] * 2)  # copies two vectors to the end
        writer.delete(["prompt_4"])  # a dead mark: the vectors stay as they were
        m = Manifest.read(writer.dir)
        assert m is not None and m.count == 23 and m.blocks == _file_blocks(writer.dir, m)
        assert writer.check_vectors(0, None) == (None, 0)
        assert json.loads((writer.dir / MANIFEST_FILE).read_text())["version"] == 4

    def test_a_rewrite_computes_them_for_its_new_files(self, writer: VectorCopyWriter,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("memsync.worker.stores.vectorcopy.REWRITE_CHUNK", 5)  # chunks across block bounds
        _put(writer, range(0, 30))
        writer.delete([f"prompt_{i}" for i in range(0, 30, 3)])
        result = writer.reorder()
        m = Manifest.read(writer.dir)
        assert result is not None and result.kept == 20 and m is not None and m.layout == 1
        assert m.blocks == _file_blocks(writer.dir, m) and vectors_damage(writer.dir, m) is None


class TestDamage:
    def test_a_changed_byte_is_named_with_its_block_by_the_slice_that_reads_it(self,
                                                                              writer: VectorCopyWriter) -> None:
        _put(writer, range(0, 40))  # 5 blocks
        m = Manifest.read(writer.dir)
        assert m is not None
        _flip(writer.dir, m, 27)  # block 3
        assert writer.check() is None  # the entries' checksum never covered the vectors
        assert writer.check_vectors(0, 2) == (None, 2)
        reason, nxt = writer.check_vectors(2, 2)
        assert reason == f"{vectors_file(0)} does not match its checksum (block 3: vectors 24-31)" and nxt == 0
        assert vectors_damage(writer.dir, m) == reason
        assert vectors_damage(writer.dir, m, 4) is None  # blocks after it agree

    def test_the_slices_reach_the_end_then_start_again(self, writer: VectorCopyWriter) -> None:
        _put(writer, range(0, 20))  # 3 blocks, the last one partial
        assert writer.check_vectors(0, 2) == (None, 2)
        assert writer.check_vectors(2, 2) == (None, 0)
        assert writer.check_vectors(7, 2) == (None, 2)  # beyond the end (the copy was rewritten): from 0

    def test_a_copy_replaced_while_another_process_checks_it_is_not_damage(self, writer: VectorCopyWriter) -> None:
        _put(writer, range(0, 20))
        seen = Manifest.read(writer.dir)
        assert seen is not None
        writer.discard("test")  # e.g. the worker's rebuild between status reading the manifest and the file
        _put(writer, range(100, 130), seed=5)
        assert vectors_damage(writer.dir, seen) is None

    def test_a_rewrite_discards_a_damaged_copy_instead_of_giving_its_damage_checksums(
            self, writer: VectorCopyWriter) -> None:
        _put(writer, range(0, 30))
        writer.delete([f"prompt_{i}" for i in range(10)])
        m = Manifest.read(writer.dir)
        assert m is not None
        _flip(writer.dir, m, 12)
        with capture_logs() as logged:
            assert writer.reorder() is None
        assert [e for e in logged if e["event"] == "vector_copy_damaged"]
        assert not writer.complete and writer.doc_ids() == []


class TestPreviousFormat:
    def test_a_version_3_copy_gets_its_block_checksums_recorded_not_rebuilt(self, tmp_path: Path) -> None:
        s = Settings(data_dir=tmp_path)
        w = VectorCopyWriter(s, "gen1", "m", DIM, fresh=True)
        _put(w, range(0, 20))
        w.close()
        path = copy_dir(s, "gen1") / MANIFEST_FILE
        old = json.loads(path.read_text())
        path.write_text(json.dumps({**{k: v for k, v in old.items() if k != "vectors_crc"}, "version": 3}))
        v3 = Manifest.read(copy_dir(s, "gen1"))
        assert v3 is not None and v3.blocks is None and v3.count == 20
        assert vectors_damage(copy_dir(s, "gen1"), v3) is None  # nothing to compare: not damage
        assert VectorCopy.open(s, "gen1", "m", DIM) is not None
        with capture_logs() as logged:
            w = VectorCopyWriter(s, "gen1", "m", DIM, fresh=False)
        try:
            assert not [e for e in logged if e["event"] == "vector_copy_damaged"]
            again = Manifest.read(copy_dir(s, "gen1"))
            assert again is not None and again.blocks == old["vectors_crc"] and again.count == 20 and again.complete
            _flip(copy_dir(s, "gen1"), again, 3)  # from now on, damage is found
            assert w.check_vectors(0, None)[0] is not None
        finally:
            w.close()


class TestWorkerCheck:
    def test_the_workers_check_reads_a_slice_a_step_then_finds_and_discards(
            self, synced: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
        s = synced
        m = Manifest.read(copy_dir(s, _active(s)))
        assert m is not None and block_count(m.count) >= 4
        monkeypatch.setattr(maintenance, "BLOCK", BLOCK)
        monkeypatch.setattr(maintenance, "COPY_CHECK_SLICE", BLOCK * m.dim)  # one block a step
        check = CopyCheck()
        target = SyncTarget(s, FakeEmbedder())
        try:
            with SyncState(s.state_path) as state:
                assert target.open(state) and target.copy is not None and target.copy.complete
                _flip(copy_dir(s, _active(s)), m, m.count - 1)  # the last block, under the open writer
                with capture_logs() as logged:
                    assert check.due(target) is False  # the writer checked as it opened: one period first
                    check.soon()
                    steps = 0
                    while check.due(target) and not logged:
                        check.run(target, state)
                        steps += 1
                assert steps == block_count(m.count)
                damaged = [e for e in logged if e["event"] == "vector_copy_damaged"]
                assert damaged and f"block {block_count(m.count) - 1}" in str(damaged[0]["reason"])
                assert not check.due(target)  # the cycle ended: the next one a period later
                assert not target.copy.complete
                fill_copy(target, state, budget=None)
                assert target.copy.complete
        finally:
            target.close()
        assert verify(s).clean


class TestReports:
    def test_status_verify_and_search_before_and_worker_once_after(self, synced: Settings) -> None:
        s = synced
        directory = copy_dir(s, _active(s))
        m = Manifest.read(directory)
        assert m is not None and m.blocks
        size = (directory / vectors_file(m.layout)).stat().st_size
        overwrite(directory / vectors_file(m.layout), np.random.default_rng(9).bytes(size))
        assert (directory / vectors_file(m.layout)).stat().st_size == size
        st = status(s).vector_copy
        assert st["complete"] is False and "does not match its checksum" in st["damaged"]
        report = verify(s)
        assert not report.clean and report.copy_damaged and vectors_file(m.layout) in report.copy_damaged
        opts = ["--db", str(s.db), "--data-dir", str(s.data_dir), "--chroma-mode", "embedded"]
        named = f"({vectors_file(m.layout)} does not match its checksum (block "
        ver = CliRunner().invoke(main, ["verify", *opts], catch_exceptions=False)
        assert ver.exit_code == 1 and f"vector copy damaged {named}" in ver.stdout
        st_text = CliRunner().invoke(main, ["status", *opts], catch_exceptions=False)
        assert f"vector copy: damaged {named}" in st_text.stdout and "the worker rebuilds it" in st_text.stdout
        logged = _once(s)
        assert [e for e in logged if e["event"] == "vector_copy_damaged"]
        assert [e for e in logged if e["event"] == "vector_copy_filled"]
        report = verify(s)
        assert report.clean and report.copy_drift == 0 and report.copy_damaged is None, report
        assert "damaged" not in status(s).vector_copy and status(s).vector_copy["complete"]
        mode, reason, n = _search(s)
        assert n and "vector copy" not in reason
