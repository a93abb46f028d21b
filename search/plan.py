"""How one search is answered, derived once from its request and the settings (``Searcher.search``):
the window applied, how deep each side looks, and which lists the fusion gets. Every side of the
search (lexical, semantic, linked evidence, context) takes the plan."""

from __future__ import annotations

from dataclasses import dataclass

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.settings import Settings
from memsync.search.links import EVIDENCE_KINDS
from memsync.search.models import Filters, Mode, Order, Scope, SearchError, Window, make_window
from memsync.search.request import SearchRequest


@dataclass(frozen=True, slots=True)
class Plan:
    """One search as the engine runs it: the request, its query text without NULs, the kinds (all
    when the request names none), the window and scope, ``need`` (offset + limit) and ``depth`` (rows per
    ranked list); ``linked`` and ``context`` say whether the linked evidence and the context list
    take part."""

    request: SearchRequest
    query: str
    kinds: tuple[Kind, ...]
    window: Window  # the scope's window (never None here)
    scope: Scope
    need: int
    depth: int
    linked: bool
    context: bool

    @classmethod
    def of(cls, request: SearchRequest, settings: Settings) -> Plan:
        """The plan of ``request``; SearchError for an empty page or a negative window."""
        if request.limit < 1 or request.offset < 0:
            raise SearchError("limit must be at least 1 and offset at least 0")
        filters, kinds = request.filters, tuple(request.kinds or KINDS)
        window = make_window(request.window_days, settings.window_days, filters.date_from, filters.date_to)
        query = request.query.replace("\x00", " ") if isinstance(request.query, str) else ""
        need = request.offset + request.limit
        # Linked evidence (observations vouching for the prompt they were recorded under) only when
        # prompts are searched without observations: with both, each observation is a result of its
        # own, and boosting its prompt too would count the same evidence twice (prompts then
        # crowded observations out of mixed results). Linked evidence and the context list only
        # reorder by relevance: date order skips them.
        ranked_hybrid = request.mode is Mode.HYBRID and request.order is Order.RELEVANCE
        linked = ranked_hybrid and Kind.PROMPT in kinds and Kind.OBSERVATION not in kinds
        # The context list is a second dense list of prompts only: in a search of several kinds it
        # would count prompts' semantic evidence twice and crowd the other kinds out.
        context = ranked_hybrid and set(kinds) == {Kind.PROMPT}
        return cls(request, query, kinds, window, Scope(filters, window), need, max(settings.candidates, need),
                   linked, context)

    @property
    def filters(self) -> Filters:
        """The request's filters."""
        return self.scope.filters

    @property
    def evidence_kinds(self) -> tuple[Kind, ...]:
        """The kinds searched as evidence for linked prompts (none without linked evidence)."""
        return tuple(k for k in EVIDENCE_KINDS if k not in self.kinds) if self.linked else ()

    @property
    def wanted(self) -> set[Kind]:
        """Every kind a side looks for: the results' and the evidence's."""
        return set(self.kinds) | set(self.evidence_kinds)
