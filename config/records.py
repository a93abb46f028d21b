"""How a memory record is named and dated everywhere memsync speaks to people: the one owner.

- References: ``#123`` (observation), ``#S12`` (summary), ``#P5`` (prompt), as the
  CLI, the HTTP API, the MCP tools and the page print them and accept them back.
- Kind names: read from :mod:`memsync.config.kinds` (the one table); ``parse_kinds`` turns typed
  names and aliases into kinds.
- Dates: ISO-8601 in, aware UTC datetimes and epoch milliseconds out (a naive date is UTC, ``Z``
  is accepted), and ISO-8601 with milliseconds and ``Z`` out, as claude-mem writes them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.errors import InvalidRequest
from memsync.config.kinds import ALL_KINDS, KIND_BY_NAME, KIND_NAMES, plural

# A reference's letter (any case, "O" also for observations) -> its kind.
_REF_KINDS = {"o": Kind.OBSERVATION} | {n.ref_letter.lower(): kind for kind, n in KIND_NAMES.items()}
_LETTER = "[" + "".join(letter + letter.upper() for letter in _REF_KINDS if letter) + "]?"
# "123", "#123", "S12", "#S12", "P5", "#P5" (and O123): the ids the index format prints. ASCII
# digits only: int() reads "١٢" and "１２" as 12, and no id is printed that way.
_REF = re.compile(rf"#?\s*({_LETTER})\s*(\d+)", re.ASCII)
# Text written as a record id, whatever its number ("0", "S0", "P-1", twenty digits): refused as an
# id, never taken for a query or a date (such text once became a text query).
_REF_SHAPED = re.compile(rf"#?\s*{_LETTER}\s*[-+]?\d+", re.ASCII)
_HINT = "use 123 or #123 for an observation, S12 for a summary, P5 for a prompt"
MAX_ROW_ID = 2**63 - 1  # SQLite's largest rowid (a signed 64-bit integer); past it a bound parameter overflows


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RecordRefError(InvalidRequest):
    """Text that is not a record reference, an ISO date or a kind name; the message says what is."""


class InvalidRecordId(RecordRefError):
    """A value written as a record id whose number no record can have (0, negative, past SQLite's
    64-bit range): the caller refuses it rather than reading it as anything else."""


def valid_row_id(row_id: int) -> bool:
    """Whether ``row_id`` can be a record's id (1 to SQLite's largest rowid)."""
    return 1 <= row_id <= MAX_ROW_ID


def _out_of_range(shown: str) -> InvalidRecordId:
    return InvalidRecordId(f"record id {shown} is out of range: ids are 1 to {MAX_ROW_ID} ({_HINT})")


def format_ref(kind: Kind, row_id: int) -> str:
    """The printed id of a record: ``#123``, ``#S12``, ``#P5``."""
    return f"#{KIND_NAMES[kind].ref_letter}{row_id}"


def parse_record_ref(value: str | int) -> tuple[Kind, int]:
    """``123``/``#123`` (observation), ``S12``/``#S12`` (summary), ``P5``/``#P5`` (prompt).

    Raises InvalidRecordId for a number no record can have (an int, or text shaped like an id:
    ``0``, ``S0``, ``P-1``, past SQLite's 64-bit range), RecordRefError for anything else."""
    if isinstance(value, bool):
        raise RecordRefError(f"not a record id: {value!r} ({_HINT})")
    if isinstance(value, int):
        if not valid_row_id(value):
            # str() of an int past 4,300 digits raises: a huge number is only described.
            raise _out_of_range(str(value) if value.bit_length() < 256 else "a number that large")
        return Kind.OBSERVATION, value
    text = str(value).strip()
    m = _REF.fullmatch(text)
    digits = m.group(2).lstrip("0") if m else ""
    if m and len(digits) <= len(str(MAX_ROW_ID)) and valid_row_id(int(digits or "0")):
        return _REF_KINDS[m.group(1).lower()], int(digits)
    if _REF_SHAPED.fullmatch(text):
        raise _out_of_range(repr(text[:40]))
    raise RecordRefError(f"not a record id: {text[:40]!r} ({_HINT})")


def parse_kinds(names: str | list[str] | tuple[str, ...] | None) -> tuple[Kind, ...]:
    """Kinds from names (``None``/``"all"`` = all three); raises RecordRefError naming the bad one."""
    if names is None:
        return KINDS
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not items or items == [ALL_KINDS]:
        return KINDS
    out: list[Kind] = []
    for name in items:
        kind = KIND_BY_NAME.get(name.lower())
        if kind is None:
            raise RecordRefError(f"unknown kind {name!r}; use {', '.join(plural(k) for k in KINDS)}")
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
