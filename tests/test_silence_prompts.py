"""The silence prompt sets (tests/data/inject/) are what their README says: enough prompts, split by the
documented seeded rule, the test half with at least 40 prompts against the demo memory.

The rule is restated here rather than imported: the README and this test are its two readers, and a
change to either one breaks the other.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

DATA = Path(__file__).parent / "data" / "inject"
SALT = "memsync-silence-40"
KINDS = ("followup", "slash", "task", "trace", "question", "paste", "other-language")


def _load(half: str) -> list[dict[str, str]]:
    lines = (DATA / f"silence-{half}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line]


def _split(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """The README's rule: per kind by key, alternate test/train; in each half per kind, alternate demo/dev."""
    def key(row: dict[str, str]) -> str:
        return hashlib.sha256(f"{SALT}:{row['prompt']}".encode()).hexdigest()

    halves: dict[str, list[dict[str, str]]] = {"test": [], "train": []}
    for kind in KINDS:
        for i, row in enumerate(sorted((r for r in rows if r["kind"] == kind), key=key)):
            halves["test" if i % 2 == 0 else "train"].append(row)
    placed: dict[str, dict[str, str]] = {}
    for half, members in halves.items():
        for kind in KINDS:
            for j, row in enumerate(r for r in members if r["kind"] == kind):
                placed[row["id"]] = {"half": half, "memory": "demo" if j % 2 == 0 else "dev"}
    return placed


class TestSilencePrompts:
    def test_at_least_200_distinct_prompts_of_every_kind(self) -> None:
        rows = _load("test") + _load("train")
        assert len(rows) >= 200
        assert len({r["id"] for r in rows}) == len({r["prompt"] for r in rows}) == len(rows)
        assert {r["kind"] for r in rows} == set(KINDS)
        assert {r["memory"] for r in rows} == {"demo", "dev"}

    def test_the_files_are_the_documented_seeded_split(self) -> None:
        test, train = _load("test"), _load("train")
        placed = _split(test + train)
        for half, rows in (("test", test), ("train", train)):
            assert [(placed[r["id"]]["half"], placed[r["id"]]["memory"]) for r in rows] == [
                (half, r["memory"]) for r in rows]

    def test_the_test_half_has_at_least_40_prompts_against_the_demo_memory(self) -> None:
        test, train = _load("test"), _load("train")
        assert abs(len(test) - len(train)) <= len(KINDS)
        assert sum(r["memory"] == "demo" for r in test) >= 40
