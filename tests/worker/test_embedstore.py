"""The embedding store: no text is embedded twice by the same model, whatever path the sync takes
(a rebuild, a re-derived document, identical texts), vectors of another model are never reused,
garbage goes with the documents, and a bad entry is embedded again. Real SQLite files, real
embedded Chroma, a fake embedder that records what it was asked to embed."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from structlog.testing import capture_logs

from memsync.chroma import collections as stores
from memsync.config.formats.embedding_store import decode, encode, roundtrip, store_path
from memsync.config.settings import Settings
from memsync.embedding import vector_identity
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.resync import resync
from memsync.worker.process import logs
from memsync.worker.rows.state import SyncState
from memsync.worker.stores import embedstore
from memsync.worker.stores.embedstore import GC_GRACE_S, EmbeddingStore, collect_garbage
from scripts.bench_sync import documents_of
from tests.conftest import FakeEmbedder, make_db, mixed_records, obs, prompt, summary

REPEATED = "yes, do that"


class RecordingEmbedder(FakeEmbedder):
    """The fake embedder, remembering every text it was asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.texts += list(texts)
        return super().embed(texts)


class OtherModel(RecordingEmbedder):
    """Another model: other vectors for the same texts."""

    model_id = "other-model"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return -super().embed(texts)


def with_repeats() -> list[dict[str, Any]]:
    """Rows whose documents repeat texts: the same prompt five times, a fact twice in one list and
    once from another row, a summary field equal to a prompt."""
    return [
        *mixed_records(6),
        *[prompt(100 + i, prompt_text=REPEATED) for i in range(5)],
        obs(200, facts=["same fact", "same fact", "fact 1.0"]),
        summary(300, request=REPEATED),
    ]


def chroma_vectors(settings: Settings) -> dict[str, npt.NDArray[np.float32]]:
    """Every vector of the active generation, by document id."""
    with stores.connect(settings) as handle:
        got = stores.open_active(handle.client, settings).get(include=["embeddings"])
    return {i: np.asarray(e, dtype=np.float32) for i, e in zip(got["ids"], got["embeddings"], strict=True)}


def stored_per_model(settings: Settings) -> dict[str, int]:
    conn = sqlite3.connect(store_path(settings))
    try:
        return dict(conn.execute("SELECT m.model, COUNT(*) FROM vectors v JOIN models m ON m.id = v.model "
                                 "GROUP BY m.model"))
    finally:
        conn.close()


def text_hash_of(settings: Settings, doc_id: str) -> str:
    with SyncState(settings.state_path) as state:
        return str(state._conn.execute("SELECT text_hash FROM docs WHERE doc_id = ?", (doc_id,)).fetchone()[0])


def collect_now(settings: Settings, later_s: int = GC_GRACE_S + 1) -> embedstore.Collected:
    """A collection as it would run ``later_s`` from now (past the grace of fresh vectors)."""
    with EmbeddingStore(store_path(settings)) as store, SyncState(settings.state_path) as state:
        return collect_garbage(store, state, now_s=int(time.time()) + later_s)


class TestReuse:
    def test_rebuild_with_the_same_model_embeds_nothing_and_writes_the_same_vectors(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        first = resync(settings, embedder=RecordingEmbedder())
        before = chroma_vectors(settings)
        embedder = RecordingEmbedder()
        rebuilt = resync(settings, rebuild=True, embedder=embedder)
        assert rebuilt.added == first.added == 84 and rebuilt.reused == 84
        assert rebuilt.embedded == embedder.embedded == 0
        after = chroma_vectors(settings)
        assert after.keys() == before.keys()
        assert all(np.array_equal(after[k], before[k]) for k in before)  # bit for bit
        assert verify(settings).clean

    def test_identical_texts_are_embedded_once(self, settings: Settings) -> None:
        make_db(settings.db, with_repeats())
        texts = documents_of(settings)
        embedder = RecordingEmbedder()
        result = resync(settings, embedder=embedder)
        assert result.added == len(texts) and len(set(texts)) < len(texts)
        assert sorted(embedder.texts) == sorted(set(texts))  # each distinct text once, across kinds and batches
        assert result.embedded == len(set(texts)) and result.reused == len(texts) - len(set(texts))
        vectors = chroma_vectors(settings)
        repeated = [vectors[f"prompt_{i}"] for i in range(7, 12)]  # the five REPEATED prompts (ids after 6)
        assert all(np.array_equal(v, repeated[0]) for v in repeated)
        assert verify(settings).clean

    def test_changed_text_is_embedded_and_nothing_else(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        resync(settings, embedder=FakeEmbedder())
        conn = sqlite3.connect(settings.db)
        with conn:
            conn.execute("UPDATE observations SET narrative = 'A narrative nobody wrote before' WHERE id = 3")
        conn.close()
        embedder = RecordingEmbedder()
        again = resync(settings, embedder=embedder)
        assert again.updated == 1 and embedder.texts == ["Fix bug 2\nin module 2\nA narrative nobody wrote before"]

    def test_a_fact_that_moved_to_another_index_is_not_embedded_again(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        resync(settings, embedder=FakeEmbedder())
        conn = sqlite3.connect(settings.db)
        with conn:  # the first fact removed: obs_3_fact_0 now holds what obs_3_fact_1 held
            conn.execute("UPDATE observations SET facts = ? WHERE id = 3", (json.dumps(["fact 2.1"]),))
        conn.close()
        embedder = RecordingEmbedder()
        again = resync(settings, embedder=embedder)
        assert (again.updated, again.deleted, again.reused, embedder.embedded) == (1, 1, 1, 0)
        assert verify(settings).clean

    def test_a_different_model_embeds_everything(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        resync(settings, embedder=FakeEmbedder())
        other = OtherModel()
        rebuilt = resync(settings, rebuild=True, embedder=other)
        assert rebuilt.added == rebuilt.embedded == other.embedded == 84 and rebuilt.reused == 0
        fake = FakeEmbedder()
        vectors = chroma_vectors(settings)
        assert np.allclose(vectors["prompt_1"], -fake.embed(["Please look at problem 0"])[0], atol=1e-3)
        assert stored_per_model(settings) == {"all-MiniLM-L6-v2-int8": 84, "other-model": 84}

    def test_identity_tells_apart_what_makes_vectors_differ(self) -> None:
        class Local(FakeEmbedder):
            def __init__(self, max_tokens: int) -> None:
                super().__init__()
                self.max_tokens = max_tokens

        assert vector_identity(Local(256)) == vector_identity(Local(256))
        assert vector_identity(Local(256)) != vector_identity(Local(128))
        assert vector_identity(FakeEmbedder()) != vector_identity(OtherModel())
        assert vector_identity(FakeEmbedder()).startswith("local|all-MiniLM-L6-v2-int8|dim=384")


@pytest.mark.slow  # churns the store until GC runs: 8-45 s
class TestGarbageCollection:
    def test_removes_unreferenced_vectors_and_keeps_referenced_ones(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        resync(settings, embedder=FakeEmbedder())
        gone = text_hash_of(settings, "obs_3_narrative")
        conn = sqlite3.connect(settings.db)
        with conn:
            conn.execute("UPDATE observations SET narrative = 'Rewritten' WHERE id = 3")
            conn.execute("DELETE FROM user_prompts WHERE id = 5")
        conn.close()
        with capture_logs() as logged:
            resync(settings, embedder=FakeEmbedder())  # collects at its end, within the grace
        assert [e["removed"] for e in logged if e["event"] == logs.EMBEDDING_STORE_COLLECTED] == [0]
        assert stored_per_model(settings) == {"all-MiniLM-L6-v2-int8": 85}
        collected = collect_now(settings)
        assert collected.removed == 2 and collected.kept == 83 == len(set(documents_of(settings)))
        with EmbeddingStore(store_path(settings)) as store:
            model = store.model(vector_identity(FakeEmbedder()), FakeEmbedder.model_id)
            assert model is not None and store.get(model, [gone], 384) == {}
        embedder = RecordingEmbedder()
        rebuilt = resync(settings, rebuild=True, embedder=embedder)  # what is referenced was kept
        assert rebuilt.added == 83 and embedder.embedded == 0

    def test_records_rebuilt_from_the_store_name_their_texts_again(self, settings: Settings) -> None:
        """state.db lost: its records come back from Chroma without text hashes (worker.pipeline.target);
        the next pass names the texts again, so the collection keeps every vector."""
        make_db(settings.db, mixed_records(12))
        resync(settings, embedder=FakeEmbedder())
        for p in settings.state_path.parent.glob(settings.state_path.name + "*"):
            p.unlink()
        again = resync(settings, embedder=FakeEmbedder())
        assert again.written == 0 and again.unchanged == 84
        assert collect_now(settings).removed == 0
        assert resync(settings, rebuild=True, embedder=RecordingEmbedder()).embedded == 0

    def test_rebuild_to_another_model_lets_the_old_vectors_go(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        resync(settings, embedder=FakeEmbedder())
        resync(settings, rebuild=True, embedder=OtherModel())
        collect_now(settings)
        assert stored_per_model(settings) == {"other-model": 84}

    def test_worker_collects_after_a_full_pass_that_deleted_documents(
        self, settings: Settings, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from memsync.worker.loop import daemon

        make_db(settings.db, mixed_records(12))
        embedder = FakeEmbedder()
        monkeypatch.setattr(daemon, "make_embedder", lambda *a, **k: embedder)
        monkeypatch.setattr(embedstore, "GC_GRACE_S", -60)  # no grace: what no record names goes now
        daemon.Worker(settings).once()
        assert stored_per_model(settings) == {"all-MiniLM-L6-v2-int8": 84}
        conn = sqlite3.connect(settings.db)
        with conn:
            conn.execute("DELETE FROM observations WHERE id = 4")
        conn.close()
        with capture_logs() as logged:
            result = daemon.Worker(settings).once()
        assert result.deleted == 3
        assert [e["removed"] for e in logged if e["event"] == logs.EMBEDDING_STORE_COLLECTED] == [3]
        assert stored_per_model(settings) == {"all-MiniLM-L6-v2-int8": 81}

    def test_disk_stays_bounded_by_the_documents(self, settings: Settings) -> None:
        """Freed pages go back to the file system (auto_vacuum incremental)."""
        make_db(settings.db, mixed_records(300))
        resync(settings, embedder=FakeEmbedder())
        full = store_path(settings).stat().st_size
        conn = sqlite3.connect(settings.db)
        with conn:
            conn.execute("DELETE FROM observations WHERE id > 30")
            conn.execute("DELETE FROM session_summaries WHERE id > 30")
        conn.close()
        resync(settings, embedder=FakeEmbedder())
        collected = collect_now(settings)
        assert collected.kept == len(set(documents_of(settings)))
        assert store_path(settings).stat().st_size < full * 0.5


class TestBadEntries:
    def test_a_corrupted_or_wrong_size_entry_is_embedded_again_and_overwritten(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        resync(settings, embedder=FakeEmbedder())
        flipped, short = text_hash_of(settings, "obs_3_narrative"), text_hash_of(settings, "prompt_2")
        conn = sqlite3.connect(store_path(settings))
        with conn:
            blob = bytearray(conn.execute("SELECT vec FROM vectors WHERE text_hash = ?",
                                          (bytes.fromhex(flipped),)).fetchone()[0])
            blob[10] ^= 0x40  # one bit: the checksum no longer matches
            conn.execute("UPDATE vectors SET vec = ? WHERE text_hash = ?", (bytes(blob), bytes.fromhex(flipped)))
            # A well-formed vector of another length (as another model's would be): never used.
            wrong = encode(np.full(256, 1 / 16, dtype=np.float32))
            conn.execute("UPDATE vectors SET vec = ? WHERE text_hash = ?", (wrong, bytes.fromhex(short)))
        conn.close()
        embedder = RecordingEmbedder()
        with capture_logs() as logged:
            rebuilt = resync(settings, rebuild=True, embedder=embedder)
        assert sorted(embedder.texts) == ["Fix bug 2\nin module 2\nNarrative number 2 about caching.",
                                          "Please look at problem 1"]
        assert rebuilt.embedded == 2 and rebuilt.reused == 82
        assert sum(e["entries"] for e in logged if e["event"] == logs.EMBEDDING_STORE_BAD_ENTRIES) == 2
        vectors = chroma_vectors(settings)
        fresh = roundtrip(FakeEmbedder().embed(["Please look at problem 1"]))[0]
        assert np.allclose(vectors["prompt_2"], fresh, rtol=0, atol=1e-7)  # Chroma's float32 round trip
        again = RecordingEmbedder()
        assert resync(settings, rebuild=True, embedder=again).embedded == 0  # overwritten with good ones

    def test_a_store_file_that_is_not_a_database_is_replaced(self, settings: Settings) -> None:
        make_db(settings.db, mixed_records(12))
        settings.data_dir.mkdir(parents=True)
        store_path(settings).write_bytes(b"not a database " * 100)
        with capture_logs() as logged:
            first = resync(settings, embedder=FakeEmbedder())
        assert sum(e["event"] == logs.EMBEDDING_STORE_DAMAGED for e in logged) == 1
        assert first.embedded == 84
        assert resync(settings, rebuild=True, embedder=FakeEmbedder()).embedded == 0

    def test_a_writer_holding_the_lock_costs_only_the_write(self, settings: Settings) -> None:
        """The worker and a resync share the file: a write that cannot get the lock in time is
        skipped (logged), lookups go on (WAL), and nothing raises."""
        path = store_path(settings)
        vector = roundtrip(FakeEmbedder().embed(["a text"]))[0]
        with EmbeddingStore(path, busy_timeout_ms=50) as store:
            model = store.model("local|x|dim=384", "x")
            assert model is not None
            store.put(model, [("00" * 16, vector)])
            other = sqlite3.connect(path)
            other.execute("BEGIN IMMEDIATE")  # another process in the middle of its write
            try:
                with capture_logs() as logged:
                    store.put(model, [("11" * 16, vector)])
                    got = store.get(model, ["00" * 16, "11" * 16], 384)
            finally:
                other.rollback()
                other.close()
            assert [e["op"] for e in logged if e["event"] == logs.EMBEDDING_STORE_FAILED] == ["put"]
            assert list(got) == ["00" * 16] and np.array_equal(got["00" * 16], vector)
            store.put(model, [("11" * 16, vector)])
            assert len(store.get(model, ["00" * 16, "11" * 16], 384)) == 2


class TestFormat:
    def test_float16_loses_nothing_measurable_on_unit_vectors(self) -> None:
        vectors = FakeEmbedder().embed([f"text {i}" for i in range(2000)])
        back = np.stack([v for v in (decode(encode(x), 384) for x in vectors) if v is not None])
        assert np.array_equal(back, roundtrip(vectors))
        cosine = (back * vectors).sum(axis=1) / np.linalg.norm(back, axis=1)
        assert cosine.min() > 0.999_999 and float(np.abs(back - vectors).max()) < 5e-4

    @pytest.mark.parametrize("damage", ["short", "long", "checksum", "nan"])
    def test_an_entry_that_cannot_be_trusted_decodes_to_none(self, damage: str) -> None:
        vector = FakeEmbedder().embed(["x"])[0]
        blob = encode(vector)
        if damage == "short":
            blob = blob[:-6] + blob[-4:]
        elif damage == "long":
            blob = encode(np.concatenate([vector, vector[:1]]))
        elif damage == "checksum":
            blob = blob[:-1] + bytes([blob[-1] ^ 1])
        else:
            blob = encode(np.full(384, np.nan, dtype=np.float32))
        assert decode(blob, 384) is None


def test_setting_off_embeds_every_document_as_before(settings: Settings) -> None:
    off = settings.model_copy(update={"embedding_store": False})
    make_db(off.db, with_repeats())
    texts = documents_of(off)
    embedder = RecordingEmbedder()
    first = resync(off, embedder=embedder)
    assert first.added == first.embedded == len(texts) and first.reused == 0
    assert sorted(embedder.texts) == sorted(texts)  # repeats and all
    rebuilt = resync(off, rebuild=True, embedder=RecordingEmbedder())
    assert rebuilt.embedded == len(texts)
    assert not store_path(off).exists()
