"""The injection benchmark's pure pieces beside the real claude-mem: which prompts its hook asks
about, the body it sends, its context read back into observations, the dates moved into its window."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memsync.worker.seed.importer import import_records, init_db
from scripts.bench_inject import (
    Asked,
    Injected,
    claude_mem_asks,
    latency_row,
    observation_keys,
    parse_semantic,
    repeats,
    semantic_body,
    shift_to_now,
)

DAY_MS = 86_400_000

# SearchRoutes.handleSemanticContext's output for two observations, the second without a narrative.
CONTEXT = ("## Relevant Past Work (semantic match)\n\n### Fix (the) refund endpoint (2026-11-02)\n"
           "Duplicate events.\nSecond line.\n\n### Observation (2026-11-03)\n")


def test_the_hook_asks_for_prompts_of_twenty_utf16_units_that_are_not_private() -> None:
    assert claude_mem_asks("x" * 20) and not claude_mem_asks("x" * 19)
    assert claude_mem_asks("😀" * 10)  # 20 UTF-16 code units: JavaScript's length
    assert not claude_mem_asks("<private>a secret of more than twenty characters</private>")
    assert not claude_mem_asks(" " * 30)
    assert semantic_body("why did the refund fail?", "payments-api") == {
        "q": "why did the refund fail?", "project": "payments-api", "limit": "5", "platformSource": "claude"}


def test_the_context_reads_back_into_its_observations(tmp_path: Path) -> None:
    assert parse_semantic(CONTEXT) == [("Fix (the) refund endpoint", "2026-11-02", "Duplicate events.\nSecond line."),
                                       ("Observation", "2026-11-03", "")]
    assert parse_semantic("") == []
    db = tmp_path / "m.db"
    init_db(db)
    import_records(db, [{"kind": "observation", "project": "p", "session": "p-s1", "prompt_number": 1,
                         "created_at_epoch": 1_793_000_000_000, "type": "discovery", "title": "T",
                         "subtitle": "", "narrative": " N ", "facts": [], "concepts": [],
                         "files_read": [], "files_modified": []}])
    assert observation_keys(db) == {("p", "T", "2026-10-26", "N"): 1}


def test_each_project_ends_now_with_its_spacing_kept(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    init_db(db)
    now = 1_800_000_000_000
    records = [{"kind": kind, "project": project, "session": f"{project}-s1", "prompt_number": 1,
                "created_at_epoch": start + offset * DAY_MS,
                **({"prompt_text": "hello"} if kind == "prompt" else
                   {"type": "discovery", "title": "t", "subtitle": "", "narrative": "n", "facts": [], "concepts": [],
                    "files_read": [], "files_modified": []})}
               for project, start in (("a", 1_600_000_000_000), ("b", 1_700_000_000_000))
               for kind, offset in (("prompt", 0), ("observation", 0), ("observation", 100))]
    import_records(db, records)
    shift_to_now(db, now)
    with sqlite3.connect(db) as conn:
        got = conn.execute("SELECT project, created_at_epoch, created_at FROM observations ORDER BY id").fetchall()
        prompts = conn.execute("SELECT created_at_epoch FROM user_prompts ORDER BY id").fetchall()
    start = now - 100 * DAY_MS
    assert [(p, e) for p, e, _ in got] == [("a", start), ("a", now), ("b", start), ("b", now)]
    assert got[1][2] == "2027-01-15T08:00:00.000Z"
    assert prompts == [(start,), (start,)]


def test_repeats_count_what_a_related_prompt_got_again_in_its_session() -> None:
    def asked(group: str, *turns: int) -> Asked:
        return Asked(group, frozenset((group, 1, t) for t in turns), [], [])

    prompts = [asked("c1", 1), asked("c1", 1, 2), asked("c1", 3), asked("c2", 3)]
    injected = [Injected(["#1", "#2"], 10, 1.0), Injected(["#2", "#3"], 10, 1.0), Injected(["#3"], 5, 1.0),
                Injected(["#3"], 5, 1.0)]
    assert repeats(prompts, injected) == (1, 2, 1)  # only the first two share evidence in one conversation
    assert latency_row("x", [3.0, None, 1.0, 2.0]) == {"injector": "x", "n": 3, "p50_ms": 2.0, "p95_ms": 3.0,
                                                       "max_ms": 3.0}
