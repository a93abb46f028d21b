"""One search request: its type, its limit policy, and the one parser every front end uses.

:class:`SearchRequest` is what ``Searcher.search`` takes (frozen, keyword-only). The CLI, its
``--batch`` lines, the HTTP API and the MCP tools receive strings and numbers; each hands them to
:class:`RequestParser` as :class:`SearchFields`, which checks every value against one policy
(``config.limits``: limit at most 100, offset at most 10,000, ...) and refuses a bad one with
:class:`BadRequest`, naming it and what would be accepted (the CLI once allowed 500 and
100,000, the servers 100 and 10,000, and batch lines anything).

Text is read as valid Unicode (:func:`valid_unicode`): an unpaired UTF-16 surrogate (from a JSON
``"\\ud800"``, or a command-line byte that is not UTF-8, which Python keeps as one) becomes U+FFFD,
so that the tokenizer, SQLite and the JSON answer all take it; before, such a query was a traceback
from the tokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.filters import FILTER_PARAMS, FilterParam
from memsync.config.limits import MAX_DEPTH, MAX_FILTER_VALUES, MAX_LIMIT, MAX_OFFSET, MAX_WINDOW_DAYS
from memsync.config.records import RecordRefError, parse_iso, parse_kinds
from memsync.search.models import Filters, Format, Mode, Order, SearchError

DEFAULT_LIMIT = 20  # the library's page when a request names none
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """``text`` with each unpaired UTF-16 surrogate replaced by U+FFFD (a pair, as two code points,
    becomes the character it encodes); text without surrogates is returned as it is."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class BadRequest(SearchError):
    """A request value a front end refuses; the message names it and what is accepted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchRequest:
    """One search: the query text (no words: the newest rows within the filters), which kinds (empty:
    all), the filters, the recency window in days (None: the configured one; 0: all time; a date
    range in the filters replaces it), the page, the order, the result format and which sides answer.
    The library checks only that the page is not empty; the front ends' bounds are the parser's."""

    query: str = ""
    kinds: Sequence[Kind] = KINDS
    filters: Filters = field(default_factory=Filters)
    window_days: int | None = None
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    order: Order = Order.RELEVANCE
    format: Format = Format.INDEX
    mode: Mode = Mode.HYBRID
    show_all: bool = False  # list the results below the min_confidence cutoff too


class SearchFields(TypedDict, total=False):
    """A search as a front end receives it (strings and numbers, not yet checked); an absent field
    takes :class:`SearchRequest`'s default. ``filters`` holds the filters' values by their
    :class:`Filters` field name (``config.filters.FILTER_PARAMS``: project, platform, types, ...)."""

    query: str | None
    kind: str | Sequence[str] | None  # observations, summaries, prompts, all, an alias (or a list of them)
    filters: Mapping[str, object]
    window_days: int | None
    order: str
    limit: int
    offset: int
    full: bool
    all: bool  # the results below the min_confidence cutoff too


def bounded(value: object, name: str, low: int, high: int) -> int:
    """``value`` if it is an integer with ``low <= value <= high``, else a BadRequest naming the range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        # repr() of an int past 4,300 digits raises: a huge one is only described.
        shown = "a larger number" if isinstance(value, int) and value.bit_length() > 256 else repr(value)[:40]
        raise BadRequest(f"{name} must be an integer from {low} to {high}, got {shown}")
    return value


def listed(values: object, name: str) -> tuple[str, ...]:
    """One value or a list of them, blanks dropped, at most MAX_FILTER_VALUES."""
    if values is None:
        return ()
    items = [values] if isinstance(values, str) else list(values) if isinstance(values, (list, tuple)) else None
    if items is None:
        raise BadRequest(f"{name} must be a string or a list of strings")
    out = tuple(valid_unicode(v.strip()) for v in items if isinstance(v, str) and v.strip())
    if len(out) > MAX_FILTER_VALUES:
        raise BadRequest(f"at most {MAX_FILTER_VALUES} values for {name}, got {len(out)}")
    return out


def parse_date(value: object, name: str) -> datetime | None:
    """An ISO date or date-time (naive = UTC); None and "" pass as None."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        return parse_iso(str(value))
    except RecordRefError:
        raise BadRequest(f"{name} must be an ISO date like 2026-11-01 or 2026-11-01T10:00:00Z, "
                         f"got {str(value)[:40]!r}") from None


def _text(value: object, name: str) -> str | None:
    """A short text value, stripped; blank is None."""
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    return valid_unicode((value or "").strip()) or None


class RequestParser:
    """Builds :class:`SearchRequest` from :class:`SearchFields` with the one limit policy; the query's
    length limit is a setting (``max_query_chars``), the observation types are the database's."""

    def __init__(self, max_query_chars: int, observation_types: Callable[[], Sequence[str]],
                 label: Callable[[FilterParam], str] = lambda p: p.param) -> None:
        self.max_query_chars = max_query_chars
        self._observation_types = observation_types
        self._label = label  # how a refused filter is named: its parameter, or the CLI's option

    def request(self, fields: SearchFields) -> SearchRequest:
        """Every field checked (in this order: query, kind, filters, order, window, page), or
        BadRequest naming the first bad one."""
        query, kinds = self.query(fields.get("query")), self.kinds(fields.get("kind"))
        filters = self.filters(fields.get("filters", {}))
        order = fields.get("order", Order.RELEVANCE)
        try:
            order = Order(str(order).lower())
        except ValueError:
            raise BadRequest(f"order must be relevance, newest or oldest, got {str(order)[:40]!r}") from None
        window_days = self.window(fields.get("window_days"))
        limit, offset = self.page(fields.get("limit", DEFAULT_LIMIT), fields.get("offset", 0))
        return SearchRequest(query=query, kinds=kinds, filters=filters, window_days=window_days, order=order,
                             limit=limit, offset=offset, format=Format.FULL if fields.get("full") else Format.INDEX,
                             show_all=bool(fields.get("all")))

    def query(self, text: object, name: str = "query") -> str:
        """The query string, refused when longer than the configured limit."""
        text = text or ""
        if not isinstance(text, str):
            raise BadRequest(f"{name} must be a string")
        if len(text) > self.max_query_chars:
            raise BadRequest(f"{name} is {len(text)} characters; the limit is {self.max_query_chars}")
        return valid_unicode(text)

    def types(self, values: object, name: str = "type") -> tuple[str, ...]:
        """Observation types, each checked against the types this database uses."""
        wanted = listed(values, name)
        if wanted:
            known = self._observation_types()
            unknown = [t for t in wanted if t not in known]
            if unknown:
                raise BadRequest(f"unknown observation type {unknown[0]!r}; this database has: "
                                 f"{', '.join(known) or '(no observations)'}")
        return wanted

    @staticmethod
    def kinds(value: object) -> tuple[Kind, ...]:
        """Kinds by name (observations, summaries, prompts, all, or an alias such as sessions)."""
        if value is not None and not isinstance(value, str) and not (
                isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
            raise BadRequest("kind must be a name or a list of names")
        try:
            return parse_kinds(value if value is None or isinstance(value, str) else tuple(value))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def filters(self, values: Mapping[str, object]) -> Filters:
        """The filters of a request, each read as its declaration says (``FILTER_PARAMS``); a date
        range replaces the recency window."""
        filters = Filters(**{p.field: self.filter_value(p, values.get(p.field)) for p in FILTER_PARAMS})
        if filters.date_from and filters.date_to and filters.date_from > filters.date_to:
            raise BadRequest("date_from is after date_to")
        return filters

    def filter_value(self, param: FilterParam, value: object) -> Any:
        """One filter's value, checked; BadRequest names the parameter."""
        name = self._label(param)
        if param.shape == "date":
            return parse_date(value, name)
        if param.shape == "list":
            return self.types(value, name) if param.checked else listed(value, name)
        text = _text(value, name)
        if text is not None and param.max_chars is not None and len(text) > param.max_chars:
            raise BadRequest(f"{name} is {len(text)} characters; the limit is {param.max_chars}")
        return text

    @staticmethod
    def page(limit: object, offset: object) -> tuple[int, int]:
        """(limit, offset), each within the policy's bounds."""
        return bounded(limit, "limit", 1, MAX_LIMIT), bounded(offset, "offset", 0, MAX_OFFSET)

    @staticmethod
    def depths(before: object, after: object) -> tuple[int, int]:
        """A timeline's records before and after its anchor, each within the policy's bounds."""
        return bounded(before, "depth_before", 0, MAX_DEPTH), bounded(after, "depth_after", 0, MAX_DEPTH)

    @staticmethod
    def window(days: object) -> int | None:
        """The recency window in days (None: the configured one; 0: all time)."""
        return None if days is None else bounded(days, "window_days", 0, MAX_WINDOW_DAYS)
