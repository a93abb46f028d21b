"""How a memory record is named and dated everywhere memsync speaks to people: the one owner.

- References: ``#123`` (observation), ``#S12`` (session summary), ``#P5`` (user prompt), as the
  CLI, the HTTP API, the MCP tools and the page print them and accept them back.
- Kind names: the public plural names (``observations``, ``sessions``, ``prompts``) and the
  aliases accepted for them.
- Dates: ISO-8601 in, aware UTC datetimes and epoch milliseconds out (a naive date is UTC, ``Z``
  is accepted), and ISO-8601 with milliseconds and ``Z`` out, as claude-mem writes them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from memsync.config.claude_mem.schema import KINDS, Kind

REF_PREFIX: dict[Kind, str] = {Kind.OBSERVATION: "#", Kind.SUMMARY: "#S", Kind.PROMPT: "#P"}
# "123", "#123", "S12", "#S12", "P5", "#P5" (and O123): the ids the index format prints.
_REF = re.compile(r"#?\s*([SsPpOo]?)\s*(\d{1,18})")
_REF_KINDS = {"": Kind.OBSERVATION, "o": Kind.OBSERVATION, "s": Kind.SUMMARY, "p": Kind.PROMPT}

# The names a user types for a kind: the public plural names first (CLI, HTTP, MCP choices).
KIND_NAMES: dict[Kind, str] = {Kind.OBSERVATION: "observations", Kind.SUMMARY: "sessions", Kind.PROMPT: "prompts"}
KindChoice = Literal["all", "observations", "sessions", "prompts"]
KIND_CHOICES: tuple[str, ...] = get_args(KindChoice)
# The plural of each kind's own name, for counts (``memsync status``: "12 summaries").
KIND_PLURALS: dict[Kind, str] = {Kind.OBSERVATION: "observations", Kind.SUMMARY: "summaries", Kind.PROMPT: "prompts"}
KIND_ALIASES: dict[str, Kind] = {
    "observation": Kind.OBSERVATION, "observations": Kind.OBSERVATION, "obs": Kind.OBSERVATION,
    "summary": Kind.SUMMARY, "summaries": Kind.SUMMARY, "session": Kind.SUMMARY, "sessions": Kind.SUMMARY,
    "prompt": Kind.PROMPT, "prompts": Kind.PROMPT, "user_prompts": Kind.PROMPT,
}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RecordRefError(ValueError):
    """Text that is not a record reference, an ISO date or a kind name; the message says what is."""


def format_ref(kind: Kind, row_id: int) -> str:
    """The printed id of a record: ``#123``, ``#S12``, ``#P5``."""
    return f"{REF_PREFIX[kind]}{row_id}"


def parse_record_ref(value: str | int) -> tuple[Kind, int]:
    """``123``/``#123`` (observation), ``S12``/``#S12`` (summary), ``P5``/``#P5`` (prompt).

    Raises RecordRefError for anything else (a bare int must be a positive observation id)."""
    if isinstance(value, bool):
        raise RecordRefError(f"not a record id: {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise RecordRefError(f"record ids are positive integers, got {value}")
        return Kind.OBSERVATION, value
    m = _REF.fullmatch(str(value).strip())
    if not m or int(m.group(2)) < 1:
        raise RecordRefError(f"not a record id: {str(value)[:40]!r} (use 123 or #123 for an observation, "
                             "S12 for a session summary, P5 for a user prompt)")
    return _REF_KINDS[m.group(1).lower()], int(m.group(2))


def parse_kinds(names: str | list[str] | tuple[str, ...] | None) -> tuple[Kind, ...]:
    """Kinds from names (``None``/``"all"`` = all three); raises RecordRefError naming the bad one."""
    if names is None:
        return KINDS
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not items or items == ["all"]:
        return KINDS
    out: list[Kind] = []
    for name in items:
        kind = KIND_ALIASES.get(name.lower())
        if kind is None:
            raise RecordRefError(f"unknown kind {name!r}; use {', '.join(KIND_NAMES.values())}")
        if kind not in out:
            out.append(kind)
    return tuple(out)


def parse_iso(text: str) -> datetime:
    """An ISO-8601 date or date-time as an aware datetime (naive = UTC; ``Z`` accepted).

    Raises RecordRefError with an example of what is accepted."""
    try:
        when = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise RecordRefError(f"not an ISO date: {str(text)[:40]!r} (use 2026-11-01 or 2026-11-01T10:00:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def ms_from_iso(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 date or date-time (naive = UTC).

    Integer arithmetic on the timedelta: ``int(timestamp() * 1000)`` loses a millisecond on
    values such as ``...00.001Z`` (1.001 * 1000 = 1000.999...), found by the round-trip test."""
    return (parse_iso(text) - _EPOCH) // timedelta(milliseconds=1)


def iso_from_ms(ms: int) -> str:
    """ISO-8601 UTC with milliseconds and Z, as claude-mem writes ``created_at``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
