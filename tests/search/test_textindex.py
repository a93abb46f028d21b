"""memsync's text index (tantivy) on real claude-mem files: what it holds, how it follows the
database (appends, edits, a replaced file), the FTS5 tail for rows it does not hold yet, and that a
failure of it never reaches the sync or the search."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from memsync.config.claude_mem.schema import Era, Kind
from memsync.config.formats.text_index import TextIndexDamaged, index_path, open_index
from memsync.config.settings import Settings
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.search.models import Scope, Window
from memsync.search.textindex import TextIndex, merge_tail
from memsync.worker.checks.status import text_index_state
from memsync.worker.rows.source import SourceReader
from memsync.worker.seed.importer import import_records
from memsync.worker.stores.textsync import TextSync
from tests.conftest import BASE_MS, make_db, mixed_records, obs, prompt


def _settings(tmp_path: Path, append_s: float = 0.0) -> Settings:
    return Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http",
                    chroma_port=9,  # nothing listens: searches answer lexically
                    text_index_append_s=append_s)


def _refresh(settings: Settings, full: bool = True) -> None:
    text = TextSync(settings)
    try:
        assert text.step(force_full=full) is not None
    finally:
        text.close()


@pytest.mark.parametrize("era", [Era.CURRENT, Era.LEGACY])
def test_index_holds_every_kind_with_filters(tmp_path: Path, era: Era) -> None:
    s = _settings(tmp_path)
    make_db(s.db, [*mixed_records(6), obs(100, "gamma", narrative="zeppelin hangar", type="feature"),
                   obs(101, "gamma", narrative="zeppelin mooring", type="bugfix"),
                   prompt(102, "delta", prompt_text="zeppelin prompt")], era=era)
    _refresh(s)
    index = TextIndex.open(s)
    assert index is not None
    assert index.watermark(Kind.OBSERVATION) == 8 and index.watermark(Kind.PROMPT) == 7
    everything = Window(0, None, None, "all_time")
    assert {i for i, _ in index.search(Kind.OBSERVATION, "zeppelins", Scope(Filters(), everything), 10)} == {7, 8}
    assert [i for i, _ in index.search(Kind.OBSERVATION, "zeppelin", Scope(Filters(types=("bugfix",)), everything),
                                       10)] == [8]
    assert index.search(Kind.OBSERVATION, "zeppelin", Scope(Filters(project="alpha"), everything), 10) == []
    assert [i for i, _ in index.search(Kind.PROMPT, "zeppelin", Scope(Filters(project="delta"), everything), 10)] == [7]
    # Ids of the three kinds are separate spaces: summary 7 does not exist, prompt 7 does.
    assert index.search(Kind.SUMMARY, "zeppelin", Scope(Filters(), everything), 10) == []
    recent = Window(1, BASE_MS + 100_500, None, "window")  # obs(i) is created at BASE + i s: only obs(101)
    assert [i for i, _ in index.search(Kind.OBSERVATION, "zeppelin", Scope(Filters(), recent), 10)] == [8]
    before = Window(0, None, BASE_MS + 100_500, "before_window")
    assert index.count(Kind.OBSERVATION, "zeppelin", Scope(Filters(), before)) == 1


def _status_pending(s: Settings) -> int:
    """Rows the index trails the database by, as `memsync status` reports it."""
    with SourceReader(s.db, 1000) as reader:
        state = text_index_state(s, reader.max_ids())
    assert state["built"] is True
    return int(state["pending_rows"])


def test_rows_newer_than_the_index_come_from_fts5_until_it_catches_up(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(4))
    with SourceReader(s.db, 1000) as reader:
        assert text_index_state(s, reader.max_ids()) == {"enabled": True, "built": False, "answers": "FTS5",
                                                         "why": "the text index is not built yet"}
    _refresh(s)
    assert _status_pending(s) == 0
    import_records(s.db, [obs(50, narrative="quokka sighting near the build server")])
    assert _status_pending(s) == 1
    engine = Searcher(s)
    try:
        resp = engine.search(SearchRequest(query="quokka", mode=Mode.LEXICAL, window_days=0))
        assert [(r.kind, r.id) for r in resp.results] == [(Kind.OBSERVATION, 5)]
        index = TextIndex.open(s)
        assert index is not None and index.watermark(Kind.OBSERVATION) == 4  # the tail answered
        _refresh(s, full=False)
        assert _status_pending(s) == 0
        index = TextIndex.open(s)
        assert index is not None and index.watermark(Kind.OBSERVATION) == 5
        all_time = Scope(Filters(), Window(0, None, None, "all_time"))
        assert [i for i, _ in index.search(Kind.OBSERVATION, "quokka", all_time, 5)] == [5]
        assert [(r.kind, r.id) for r in engine.search(SearchRequest(
            query="quokka", mode=Mode.LEXICAL, window_days=0)).results] == [
            (Kind.OBSERVATION, 5)]
    finally:
        engine.close()


@pytest.mark.parametrize("same_length", [False, True], ids=["new-length", "same-length"])
def test_edit_below_the_watermark_rebuilds_the_kind_at_a_full_refresh(tmp_path: Path, same_length: bool) -> None:
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(4))
    text = TextSync(s)
    try:
        assert text.step() is not None  # the first step is a full one (start-up)
        with sqlite3.connect(s.db) as conn:  # the agent edits an old row
            old = conn.execute("SELECT narrative FROM observations WHERE id = 2").fetchone()[0]
            new = "axolotl habitat notes"
            if same_length:  # a typo fixed: no count or length changes, only the text
                new = (new + " " + "x" * len(old))[:len(old)]
                assert len(new) == len(old) and new != old
            conn.execute("UPDATE observations SET narrative = ? WHERE id = 2", (new,))
        quick = text.step()
        assert quick is not None and quick.rebuilt == [] and quick.appended == {}  # appends only
        full = text.step(force_full=True)
        assert full is not None and full.rebuilt == ["observation"]
    finally:
        text.close()
    index = TextIndex.open(s)
    assert index is not None
    assert [i for i, _ in index.search(Kind.OBSERVATION, "axolotl", Scope(Filters(), None), 5)] == [2]


def test_appends_wait_for_the_interval_and_fts5_answers_meanwhile(tmp_path: Path) -> None:
    s = _settings(tmp_path, append_s=3600)
    make_db(s.db, mixed_records(4))
    text = TextSync(s)
    engine = Searcher(s)
    try:
        assert text.step() is not None  # start-up: a full refresh
        import_records(s.db, [obs(50, narrative="wombat burrow survey")])
        assert text.step() is None and text.step() is None  # within the interval: no commit
        assert _status_pending(s) == 1
        resp = engine.search(SearchRequest(query="wombat", mode=Mode.LEXICAL, window_days=0))
        assert [(r.kind, r.id) for r in resp.results] == [(Kind.OBSERVATION, 5)]  # from the FTS5 tail
        full = text.step(force_full=True)  # a reconcile does not wait
        assert full is not None and full.appended == {"observation": 1}
        assert _status_pending(s) == 0
    finally:
        engine.close()
        text.close()


def test_a_replaced_database_is_indexed_from_scratch(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(6))
    _refresh(s)
    s.db.unlink()
    make_db(s.db, [obs(1, narrative="narwhal migration")])
    text = TextSync(s)
    try:
        result = text.step()
        assert result is not None and "observation" in result.rebuilt
    finally:
        text.close()
    index = TextIndex.open(s)
    assert index is not None and index.watermark(Kind.OBSERVATION) == 1
    assert [i for i, _ in index.search(Kind.OBSERVATION, "narwhal", Scope(Filters(), None), 5)] == [1]
    assert index.search(Kind.OBSERVATION, "caching", Scope(Filters(), None), 5) == []


def test_an_index_of_another_database_is_not_used(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(3))
    _refresh(s)
    other = s.model_copy(update={"db": tmp_path / "other.db"})
    make_db(other.db, mixed_records(2))
    assert TextIndex.open(s) is not None
    assert TextIndex.open(other) is None


def test_a_failing_index_never_stops_sync_or_search(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(3))
    holder = TextSync(s)
    try:
        assert holder.step() is not None  # holds tantivy's writer lock
        second = TextSync(s)
        with capture_logs() as logged:
            assert second.step(force_full=True) is None  # refused, logged, no exception
        second.close()
    finally:
        holder.close()
    # Another writer (the worker, beside a resync or `memsync demo`) is no failure: said at info.
    assert [(e["event"], e["log_level"], e["holder"]) for e in logged] == [
        ("text_index_held", "info", "another memsync process")]
    # A corrupt meta file: searches use FTS5 and still answer.
    (s.data_dir / "text-index" / "memsync-meta.json").write_text("{not json")
    assert TextIndex.open(s) is None
    engine = Searcher(s)
    try:
        assert engine.search(SearchRequest(query="caching", mode=Mode.LEXICAL, window_days=0)).results
    finally:
        engine.close()


def test_a_real_panic_of_tantivy_on_a_garbled_segment_is_the_text_index_damage(tmp_path: Path) -> None:
    # Garbled under an open reader (its files were whole when it opened, and tantivy maps them):
    # some garbles make tantivy rank from garbage, others make it panic (pyo3's PanicException, a
    # BaseException). No panic escapes; each is TextIndexDamaged, which the lexical side answers
    # with FTS5. The garbles are seeded: the same ones panic on every run.
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(200))
    _refresh(s)
    postings = next(index_path(s).glob("*.idx"))
    size = postings.stat().st_size
    everything = Scope(Filters(), Window(0, None, None, "all_time"))
    panics = []
    for seed in range(40):
        index = TextIndex.open(s)
        assert index is not None
        rnd = random.Random(seed)
        with open(postings, "r+b") as fh:
            fh.seek(rnd.randrange(0, size // 2))
            fh.write(rnd.randbytes(size // 2 - 16))
        try:
            index.search(Kind.OBSERVATION, "caching redis observation", everything, 10)
        except TextIndexDamaged as exc:
            panics.append(str(exc))
        text = TextSync(s)  # the writer finds it and rebuilds it for the next round
        try:
            assert text.step(force_full=True) is not None
        finally:
            text.close()
        postings = next(index_path(s).glob("*.idx"))
        if len(panics) >= 2:
            break
    assert panics and all(p.startswith("tantivy panicked: ") for p in panics), panics


def test_an_index_an_older_reader_recreated_empty_is_found_and_rebuilt(tmp_path: Path) -> None:
    # Before memsync recorded the commit it wrote, a search that found tantivy's meta.json gone
    # created an empty index in its place, and the record (rows, no commit) did not tell.
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(5))
    _refresh(s)
    path = index_path(s)
    record = json.loads((path / "memsync-meta.json").read_text())
    older = {k: v for k, v in record.items() if k not in ("opstamp", "docs")}
    (path / "memsync-meta.json").write_text(json.dumps(older))
    (path / "meta.json").unlink()
    open_index(path, create=True)  # what that reader did
    index, why = TextIndex.open_checked(s)
    assert index is None and why == "the index is empty, memsync recorded 15 rows"
    _refresh(s, full=False)
    index = TextIndex.open(s)
    assert index is not None and index.search(Kind.OBSERVATION, "caching", Scope(Filters(), None), 5)
    assert json.loads((path / "memsync-meta.json").read_text())["docs"] == 15


def test_text_index_off_writes_nothing(tmp_path: Path) -> None:
    s = _settings(tmp_path).model_copy(update={"text_index": False})
    make_db(s.db, mixed_records(2))
    assert TextSync(s).step(force_full=True) is None
    assert not (s.data_dir / "text-index").exists()


def test_merge_tail_alternates_and_dedupes() -> None:
    assert merge_tail([1, 2, 3, 4], [9, 2], 10) == [1, 9, 2, 3, 4]
    assert merge_tail([], [5, 6], 1) == [5]
    assert merge_tail([1], [], 3) == [1]


def test_a_stop_request_rolls_the_refresh_back(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(5))
    stop = threading.Event()
    stop.set()  # the worker is stopping: a long rebuild must not hold it up
    text = TextSync(s, stop)
    try:
        result = text.step()
        assert result is not None and result.interrupted and result.rebuilt == []
        index = TextIndex.open(s)
        assert index is None or index.watermark(Kind.OBSERVATION) is None  # nothing half-done is trusted
        stop.clear()
        again = text.step()
        assert again is not None and not again.interrupted and "observation" in again.rebuilt
    finally:
        text.close()
    index = TextIndex.open(s)
    assert index is not None and index.watermark(Kind.OBSERVATION) == 5


def test_an_open_index_reads_the_workers_commits_only_when_reloaded(tmp_path: Path) -> None:
    # tantivy's default reader reloads in a background thread whenever meta.json changes (polled
    # every 500 ms); memsync's readers reload when asked, so a search's segment files are read on
    # its own thread and the worker does not reopen every segment after its own commits.
    s = _settings(tmp_path)
    make_db(s.db, mixed_records(4))
    _refresh(s)
    index = open_index(index_path(s), create=False)
    index.reload()
    before = index.searcher().num_docs
    import_records(s.db, [prompt(50 + i) for i in range(3)])
    _refresh(s, full=False)
    threading.Event().wait(1.5)  # three of tantivy's polling intervals: a background reload would have run
    assert index.searcher().num_docs == before
    index.reload()
    assert index.searcher().num_docs == before + 3
