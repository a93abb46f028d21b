"""What the search servers accept: the one place where caller-supplied values (MCP tool arguments,
HTTP query parameters) become search-library calls, each bad value refused with a message that
names it and says what would be accepted. Both servers call these; neither holds search logic.
A search request is checked by the search library's one parser (``search.request``), as the CLI's are.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from memsync.config.claude_mem.schema import Kind
from memsync.config.filters import FILTER_PARAMS, FilterParam
from memsync.config.limits import MAX_IDS, MAX_LIMIT
from memsync.config.records import InvalidRecordId, RecordRefError, format_ref, parse_iso, parse_record_ref
from memsync.search import Format, Response, Result, Searcher
from memsync.search.request import BadRequest, RequestParser, SearchFields, bounded, valid_unicode

FindBy = Literal["concept", "file", "type"]
F = TypeVar("F", bound=Callable[..., Any])


def offering_filters(annotate: Callable[[FilterParam], Any], kinds: Iterable[Kind]) -> Callable[[F], F]:
    """Give a tool or endpoint whose filters arrive as ``**filters`` one keyword parameter per filter
    it offers (those declared for a kind it searches: ``config.filters.FILTER_PARAMS``), typed by
    ``annotate``. The MCP SDK and FastAPI build their schemas from the signature, so a filter
    declared once in ``config.filters.Filters`` is a parameter of every search tool and endpoint.
    The annotations of ``fn`` are evaluated in its module (none may name a local)."""
    wanted = frozenset(kinds)

    def declare(fn: F) -> F:
        signature = inspect.signature(fn, eval_str=True)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
            raise TypeError(f"{fn.__name__} must take **filters to receive the filters it offers")
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        offered = [inspect.Parameter(p.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotate(p))
                   for p in FILTER_PARAMS if p.kinds & wanted]
        fn.__signature__ = signature.replace(parameters=[*own, *offered])  # type: ignore[attr-defined]
        return fn

    return declare


def filter_fields(by_param: Mapping[str, object]) -> dict[str, object]:
    """The filters a tool or endpoint received (by parameter name: ``type``), by field (``types``)."""
    return {p.field: by_param[p.param] for p in FILTER_PARAMS if p.param in by_param}


def parse_ref(value: str | int) -> tuple[Kind, int]:
    """A record reference (``123``, ``#S12``, ``P5``), or BadRequest naming what is accepted."""
    try:
        return parse_record_ref(value)
    except RecordRefError as exc:
        raise BadRequest(str(exc)) from None


def checked_anchor(text: str) -> str:
    """A timeline anchor given as such: a record id or an ISO time, else BadRequest. The search
    library would take any other text as a query, so a mistyped date (``9999-12-31T99:99``) was
    silently searched for; the servers take a query in its own parameter."""
    try:
        parse_record_ref(text)
        return text
    except InvalidRecordId as exc:
        raise BadRequest(str(exc)) from None
    except RecordRefError:
        pass
    try:
        parse_iso(text)
    except RecordRefError:
        raise BadRequest(f"anchor must be a record id (123, #123, S12, P5) or an ISO time (2026-11-01T10:00:00Z), "
                         f"got {text[:40]!r}; to anchor on the best match of words, give them as query") from None
    return text


def _project(value: str | None) -> str | None:
    return valid_unicode((value or "").strip()) or None


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
        # Looked up when a type filter is checked, not now: a searcher need not be able to list them.
        self.parser = RequestParser(max_query_chars, lambda: self.searcher.observation_types())

    def search(self, fields: SearchFields) -> Response:
        """Validate every field (``search.request``), then search."""
        return self.searcher.search(self.parser.request(fields))

    def find_by(self, by: FindBy, value: str | Sequence[str], args: FindArgs) -> Response:
        """Validate, then ``Searcher.find_by_concept`` / ``find_by_file`` / ``find_by_type``: the
        filter first, then the matches ranked by ``args.query`` (newest first without one)."""
        query = self.parser.query(args.query)
        limit, offset = self.parser.page(args.limit, args.offset)
        kw: dict[str, Any] = {"project": _project(args.project), "limit": limit, "offset": offset,
                              "window_days": self.parser.window(args.window_days),
                              "format": Format.FULL if args.full else Format.INDEX}
        if by == "type":
            types = self.parser.types(value)
            if not types:
                raise BadRequest("give an observation type, e.g. bugfix")
            return self.searcher.find_by_type(types, query, **kw)
        text = self.parser.query(value, by).strip() if isinstance(value, str) else ""
        if not text:
            raise BadRequest(f"{by} must be a non-empty string")
        find = self.searcher.find_by_concept if by == "concept" else self.searcher.find_by_file
        return find(text, query, **kw)

    def timeline(self, anchor: str | None, query: str | None, depth_before: int, depth_after: int,
                 project: str | None, full: bool = False) -> tuple[list[Result], tuple[Kind, int]]:
        """Records around an anchor (an id, S/P id, ISO time) or around the best match of ``query``."""
        before, after = self.parser.depths(depth_before, depth_after)
        anchor_text = self.parser.query(anchor, "anchor").strip()
        anchor_text = checked_anchor(anchor_text) if anchor_text else self.parser.query(query).strip()
        if not anchor_text:
            raise BadRequest("give an anchor (123, S12, P5 or an ISO time) or a query")
        return self.searcher.timeline(anchor_text, before, after, _project(project),
                                      Format.FULL if full else Format.INDEX)

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
        results, mode, reason = self.searcher.similar(row_id, bounded(limit, "limit", 1, MAX_LIMIT),
                                                      self.parser.window(window_days))
        return results, mode.value, reason

    def recent(self, project: str | None, limit: int) -> list[Result]:
        """The newest summaries and observations (of a project)."""
        return self.searcher.recent_context(_project(project), bounded(limit, "limit", 1, MAX_LIMIT))
