"""The parallel multilingual set's judgments are whole before anything is measured on them: every
memory and query in English, Chinese, Japanese and Korean, at least 100 queries, every relevant id
a memory, and every single-word query's word inside a relevant memory of its language."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "multilingual"
LANGUAGES = ("en", "zh", "ja", "ko")
FIELDS = {"observation": {"title", "subtitle", "narrative", "facts"},
          "summary": {"request", "investigated", "learned", "completed", "next_steps"},
          "prompt": {"prompt_text"}}


def test_the_set_is_parallel_and_judged() -> None:
    memories, queries = [], []
    for path in sorted(DATA.glob("*.json")):
        part = json.loads(path.read_text("utf-8"))
        memories += part["memories"]
        queries += part["queries"]
    by_id = {m["id"]: m for m in memories}
    assert len(by_id) == len(memories) >= 200 and len({q["id"] for q in queries}) == len(queries) >= 100
    for m in memories:
        assert set(m["text"]) == set(LANGUAGES), m["id"]
        for language in LANGUAGES:
            assert set(m["text"][language]) == FIELDS[m["kind"]], (m["id"], language)
    single_characters = 0
    for q in queries:
        assert set(q["text"]) == set(LANGUAGES) and q["relevant"], q["id"]
        assert all(r in by_id for r in q["relevant"]), q["id"]
        if q["style"] == "word":
            for language in LANGUAGES:
                word = q["text"][language]
                texts = [json.dumps(by_id[r]["text"][language], ensure_ascii=False) for r in q["relevant"]]
                assert any(word in t for t in texts), (q["id"], language, word)
            single_characters += len(q["text"]["zh"]) == 1
    assert single_characters >= 10  # one-character words are part of what the lexical bar checks
