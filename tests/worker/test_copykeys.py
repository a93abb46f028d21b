"""The vector copy writer's key index (``worker.stores.copykeys``): packed keys, the sorted arrays and the
dict of recent keys against a plain dict, and its memory; and the writer using it across restarts,
rewrites and a corpus that deletes as much as it adds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.config.settings import Settings
from memsync.worker.seed.importer import import_records
from memsync.worker.stores import copykeys
from memsync.worker.stores.copykeys import ROW_MAX, ROW_MIN, KeyIndex, pack, pack_arrays, unpack
from memsync.worker.stores.vectorcopy import VectorCopyWriter
from tests.conftest import FakeEmbedder, make_db, mixed_records

MODEL, DIM = "test-model", 8

rows = st.one_of(st.integers(0, 10_000), st.integers(ROW_MIN, ROW_MAX), st.integers(-(2**63), 2**63 - 1))
keys = st.builds(pack, st.integers(0, 2), rows, st.integers(0, 40))


class TestPacking:
    @given(st.integers(0, 3), rows, st.integers(0, 2**16 - 1))
    def test_unpack_inverts_pack(self, kind: int, row: int, field: int) -> None:
        assert unpack(pack(kind, row, field)) == (kind, row, field)

    def test_arrays_pack_like_ints_and_sort_by_row(self) -> None:
        kind, row, field = np.array([2, 0, 1]), np.array([ROW_MAX, 5, ROW_MIN]), np.array([7, 0, 3])
        packed = pack_arrays(kind, row, field)
        assert packed.tolist() == [pack(2, ROW_MAX, 7), pack(0, 5, 0), pack(1, ROW_MIN, 3)]
        assert sorted(packed.tolist()) == [packed[2], packed[1], packed[0]]


class TestKeyIndex:
    def test_set_supersede_pop_and_get(self) -> None:
        index = KeyIndex()
        assert index.set(pack(0, 1, 0), 0) is None
        assert index.set(pack(0, 1, 0), 5) == 0  # superseded: the old position is returned (now dead)
        assert index.get(pack(0, 1, 0)) == 5 and len(index) == 1
        assert index.pop(pack(0, 1, 0)) == 5
        assert index.pop(pack(0, 1, 0)) is None and index.get(pack(0, 1, 0)) is None and len(index) == 0

    def test_keys_in_the_arrays_are_superseded_deleted_and_revived_in_place(self) -> None:
        index = KeyIndex()
        assert index.set_many(np.arange(100, dtype=np.int64), np.arange(100, dtype=np.int64) + 1000) == []
        assert index.set(7, 2000) == 1007
        assert index.pop(8) == 1008 and 8 not in index
        assert index.set(8, 2001) is None and index.get(8) == 2001
        assert len(index) == 100 and index.get(99) == 1099

    def test_set_many_keeps_the_last_of_equal_keys_and_reports_what_it_replaced(self) -> None:
        index = KeyIndex()
        index.set(3, 30)
        dead = index.set_many(np.array([1, 3, 1, 2], np.int64), np.array([100, 101, 102, 103], np.int64))
        assert sorted(dead) == [30, 100]
        assert [index.get(k) for k in (1, 2, 3)] == [102, 103, 101]

    def test_rows_too_large_for_an_int64_stay_in_the_dict(self) -> None:
        index = KeyIndex()
        huge = pack(1, 2**62, 3)
        index.set(huge, 1)
        index.set_many(np.arange(copykeys.MERGE_MIN * 2, dtype=np.int64), np.zeros(copykeys.MERGE_MIN * 2, np.int64))
        index.merge()
        assert index.get(huge) == 1 and huge in list(index)
        assert index.pop(huge) == 1 and len(index) == copykeys.MERGE_MIN * 2

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(["set", "pop", "many", "merge"]), keys, st.integers(0, 10**6)),
                    max_size=300))
    def test_behaves_like_a_dict(self, ops: list[tuple[str, int, int]]) -> None:
        index, model = KeyIndex(), {}
        for op, key, pos in ops:
            if op == "set":
                assert index.set(key, pos) == model.get(key)
                model[key] = pos
            elif op == "pop":
                assert index.pop(key) == model.pop(key, None)
            elif op == "many" and ROW_MIN <= key >> copykeys.ROW_SHIFT <= ROW_MAX:
                batch = np.array([key, key + 4, key], np.int64) if key + 4 < 2**63 else np.array([key], np.int64)
                before = {k: model[k] for k in set(batch.tolist()) if k in model}
                dead = index.set_many(batch, np.arange(len(batch), dtype=np.int64) + pos)
                for i, k in enumerate(batch.tolist()):
                    model[k] = pos + i
                assert sorted(dead) == sorted([*before.values(), *([pos] if len(batch) == 3 else [])])
            elif op == "merge":
                index.merge()
            assert len(index) == len(model)
        assert sorted(index) == sorted(model)
        assert all(index.get(k) == p for k, p in model.items())

    def test_memory_is_sixteen_bytes_a_key_after_a_merge(self) -> None:
        index = KeyIndex()
        n = 60_000
        for k in range(n):
            index.set(pack(k % 3, k, k % 5), k)
        assert len(index) == n
        assert index.nbytes <= 16 * n + 100 * max(copykeys.MERGE_MIN, n // copykeys.MERGE_SHARE)
        index.merge()
        assert index.nbytes == 16 * n

    def test_a_corpus_that_deletes_as_much_as_it_adds_keeps_its_size(self) -> None:
        index, n = KeyIndex(), 20_000
        for k in range(n):
            index.set(k, k)
        sizes = []
        for k in range(n, 6 * n):
            index.set(k, k)
            index.pop(k - n)
            if k % n == 0:
                sizes.append(index.nbytes)
        assert len(index) == n
        assert max(sizes) <= 16 * n + 100 * copykeys.MERGE_MIN + 16 * max(copykeys.MERGE_MIN, n // copykeys.MERGE_SHARE)


def put(w: VectorCopyWriter, ids: list[str], epoch: int = 1000) -> None:
    rng = np.random.default_rng(len(ids))
    w.put(ids, rng.standard_normal((len(ids), DIM)).astype(np.float32),
          [{"project": "p", "created_at_epoch": epoch + i} for i in range(len(ids))])


class TestWriterKeys:
    def test_keys_survive_a_restart_and_a_rewrite(self, tmp_path: Path) -> None:
        s = Settings(data_dir=tmp_path)
        w = VectorCopyWriter(s, "gen1", MODEL, DIM, fresh=True)
        put(w, [f"obs_{i}_narrative" for i in range(500)] + [f"prompt_{i}" for i in range(500)])
        put(w, [f"prompt_{i}" for i in range(0, 500, 2)], epoch=0)  # superseded: dead entries behind
        w.delete([f"obs_{i}_narrative" for i in range(100)])
        w.close()
        w = VectorCopyWriter(s, "gen1", MODEL, DIM, fresh=False)  # start-up: the bulk load
        expected = {f"obs_{i}_narrative" for i in range(100, 500)} | {f"prompt_{i}" for i in range(500)}
        assert set(w.doc_ids()) == expected
        result = w.reorder()
        assert (result.kept, result.dropped) == (900, 350)
        assert set(w.doc_ids()) == expected and w.missing(sorted(expected)) == []
        assert w.missing(["obs_5_narrative", "prompt_999"]) == ["obs_5_narrative", "prompt_999"]
        w.delete(["prompt_3"])
        put(w, ["prompt_4"])
        w.close()
        w = VectorCopyWriter(s, "gen1", MODEL, DIM, fresh=False)
        assert set(w.doc_ids()) == expected - {"prompt_3"}
        assert w.manifest.count == 901
        w.close()

    def test_row_ids_too_large_to_pack_in_an_int64_are_kept_too(self, tmp_path: Path) -> None:
        s = Settings(data_dir=tmp_path)
        huge = [f"prompt_{ROW_MAX + 1 + i}" for i in range(3)]
        w = VectorCopyWriter(s, "gen1", MODEL, DIM, fresh=True)
        put(w, [f"prompt_{i}" for i in range(100)] + huge)
        w.close()
        w = VectorCopyWriter(s, "gen1", MODEL, DIM, fresh=False)  # the bulk load, with a few one by one
        assert set(huge) <= set(w.doc_ids()) and len(w.doc_ids()) == 103
        w.delete(huge[:1])
        put(w, huge[1:2])  # superseded
        assert w.missing(huge) == huge[:1] and len(w.doc_ids()) == 102
        w.reorder()
        assert w.missing(huge) == huge[:1] and w.manifest.count == 102
        w.close()

    def test_a_constant_corpus_keeps_the_writers_memory(self, tmp_path: Path) -> None:
        w = VectorCopyWriter(Settings(data_dir=tmp_path), "gen1", MODEL, DIM, fresh=True)
        n, step = 5000, 500
        put(w, [f"prompt_{i}" for i in range(n)])
        sizes = []
        for start in range(n, 6 * n, step):
            put(w, [f"prompt_{i}" for i in range(start, start + step)])
            w.delete([f"prompt_{i}" for i in range(start - n, start - n + step)])
            if w.needs_reorder():
                w.reorder()
            sizes.append(w._keys.nbytes)
        assert len(w.doc_ids()) == n
        assert max(sizes) <= 16 * n + 100 * copykeys.MERGE_MIN + 16 * copykeys.MERGE_MIN
        assert w.manifest.count <= n * 1.5  # dead entries are rewritten away
        w.close()


class TestWorkerRewritesItsCopy:
    def test_a_busy_worker_rewrites_its_copy_when_due(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Rows arriving at every step (the worker is never idle) must not keep the copy from being
        rewritten: a corpus that deletes as much as it adds would otherwise grow its copy forever."""
        from memsync.worker.loop import daemon, maintenance
        from memsync.worker.stores import vectorcopy

        s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                     text_index=False)
        make_db(s.db, mixed_records(20))
        embedder = FakeEmbedder()
        monkeypatch.setattr(daemon, "make_embedder", lambda *a, **k: embedder)
        monkeypatch.setattr(vectorcopy, "REORDER_MIN", 10)
        monkeypatch.setattr(maintenance, "REORDER_CHECK_S", 0.0)
        worker = daemon.Worker(s)
        worker._start()
        try:
            worker.request_reconcile()
            worker.step()
            copy = worker._target.copy
            assert copy is not None and copy.manifest.layout == 1  # rewritten after the first pass
            for i in range(3):
                import_records(s.db, [{**r, "session": f"busy-{i}"} for r in mixed_records(10)])
                passes = worker.health.status.passes
                while worker.health.status.passes == passes:  # the tail may need a second look
                    worker.step()
                assert copy.manifest.layout == 2 + i and copy.manifest.ordered == copy.manifest.count
        finally:
            worker._shutdown()

