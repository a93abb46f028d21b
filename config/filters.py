"""The search filters: :class:`Filters` (what a search is restricted to) and, on each of its fields,
the parameter every front end offers for it (:data:`FILTER_PARAMS`).

Here, beside the settings, and not in the search library: the CLI declares its options from this
table when it starts, and the search library (numpy, tantivy, Chroma's client) loads only when a
command runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, Literal

from memsync.config.claude_mem.schema import Kind
from memsync.config.limits import MAX_PLATFORM_CHARS


@dataclass(frozen=True, slots=True)
class FilterParam:
    """How one filter is asked for, the same in every front end (the CLI and its ``--batch`` lines,
    the HTTP API, the MCP tools): each builds its parameter from this declaration, so a filter
    added to :class:`Filters` reaches all of them. ``shape`` says how a value is read: ``text`` (one
    string, at most ``max_chars``), ``list`` (one string or several) or ``date`` (ISO). ``kinds``
    are the kinds it applies to: rows of any other kind never pass it, and a tool or command offers
    it when it searches one of them. ``checked`` names a filter whose values are checked against
    the database's own (observation types)."""

    field: str  # the Filters field, and the key of a --batch line and of SearchFields' filters
    param: str  # the MCP argument and the HTTP query parameter
    flag: str  # the CLI option
    help: str
    shape: Literal["text", "list", "date"] = "text"
    kinds: frozenset[Kind] = frozenset(Kind)
    max_chars: int | None = None
    checked: bool = False


def _offered(param: str, flag: str, help: str, shape: Literal["text", "list", "date"] = "text",
             kinds: frozenset[Kind] = frozenset(Kind), **kw: Any) -> dict[str, Any]:
    """A Filters field's metadata: its :class:`FilterParam` (:data:`FILTER_PARAMS` fills in the
    field's name)."""
    return {"param": FilterParam("", param, flag, help, shape, kinds, **kw)}


_OBSERVATIONS = frozenset({Kind.OBSERVATION})


@dataclass(frozen=True, slots=True)
class Filters:
    """Restrictions applied before any top-N cut. Empty means no restriction.

    ``project`` matches ``project`` or ``merged_into_project`` (a tuple: any of its names; the
    front ends offer one name, the per-prompt hook asks for a worktree's and its repository's: read
    it with :meth:`projects`); ``platform`` the agent that
    recorded the row's session, normalised as claude-mem does (``config.claude_mem.platform``);
    ``types`` are observation types; ``concepts`` and ``files`` are substrings of the JSON lists
    (any of the given values); ``date_from``/``date_to`` (aware datetimes) replace the recency
    window when given.

    Adding a filter: a field here with its parameter (every front end offers it), its SQL in
    ``search.sql`` (``SourceRows.where``: every side checks rows there), and, where Chroma's metadata
    has it, its ``where`` clause in ``search.semantic`` (else Chroma's answers are checked in SQLite,
    deeper). The text index and the vector copy apply the filters they know and leave a search
    with any other to FTS5 and Chroma (``supported``)."""

    project: str | tuple[str, ...] | None = field(default=None, metadata=_offered(
        "project", "--project", "Only this project (merged projects included)."))
    platform: str | None = field(default=None, metadata=_offered(
        "platform", "--platform", "Only sessions of this agent platform: claude, codex, cursor, ... "
        "(normalised as claude-mem does).", max_chars=MAX_PLATFORM_CHARS))
    types: tuple[str, ...] = field(default=(), metadata=_offered(
        "type", "--type", "Observation type(s), e.g. bugfix, feature, decision, discovery, refactor, change.",
        "list", _OBSERVATIONS, checked=True))
    concepts: tuple[str, ...] = field(default=(), metadata=_offered(
        "concept", "--concept", "Observation concept tag(s).", "list", _OBSERVATIONS))
    files: tuple[str, ...] = field(default=(), metadata=_offered(
        "file", "--file", "Part of a path read or modified, e.g. 'auth/' or 'x.py'.", "list",
        frozenset({Kind.OBSERVATION, Kind.SUMMARY})))
    date_from: datetime | None = field(default=None, metadata=_offered(
        "date_from", "--since", "Only records at or after this ISO date or time; replaces the window.", "date"))
    date_to: datetime | None = field(default=None, metadata=_offered(
        "date_to", "--until", "Only records at or before this ISO date or time (inclusive).", "date"))

    def projects(self) -> tuple[str, ...]:
        """The project filter's names, each once, in order (empty: no project filter); a row of any
        of them passes."""
        names = (self.project,) if isinstance(self.project, str) else self.project or ()
        return tuple(dict.fromkeys(n for n in names if n))

    def named(self) -> frozenset[str]:
        """The fields that restrict (hold a value other than their default)."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) != f.default)

    def admits(self, kind: Kind) -> bool:
        """Whether rows of ``kind`` can pass at all: every filter given applies to it (types and
        concepts exist only on observations, files on observations and summaries)."""
        return all(kind in FILTER_BY_FIELD[name].kinds for name in self.named())

    def supported(self, known: frozenset[str]) -> bool:
        """Whether a side that applies only the ``known`` filters can apply all of these (a filter
        added later is unknown to it: the search goes where every filter is applied)."""
        return self.named() <= known

    def common(self) -> Filters:
        """Only the filters that apply to every kind (project, platform, dates, ...): those that
        evidence rows of another kind are searched with."""
        return Filters(**{p.field: getattr(self, p.field) for p in FILTER_PARAMS if p.kinds == frozenset(Kind)})


FILTER_PARAMS: tuple[FilterParam, ...] = tuple(replace(f.metadata["param"], field=f.name) for f in fields(Filters))
FILTER_BY_FIELD: dict[str, FilterParam] = {p.field: p for p in FILTER_PARAMS}
