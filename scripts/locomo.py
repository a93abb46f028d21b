"""The LoCoMo conversations as a claude-mem database, and their questions as retrieval targets.

Protocol of ``../shared/data/README.md``: each conversation is one project; each dated session is
one ``sdk_sessions`` row; each dialog turn is one user prompt (``"Speaker: text"`` plus the shared
image's caption); each extracted statement is one observation (its facts = the statement) whose
``prompt_number`` links it to a prompt (see ``LINKS``), as claude-mem records the prompt an
observation was made under; each session summary is one ``session_summaries`` row. Questions of
categories 1-4 with evidence are kept; category 5 (adversarial, no answer) is left out of retrieval
scores.

``LINKS`` are the conventions for linking observations to prompts, since real links vary: ``turn``
(the turn each statement was drawn from: precise links), ``session-end`` (the session's last
prompt, as when one prompt is followed by many tool uses: coarse links, every observation of a
session under one prompt), ``none`` (no observations at all: prompts and summaries only).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

LINKS = ("turn", "session-end", "none")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"
_DIA = re.compile(r"D\s*(\d+)\s*:\s*(\d+)")


@dataclass(frozen=True, slots=True)
class Question:
    """One question: its conversation (project), text, category and evidence turns."""

    project: str
    question: str
    category: int
    evidence: frozenset[tuple[int, int]]  # (session number, turn number)


def parse_evidence(items: list[Any]) -> frozenset[tuple[int, int]]:
    """Normalise evidence ids: extra spaces, ``D:`` forms and ``;``-joined lists are all read."""
    out: set[tuple[int, int]] = set()
    for item in items:
        for m in _DIA.finditer(str(item)):
            out.add((int(m.group(1)), int(m.group(2))))
    return frozenset(out)


def session_time(text: str) -> datetime:
    """``'1:56 pm on 8 May, 2023'`` as an aware UTC datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _sessions(conv: dict[str, Any]) -> Iterator[tuple[int, datetime, list[dict[str, Any]]]]:
    nums = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    for n in nums:
        yield n, session_time(conv[f"session_{n}_date_time"]), conv[f"session_{n}"]


def turn_number(dia_id: str) -> tuple[int, int] | None:
    """``'D3:7'`` → (3, 7)."""
    m = _DIA.search(dia_id)
    return (int(m.group(1)), int(m.group(2))) if m else None


def records(sample: dict[str, Any], links: str = "turn") -> Iterator[dict[str, Any]]:
    """Import records (``memsync db import`` format) for one conversation, observations linked to
    prompts by ``links`` (one of ``LINKS``)."""
    project = str(sample["sample_id"])
    conv = sample["conversation"]
    for n, start, turns in _sessions(conv):
        base = int(start.timestamp() * 1000)
        session = f"{project}-s{n}"
        for turn in turns:
            num = turn_number(turn["dia_id"])
            if num is None:
                continue
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares {turn['blip_caption']}]"
            # One second per turn keeps the order of the dialog in the timestamps.
            yield {"kind": "prompt", "project": project, "session": session, "prompt_number": num[1],
                   "prompt_text": text, "created_at_epoch": base + num[1] * 1000}
        last_turn = max((num[1] for t in turns if (num := turn_number(t["dia_id"]))), default=None)
        obs = sample.get("observation", {}).get(f"session_{n}_observation", {}) or {}
        if links == "none":
            obs = {}
        for speaker, items in obs.items():
            for item in items:
                statement, evidence = item[0], item[1] if len(item) > 1 else ""
                ev = sorted(parse_evidence(evidence if isinstance(evidence, list) else [evidence]))
                prompt_number = ev[0][1] if ev else None
                if links == "session-end":
                    prompt_number = last_turn
                yield {"kind": "observation", "project": project, "session": session, "type": "discovery",
                       "title": f"{speaker}", "narrative": statement, "facts": [],
                       "concepts": [], "prompt_number": prompt_number,
                       "created_at_epoch": base + 600_000}
        summary = sample.get("session_summary", {}).get(f"session_{n}_summary")
        if summary:
            yield {"kind": "summary", "project": project, "session": session, "learned": summary,
                   "prompt_number": len(turns), "created_at_epoch": base + 601_000}


def load(path: Path = DEFAULT_DATA, links: str = "turn") -> tuple[list[dict[str, Any]], list[Question]]:
    """All import records (observations linked by ``links``) and all scorable questions
    (categories 1-4, with evidence)."""
    if links not in LINKS:
        raise ValueError(f"links must be one of {', '.join(LINKS)}, not {links!r}")
    data = json.loads(path.read_text(encoding="utf-8"))
    recs: list[dict[str, Any]] = []
    questions: list[Question] = []
    for sample in data:
        recs.extend(records(sample, links))
        for qa in sample["qa"]:
            cat = int(qa.get("category", 0))
            ev = parse_evidence(qa.get("evidence") or [])
            if cat in (1, 2, 3, 4) and ev:
                questions.append(Question(str(sample["sample_id"]), str(qa["question"]), cat, ev))
    return recs, questions
