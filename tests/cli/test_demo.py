"""The demo memory reads like a real project's (no text is a template told over and over, every
column claude-mem fills is valid), and `memsync demo`'s three searches each show one thing on it,
with the real local embedder and the real sync: a paraphrase found by meaning alone, a question
answered from two sessions, a plain keyword. They assert which records come back, not scores."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memsync.commands.db import DEMO_QUERIES, demo_searches, make_demo_db
from memsync.config.claude_mem.schema import TABLES, Kind
from memsync.config.settings import Settings
from memsync.main import main
from memsync.search import Response, Searcher, Signal
from memsync.worker.pipeline.resync import resync
from memsync.worker.seed.demo import PROJECTS, generate

TEXTS = {Kind.OBSERVATION: ("title", "subtitle", "narrative", "facts"),
         Kind.SUMMARY: ("request", "investigated", "learned", "completed", "next_steps", "notes"),
         Kind.PROMPT: ("prompt_text",)}
SESSION = {Kind.OBSERVATION: "memory_session_id", Kind.SUMMARY: "memory_session_id", Kind.PROMPT: "content_session_id"}
# Words that carry no content: a text's frame is what is left when every other word is taken out.
FUNCTION_WORDS = frozenset(str.split("""a an the and or but if of to in on at by for with from as is are was were
be been being
it its this that these those there their they them we our us you your i me my he she his her not no do does did have has
had can could should would will may might must what which who why how when where than then so too very just only also
more most some any all each every again about into over under after before up down out off once same other such own
while because since until"""))
MAX_TELLINGS = 3


def texts(records: Iterable[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(field, text) of every text the records hold, each fact on its own."""
    for r in records:
        for field in TEXTS[Kind(r["kind"])]:
            values = r.get(field) or []
            for text in [values] if isinstance(values, str) else values:
                if text:
                    yield field, text


def masked(text: str) -> str:
    """The text with its variable slots taken out: numbers, paths, identifiers, project names."""
    text = text.lower()
    for project in PROJECTS:
        text = text.replace(project.name, "#")
    return re.sub(r"\s+", " ", re.sub(r"\S*[/._\d]\S*", "#", text)).strip()


def frame(text: str) -> tuple[str, ...]:
    """The text's skeleton: its function words and punctuation, each run of other words one slot."""
    out: list[str] = []
    for token in re.findall(r"[a-z']+|[^\sa-z']", masked(text)):
        token = token if token in FUNCTION_WORDS or not token[0].isalpha() else "_"
        if not (token == "_" and out and out[-1] == "_"):
            out.append(token)
    return tuple(out)


def content_words(text: str) -> set[str]:
    """The text's content words, by a crude stem (plural s dropped, first five letters)."""
    return {w.rstrip("s")[:5] for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2 and w not in FUNCTION_WORDS}


class TestDemoMemory:
    def test_the_same_seed_gives_the_same_records_and_a_small_memorys_size(self) -> None:
        records = list(generate())
        assert records == list(generate())
        assert [r["created_at_epoch"] for r in records] != [r["created_at_epoch"] for r in generate(seed=8)]
        kinds = Counter(r["kind"] for r in records)
        assert 220 <= len(records) <= 280 and kinds["summary"] == 40 and kinds["observation"] > kinds["prompt"]
        assert {r["project"] for r in records} == {p.name for p in PROJECTS}

    def test_no_text_or_template_is_told_more_than_three_times(self) -> None:
        """Identical texts, texts identical once numbers, paths and names are masked, and texts of one
        frame (the same function words around their slots, at least four of them): none more than 3."""
        found = list(texts(generate()))
        assert len(found) > 700
        for name, key in (("identical", lambda t: t), ("masked", masked), ("frame", frame)):
            counts = Counter((field, key(text)) for field, text in found)
            if name == "frame":
                counts = Counter({k: n for k, n in counts.items() if sum(t != "_" for t in k[1]) >= 4})
            (top, n), = counts.most_common(1)
            assert n <= MAX_TELLINGS, (name, top, n)

    def test_every_column_it_fills_is_valid(self, tmp_path: Path) -> None:
        make_demo_db(tmp_path / "demo.db")
        conn = sqlite3.connect(tmp_path / "demo.db")
        try:
            for table, columns in (("observations", ("facts", "concepts", "files_read", "files_modified")),
                                   ("session_summaries", ("files_read", "files_edited"))):
                for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table}"):  # noqa: S608 (fixed names)
                    for value in row:
                        parsed = json.loads(value)
                        assert isinstance(parsed, list) and all(isinstance(v, str) and v for v in parsed)
            types = {t for (t,) in conn.execute("SELECT DISTINCT type FROM observations")}
            assert types <= {"bugfix", "feature", "refactor", "change", "discovery", "decision"}
            sessions = conn.execute("SELECT count(*) FROM sdk_sessions").fetchone()[0]
            observed = conn.execute("SELECT count(DISTINCT memory_session_id) FROM observations").fetchone()[0]
            assert sessions == observed == 40
            # every observation belongs to a prompt of its session
            orphans = conn.execute(
                "SELECT count(*) FROM observations o JOIN sdk_sessions s ON s.memory_session_id = o.memory_session_id "
                "WHERE NOT EXISTS (SELECT 1 FROM user_prompts p WHERE p.content_session_id = s.content_session_id "
                "AND p.prompt_number = o.prompt_number)").fetchone()[0]
            assert orphans == 0
        finally:
            conn.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The demo memory, synced with the real embedder into an embedded store."""
    root = tmp_path_factory.mktemp("demo")
    settings = Settings(db=root / "claude-mem.db", data_dir=root / "data", chroma_mode="embedded", window_days=0)
    make_demo_db(settings.db)
    resync(settings)
    return settings


@pytest.fixture(scope="module")
def searched(demo: Settings) -> dict[str, Response]:
    searcher = Searcher(demo)
    try:
        return dict(demo_searches(searcher))
    finally:
        searcher.close()


def row(settings: Settings, kind: Kind, id_: int) -> tuple[str, str]:
    """A record's session and its whole text."""
    columns = (SESSION[kind], *TEXTS[kind])
    conn = sqlite3.connect(settings.db)
    try:
        found = conn.execute(f"SELECT {', '.join(columns)} FROM {TABLES[kind]} WHERE id = ?", (id_,)).fetchone()
    finally:
        conn.close()
    return found[0].removeprefix("mem-"), " ".join(v or "" for v in found[1:])


@pytest.mark.slow  # builds the demo with the real model: about 30 s
class TestDemoSearches:
    def test_a_paraphrase_finds_a_memory_that_shares_no_word_with_it(self, demo: Settings,
                                                                     searched: dict[str, Response]) -> None:
        query = DEMO_QUERIES[0]
        top = searched[query].results[0]
        session, text = row(demo, top.kind, top.id)
        assert content_words(query) and not content_words(query) & content_words(text), text
        assert top.signals == Signal.SEMANTIC  # the words' index found nothing: meaning alone
        assert "expire" in text and session.startswith("web-dashboard")  # the session-expiry warning

    def test_a_question_is_answered_from_two_sessions(self, demo: Settings, searched: dict[str, Response]) -> None:
        results = searched[DEMO_QUERIES[1]].results
        rows = [row(demo, r.kind, r.id) for r in results]
        assert len(rows) == 3 and len({session for session, _ in rows}) == 2
        assert all(session.startswith("infra-tools") and "backup" in text.lower() for session, text in rows)

    def test_a_keyword_finds_the_rows_that_hold_it(self, demo: Settings, searched: dict[str, Response]) -> None:
        query = DEMO_QUERIES[2]
        assert len(query.split()) == 1
        rows = [row(demo, r.kind, r.id) for r in searched[query].results]
        assert len(rows) == 3 and all(query in text.lower() for _, text in rows)

    def test_the_demo_command_resyncs_then_prints_the_three(self, demo: Settings,
                                                            searched: dict[str, Response]) -> None:
        result = CliRunner().invoke(main, ["demo", "--db", str(demo.db), "--data-dir", str(demo.data_dir),
                                           "--chroma-mode", "embedded"], catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        out = result.stdout
        assert out.startswith(f"resync {demo.db}: ") and "0 added" in out  # already synced: nothing to embed
        for query, response in searched.items():
            section = out.split(f"\nsearch: {query}\n", 1)[1].split("\n\n", 1)[0].splitlines()
            assert len(section) == len(response.results) == 3
