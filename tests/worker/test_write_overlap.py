"""A pass embeds the next range while the previous range's last upsert is in flight, yet its cursor
moves only once a range's writes are acknowledged and its rows marked; a write that fails leaves the
cursor before its range, and the pass that goes on from there ends exact."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.errors import StoreUnavailable
from memsync.config.formats.first_sync import Cursor, every_kind
from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.pipeline.sync import Destination, Syncer, SyncOptions
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SYNCED, SyncState
from tests.conftest import FakeEmbedder, make_db
from tests.worker.test_frontier import year_of_rows
from tests.worker.test_sync import RecordingSink

RANGE_ROWS = 8  # rows per range: 11 ranges over the 84 rows, one chunk each
OVERLAP_WAIT_S = 0.5  # how long an upsert waits to see the next embedding start (the last one never does)


class SignallingEmbedder(FakeEmbedder):
    """Counts the embedding calls begun and wakes whoever waits for the next one."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Condition()
        self.begun = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self.started:
            self.begun += 1
            self.started.notify_all()
        return super().embed(texts)


class OverlapProbe(RecordingSink):
    """A Chroma sink whose upsert holds on until the sync thread begins embedding the next chunk
    (at most ``OVERLAP_WAIT_S``), and says how often it saw that. Holding the acknowledgement back
    is what makes a cursor moved too early visible."""

    def __init__(self, inner: ChromaSink, embedder: SignallingEmbedder, fail_at: int | None = None) -> None:
        super().__init__(inner)
        self.embedder, self.fail_at = embedder, fail_at
        self.overlapped = 0
        self.calls = 0

    def upsert(self, ids: Sequence[str], embeddings: npt.NDArray[np.float32], metadatas: Sequence[dict[str, Any]],
               documents: Sequence[str] | None = None) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise StoreUnavailable("Chroma upsert failed: connection refused (test)")
        # Chunk n was embedded by call n (one call per chunk here): has call n + 1 begun?
        with self.embedder.started:
            if self.embedder.started.wait_for(lambda: self.embedder.begun > self.calls, OVERLAP_WAIT_S):
                self.overlapped += 1
        super().upsert(ids, embeddings, metadatas, documents)


def marked_above(state: SyncState, collection: str, cursor: Cursor) -> dict[Kind, set[int]]:
    """Per kind, the ids of rows recorded as synced above the cursor (a kind gone from it: all)."""
    out: dict[Kind, set[int]] = {}
    for kind, source_id, status, *_ in state.row_statuses(collection):
        k = Kind(kind)
        if status == SYNCED and source_id > cursor.get(k, 0):
            out.setdefault(k, set()).add(source_id)
    return out


def source_above(settings: Settings, cursor: Cursor) -> dict[Kind, set[int]]:
    with SourceReader(settings.db) as reader:
        return {k: {r.id for batch in reader.iter_rows(k, 100) for r in batch if r.id > cursor.get(k, 0)}
                for k in KINDS}


@pytest.fixture
def year(settings: Settings) -> Settings:
    make_db(settings.db, year_of_rows())
    return settings


def full_pass(settings: Settings, sink_of: Any, embedder: SignallingEmbedder, cursor: Cursor,
              moves: list[tuple[Cursor, dict[Kind, set[int]]]]) -> Any:
    """A full pass newest first from ``cursor`` (moved in place); each move recorded with the rows
    the records then hold as synced above it."""
    with stores.connect(settings) as handle:
        col = stores.open_collection(handle.client, settings, embedder.model_id, embedder.dimension)
        sink = sink_of(ChromaSink(col))
        with SourceReader(settings.db) as reader, SyncState(settings.state_path) as state:
            state.set_meta("active_collection", col.name)

            def moved(at: Cursor) -> None:
                moves.append((dict(at), marked_above(state, col.name, at)))

            options = SyncOptions(read_batch_rows=RANGE_ROWS, batch_size=256, moved=moved)
            try:
                return Syncer(reader, state, Destination(col.name, sink), embedder, options).run(resume=cursor), sink
            except StoreUnavailable as exc:
                return exc, sink


def test_the_next_range_is_embedded_while_an_upsert_is_in_flight_and_the_cursor_waits_for_it(
    year: Settings,
) -> None:
    embedder = SignallingEmbedder()
    cursor = every_kind()
    moves: list[tuple[Cursor, dict[Kind, set[int]]]] = []
    result, sink = full_pass(year, lambda inner: OverlapProbe(inner, embedder), embedder, cursor, moves)
    assert not result.interrupted and result.added == embedder.embedded == 144 and cursor == {}
    # 11 ranges, one upsert each; every kind's top range is waited for (its rows are the records'
    # watermarks), and the last has nothing after it: the 7 others overlapped the next embedding.
    assert sink.calls == 11 and sink.overlapped == 7
    assert len(moves) == 11
    for at, marked in moves:  # every row above the cursor was marked when the cursor got there
        assert marked == {k: v for k, v in source_above(year, at).items() if v}
    assert verify(year).clean


def test_a_failed_upsert_leaves_the_cursor_before_its_range_and_the_pass_goes_on_exact(year: Settings) -> None:
    embedder = SignallingEmbedder()
    cursor = every_kind()
    moves: list[tuple[Cursor, dict[Kind, set[int]]]] = []
    failed, _ = full_pass(year, lambda inner: OverlapProbe(inner, embedder, fail_at=6), embedder, cursor, moves)
    assert isinstance(failed, StoreUnavailable)
    # Moved in place up to the last range whose writes resolved: the failed range is below it.
    assert cursor == moves[-1][0] and all(at > 0 for at in cursor.values())
    with SyncState(year.state_path) as state:
        collection = state.get_meta("active_collection")
        assert collection is not None
        assert marked_above(state, collection, cursor) == {k: v for k, v in source_above(year, cursor).items() if v}
    again, _ = full_pass(year, lambda inner: OverlapProbe(inner, embedder), embedder, cursor, moves)
    assert not again.interrupted and cursor == {}
    assert verify(year).clean
