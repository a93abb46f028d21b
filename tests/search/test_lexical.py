"""The lexical side: which index answers (memsync's text index with the FTS5 tail, the app's FTS5
tables, memsync's own FTS index), and that the choice changes the index, never the matches."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.settings import Settings
from memsync.search import Mode, Searcher, SearchRequest
from memsync.search.lexical import EXCLUDED_CAP, LexicalSide
from memsync.search.models import Filters, Order, Scope, Window
from memsync.search.sql import SourceRows
from memsync.worker.seed.importer import import_records
from memsync.worker.stores.textsync import TextSync
from tests.conftest import BASE_MS, make_db, mixed_records, obs, prompt, summary, write

ALL_TIME = Window(0, None, None, "all_time")


def records() -> list[dict[str, object]]:
    return [*mixed_records(8),
            obs(50, narrative="zeppelin hangar doors", type="feature", concepts=["airship"]),
            obs(51, "beta", narrative="the zeppelin mooring mast", files_read=["docs/mast.md"]),
            summary(52, learned="zeppelins need helium"),
            prompt(53, prompt_text="where do zeppelins land")]


def build(tmp: Path, fts: bool = True, text_index: bool = False, feedback: bool = False,
          extra: list[dict[str, object]] | None = None) -> Settings:
    # Feedback off unless asked: these tests are about which index answers the query's own words.
    s = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", text_index=text_index, lexical_feedback=feedback,
                 min_confidence=0)  # what retrieval finds, not the lists' cutoff (tested on its own)
    make_db(s.db, records() + (extra or []), fts=fts)
    if text_index:
        sync = TextSync(s)
        try:
            assert sync.step(force_full=True) is not None
        finally:
            sync.close()
    return s


@pytest.fixture(scope="module")
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(2) as p:
        yield p


def rank(s: Settings, pool: concurrent.futures.Executor, text: str, filters: Filters | None = None,
         window: Window = ALL_TIME, use_text_index: bool = True) -> tuple[dict[Kind, list[int]], LexicalSide]:
    rows = SourceRows.open(s)
    side = LexicalSide(s, rows, text, pool, use_text_index)
    try:
        return side.rank([(k, filters or Filters()) for k in KINDS], window, 20), side
    finally:
        side.close()
        rows.close()


def test_the_app_tables_answer_without_a_text_index(tmp_path: Path, pool: concurrent.futures.Executor) -> None:
    s = build(tmp_path)
    ranked, side = rank(s, pool, "zeppelin")
    assert side.index is None
    assert ranked == {Kind.OBSERVATION: [9, 10], Kind.SUMMARY: [9], Kind.PROMPT: [9]}
    assert not (s.data_dir / "lexical.db").exists()


def test_own_index_answers_when_the_database_has_no_fts_tables(tmp_path: Path,
                                                                pool: concurrent.futures.Executor) -> None:
    s = build(tmp_path, fts=False)
    ranked, _ = rank(s, pool, "zeppelins")
    assert {k: sorted(v) for k, v in ranked.items()} == {Kind.OBSERVATION: [9, 10], Kind.SUMMARY: [9],
                                                         Kind.PROMPT: [9]}
    assert (s.data_dir / "lexical.db").exists()


def test_text_index_with_the_fts5_tail(tmp_path: Path, pool: concurrent.futures.Executor) -> None:
    s = build(tmp_path, text_index=True)
    import_records(s.db, [obs(60, narrative="a zeppelin added after the index")])
    ranked, side = rank(s, pool, "zeppelin")
    assert side.index is not None and side.index.watermark(Kind.OBSERVATION) == 10
    assert sorted(ranked[Kind.OBSERVATION]) == [9, 10, 11]  # 11 from FTS5: newer than the index
    _, semantic_only = rank(s, pool, "zeppelin", use_text_index=False)
    assert semantic_only.index is None


@pytest.mark.parametrize("filters", [Filters(), Filters(project="beta"), Filters(project=("beta", "alpha")),
                                     Filters(types=("feature",)), Filters(concepts=("airship",)),
                                     Filters(files=("mast.md",))],
                         ids=["none", "project", "projects", "types", "concepts", "files"])
@pytest.mark.parametrize("window", [ALL_TIME, Window(1, BASE_MS + 50_600, None, "window")], ids=["all", "recent"])
def test_whichever_index_answers_the_matches_are_the_same(tmp_path_factory: pytest.TempPathFactory,
                                                          pool: concurrent.futures.Executor, filters: Filters,
                                                          window: Window) -> None:
    answers = []
    for fts, text_index in ((True, True), (True, False), (False, False)):
        s = build(tmp_path_factory.mktemp("db"), fts=fts, text_index=text_index)
        ranked, _ = rank(s, pool, "zeppelin helium", filters, window)
        answers.append({k: sorted(v) for k, v in ranked.items()})
    assert answers[0] == answers[1] == answers[2]
    # The feature with the concept is older than the recent window.
    nothing_expected = bool(filters.types or filters.concepts) and window.start_ms is not None
    assert any(answers[0].values()) is not nothing_expected


def test_several_projects_find_what_each_finds(tmp_path_factory: pytest.TempPathFactory,
                                               pool: concurrent.futures.Executor) -> None:
    """A worktree's hook asks for two projects at once: each index finds the union of what either
    finds alone, in the order of the words alone (the project set scores alike for every row)."""
    for fts, text_index in ((True, True), (False, False)):
        s = build(tmp_path_factory.mktemp("db"), fts=fts, text_index=text_index,
                  extra=[obs(54, "alpha/wt", narrative="zeppelin ballast in the worktree")])
        each = [rank(s, pool, "zeppelin", Filters(project=p))[0] for p in ("alpha", "alpha/wt", "beta")]
        both, _ = rank(s, pool, "zeppelin", Filters(project=("alpha", "alpha/wt")))
        assert {k: sorted(v) for k, v in both.items()} == {k: sorted(each[0][k] + each[1][k]) for k in KINDS}
        assert each[1][Kind.OBSERVATION] and each[2][Kind.OBSERVATION]  # beta's is not among them
        assert not set(each[2][Kind.OBSERVATION]) & set(both[Kind.OBSERVATION])
        everything, _ = rank(s, pool, "zeppelin")
        assert both[Kind.OBSERVATION] == [i for i in everything[Kind.OBSERVATION] if i in both[Kind.OBSERVATION]]


def test_date_order_and_the_count_outside_the_window(tmp_path: Path, pool: concurrent.futures.Executor) -> None:
    s = build(tmp_path, text_index=True)
    import_records(s.db, [obs(200 + i, narrative=f"zeppelin log {i}") for i in range(EXCLUDED_CAP + 5)])
    rows = SourceRows.open(s)
    side = LexicalSide(s, rows, "zeppelin", pool)
    try:
        newest = side.dated([Kind.OBSERVATION], Scope(Filters(), ALL_TIME), 3, Order.NEWEST)
        assert {k for k, _ in newest} == {(Kind.OBSERVATION, i) for i in (115, 114, 113)}
        recent = Window(1, BASE_MS + 50_500, None, "window")  # obs 50 and 51 fall before it
        assert side.excluded([Kind.OBSERVATION], Scope(Filters(), recent)) == 1  # obs(50), at +50 s
        later = Window(1, BASE_MS + 10**9, None, "window")
        assert side.excluded([Kind.OBSERVATION], Scope(Filters(), later)) == EXCLUDED_CAP
        assert side.excluded(list(KINDS), Scope(Filters(), ALL_TIME)) == 0
    finally:
        side.close()
        rows.close()


def test_feedback_adds_the_rare_words_the_best_matches_share(tmp_path: Path,
                                                            pool: concurrent.futures.Executor) -> None:
    # The question says "airship"; the turns that answer it say "dirigible" and "blimp" as well,
    # and one of them never says "airship". Feedback finds it through the words the matches share.
    answers = [prompt(60 + i, prompt_text=f"the airship dirigible blimp hangar note {w}")
               for i, w in enumerate(("alpha", "beta", "gamma"))]
    answers.append(prompt(70, prompt_text="that dirigible blimp finally flew"))
    filler = [prompt(80 + i, prompt_text="lunch plans and the weather today") for i in range(40)]
    plain = build(tmp_path / "plain", text_index=True, extra=answers + filler)
    expanded = build(tmp_path / "expanded", text_index=True, feedback=True, extra=answers + filler)
    rows = SourceRows.open(plain)
    try:
        ids = {str(r[1]): int(r[0]) for r in rows.query("SELECT id, prompt_text FROM user_prompts")}
    finally:
        rows.close()
    flew, lunch = ids["that dirigible blimp finally flew"], ids["lunch plans and the weather today"]
    without, _ = rank(plain, pool, "airship")
    with_feedback, side = rank(expanded, pool, "airship")
    assert flew not in without[Kind.PROMPT]
    assert side.index is not None and flew in with_feedback[Kind.PROMPT]
    assert with_feedback[Kind.PROMPT][:3] == without[Kind.PROMPT][:3]  # the query's own matches stay first
    assert lunch not in with_feedback[Kind.PROMPT]  # words of rows unlike the matches are never added


# Upstream main's v54 (SessionStore.dropWriteOnlyUserPromptsFtsAndScopeFtsUpdateTriggers), after 13.25.3.
MAIN_V54_DROP_PROMPT_FTS = ("DROP TRIGGER IF EXISTS user_prompts_ai", "DROP TRIGGER IF EXISTS user_prompts_ad",
                            "DROP TRIGGER IF EXISTS user_prompts_au", "DROP TABLE IF EXISTS user_prompts_fts")


def as_main_writes_it(s: Settings) -> None:
    """The test database as upstream main leaves it: no user_prompts_fts, nor its triggers."""
    for sql in MAIN_V54_DROP_PROMPT_FTS:
        write(s.db, sql)


@pytest.mark.parametrize("text_index", [False, True], ids=["fts5", "text-index-and-tail"])
def test_prompts_are_found_without_user_prompts_fts_and_the_reason_says_by_what(
        tmp_path: Path, text_index: bool) -> None:
    """Upstream main drops ``user_prompts_fts``: prompts are then ranked (alone, or as the text
    index's tail) by memsync's own FTS index, the other kinds still by the app's tables, and the
    answer's reason names the index and the missing table."""
    s = build(tmp_path, text_index=text_index)
    as_main_writes_it(s)
    import_records(s.db, [prompt(70, prompt_text="a zeppelin prompt written after the drop")])
    engine = Searcher(s)
    try:
        resp = engine.search(SearchRequest(query="zeppelins", window_days=0, mode=Mode.LEXICAL, kinds=[Kind.PROMPT]))
        assert sorted(r.id for r in resp.results) == [9, 10]
        assert resp.reason == ("lexical: memsync's own FTS index for prompts (the database has no "
                               "user_prompts_fts)")
        assert (s.data_dir / "lexical.db").exists()
        others = engine.search(SearchRequest(
            query="zeppelins", window_days=0, mode=Mode.LEXICAL, kinds=[Kind.OBSERVATION, Kind.SUMMARY]))
        assert {(r.kind, r.id) for r in others.results} == {(Kind.OBSERVATION, 9), (Kind.OBSERVATION, 10),
                                                             (Kind.SUMMARY, 9)}
        assert others.reason is None  # the app's tables answered those
    finally:
        engine.close()
