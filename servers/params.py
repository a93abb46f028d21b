"""What the search servers accept: the one place where caller-supplied values (MCP tool arguments,
HTTP query parameters) become search-library calls, each bad value refused with a message that
names it and says what would be accepted. Both servers call these; neither holds search logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from memsync.config.claude_mem.schema import Kind
from memsync.config.errors import InvalidRequest
from memsync.config.records import RecordRefError, format_ref, parse_iso, parse_record_ref
from memsync.search import Filters, Format, Order, Response, Result, Searcher, SearchError, parse_kinds

MAX_LIMIT = 100  # results per page; agents should start small and page with offset
MAX_OFFSET = 10_000
MAX_DEPTH = 50  # timeline records on each side of the anchor
MAX_IDS = 100  # records per get
MAX_FILTER_VALUES = 20  # types / concepts / files per request
MAX_WINDOW_DAYS = 36_500
MAX_PLATFORM_CHARS = 100  # platform names are short (claude, codex, cursor, ...)

FindBy = Literal["concept", "file", "type"]


class BadRequest(InvalidRequest):
    """A value the servers refuse; the message names it and what is accepted."""


def parse_ref(value: str | int) -> tuple[Kind, int]:
    """A record reference (``123``, ``#S12``, ``P5``), or BadRequest naming what is accepted."""
    try:
        return parse_record_ref(value)
    except RecordRefError as exc:
        raise BadRequest(str(exc)) from None


def parse_date(value: str | datetime | None, name: str) -> datetime | None:
    """An ISO date or date-time (naive = UTC); None passes through."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        return parse_iso(str(value))
    except RecordRefError:
        raise BadRequest(f"{name} must be an ISO date like 2026-11-01 or 2026-11-01T10:00:00Z, "
                         f"got {str(value)[:40]!r}") from None


def bounded(value: int, name: str, low: int, high: int) -> int:
    """``value`` if ``low <= value <= high``, else a BadRequest naming the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        # repr() of an int past 4,300 digits raises: a huge one is only described.
        shown = "a larger number" if isinstance(value, int) and value.bit_length() > 256 else repr(value)[:40]
        raise BadRequest(f"{name} must be an integer from {low} to {high}, got {shown}")
    return value


def listed(values: str | Sequence[str] | None, name: str) -> tuple[str, ...]:
    """One value or a list of them, blanks dropped, at most MAX_FILTER_VALUES."""
    if values is None:
        return ()
    items = [values] if isinstance(values, str) else list(values)
    out = tuple(v.strip() for v in items if isinstance(v, str) and v.strip())
    if len(out) > MAX_FILTER_VALUES:
        raise BadRequest(f"at most {MAX_FILTER_VALUES} values for {name}, got {len(out)}")
    return out


@dataclass(frozen=True)
class SearchArgs:
    """One search request as the servers receive it (strings and numbers, not yet checked)."""

    query: str = ""
    kind: str | Sequence[str] | None = None
    project: str | None = None
    types: str | Sequence[str] | None = None
    concepts: str | Sequence[str] | None = None
    files: str | Sequence[str] | None = None
    date_from: str | datetime | None = None
    date_to: str | datetime | None = None
    window_days: int | None = None
    order: str = "relevance"
    limit: int = 10
    offset: int = 0
    full: bool = False
    platform: str | None = None


@dataclass(frozen=True)
class FindArgs:
    """One find-by request (``Searcher.find_by_*``) beside its filter value: the query that ranks
    the matches (none: newest first), the project and the page."""

    query: str = ""
    project: str | None = None
    window_days: int | None = None
    limit: int = 10
    offset: int = 0
    full: bool = False


class Requests:
    """Validates requests against the search library and the database, then runs them."""

    def __init__(self, searcher: Searcher, max_query_chars: int = 4000) -> None:
        self.searcher = searcher
        self.max_query_chars = max_query_chars

    def query(self, text: str | None, name: str = "query") -> str:
        """The query string, refused when longer than the configured limit."""
        text = text or ""
        if not isinstance(text, str):
            raise BadRequest(f"{name} must be a string")
        if len(text) > self.max_query_chars:
            raise BadRequest(f"{name} is {len(text)} characters; the limit is {self.max_query_chars}")
        return text

    def types(self, values: str | Sequence[str] | None) -> tuple[str, ...]:
        """Observation types, each checked against the types this database uses."""
        wanted = listed(values, "type")
        if wanted:
            known = self.searcher.observation_types()
            unknown = [t for t in wanted if t not in known]
            if unknown:
                raise BadRequest(f"unknown observation type {unknown[0]!r}; this database has: "
                                 f"{', '.join(known) or '(no observations)'}")
        return wanted

    def kinds(self, value: str | Sequence[str] | None) -> tuple[Kind, ...]:
        """Kinds by name (observations, sessions, prompts, all)."""
        try:
            return parse_kinds(value if value is None or isinstance(value, str) else tuple(value))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def filters(self, args: SearchArgs) -> Filters:
        """The filters of a request; a date range replaces the recency window."""
        date_from, date_to = parse_date(args.date_from, "date_from"), parse_date(args.date_to, "date_to")
        if date_from and date_to and date_from > date_to:
            raise BadRequest("date_from is after date_to")
        project = (args.project or "").strip() or None
        if args.platform is not None and not isinstance(args.platform, str):
            raise BadRequest("platform must be a string")
        platform = (args.platform or "").strip() or None
        if platform is not None and len(platform) > MAX_PLATFORM_CHARS:
            raise BadRequest(f"platform is {len(platform)} characters; the limit is {MAX_PLATFORM_CHARS}")
        return Filters(project=project, platform=platform, types=self.types(args.types),
                       concepts=listed(args.concepts, "concept"), files=listed(args.files, "file"),
                       date_from=date_from, date_to=date_to)

    def window(self, days: int | None) -> int | None:
        """The recency window in days (None: the configured one; 0: all time)."""
        return None if days is None else bounded(days, "window_days", 0, MAX_WINDOW_DAYS)

    def page(self, limit: int, offset: int) -> tuple[int, int]:
        """(limit, offset), each within the servers' bounds."""
        return bounded(limit, "limit", 1, MAX_LIMIT), bounded(offset, "offset", 0, MAX_OFFSET)

    def search(self, args: SearchArgs) -> Response:
        """Validate every part of ``args``, then search."""
        query = self.query(args.query)
        kinds = self.kinds(args.kind)
        filters = self.filters(args)
        try:
            order = Order(str(args.order).lower())
        except ValueError:
            raise BadRequest(f"order must be relevance, newest or oldest, got {str(args.order)[:40]!r}") from None
        window = self.window(args.window_days)
        limit, offset = self.page(args.limit, args.offset)
        try:
            return self.searcher.search(query, kinds, filters, window, limit, offset, order,
                                        Format.FULL if args.full else Format.INDEX)
        except SearchError as exc:
            raise BadRequest(str(exc)) from None

    def find_by(self, by: FindBy, value: str | Sequence[str], args: FindArgs) -> Response:
        """Validate, then ``Searcher.find_by_concept`` / ``find_by_file`` / ``find_by_type``: the
        filter first, then the matches ranked by ``args.query`` (newest first without one)."""
        query = self.query(args.query)
        limit, offset = self.page(args.limit, args.offset)
        kw: dict[str, Any] = {"project": (args.project or "").strip() or None, "limit": limit, "offset": offset,
                              "window_days": self.window(args.window_days),
                              "format": Format.FULL if args.full else Format.INDEX}
        try:
            if by == "type":
                types = self.types(value)
                if not types:
                    raise BadRequest("give an observation type, e.g. bugfix")
                return self.searcher.find_by_type(types, query, **kw)
            if not isinstance(value, str) or not self.query(value, by).strip():
                raise BadRequest(f"{by} must be a non-empty string")
            find = self.searcher.find_by_concept if by == "concept" else self.searcher.find_by_file
            return find(value.strip(), query, **kw)
        except SearchError as exc:
            raise BadRequest(str(exc)) from None

    def timeline(self, anchor: str | None, query: str | None, depth_before: int, depth_after: int,
                 project: str | None, full: bool = False) -> tuple[list[Result], tuple[Kind, int]]:
        """Records around an anchor (an id, S/P id, ISO time) or around the best match of ``query``."""
        anchor_text = self.query(anchor, "anchor").strip() or self.query(query).strip()
        if not anchor_text:
            raise BadRequest("give an anchor (123, S12, P5 or an ISO time) or a query")
        try:
            return self.searcher.timeline(anchor_text, bounded(depth_before, "depth_before", 0, MAX_DEPTH),
                                          bounded(depth_after, "depth_after", 0, MAX_DEPTH),
                                          (project or "").strip() or None, Format.FULL if full else Format.INDEX)
        except SearchError as exc:
            raise BadRequest(str(exc)) from None

    def get(self, refs: Sequence[str | int]) -> tuple[list[dict[str, object]], list[str]]:
        """Full records for ids like 123, S12, P5, in the requested order, and the ids not found."""
        if isinstance(refs, (str, int)):
            refs = [refs]
        if not refs:
            raise BadRequest("give at least one id")
        if len(refs) > MAX_IDS:
            raise BadRequest(f"at most {MAX_IDS} ids per request, got {len(refs)}")
        keys = [parse_ref(r) for r in refs]
        found: dict[tuple[Kind, int], dict[str, object]] = {}
        for kind in dict.fromkeys(k for k, _ in keys):
            records, _ = self.searcher.get(kind, [i for k, i in keys if k is kind])
            found.update(((kind, int(r["id"])), r) for r in records)
        return [found[k] for k in keys if k in found], [format_ref(*k) for k in keys if k not in found]

    def similar(self, observation_id: int | str, limit: int,
                window_days: int | None) -> tuple[list[Result], str, str | None]:
        """Observations most like one observation: (results, mode, reason when degraded)."""
        kind, row_id = parse_ref(observation_id)
        if kind is not Kind.OBSERVATION:
            raise BadRequest("similar takes an observation id (123 or #123)")
        try:
            results, mode, reason = self.searcher.similar(row_id, bounded(limit, "limit", 1, MAX_LIMIT),
                                                          self.window(window_days))
        except SearchError as exc:
            raise BadRequest(str(exc)) from None
        return results, mode.value, reason

    def recent(self, project: str | None, limit: int) -> list[Result]:
        """The newest summaries and observations (of a project)."""
        return self.searcher.recent_context((project or "").strip() or None, bounded(limit, "limit", 1, MAX_LIMIT))
