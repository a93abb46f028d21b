"""The lookups built on search and the source rows: find_by_*, get, timeline, recent context, similar.

:class:`Lookups` is a base of :class:`search.engine.Searcher`; it asks the engine for ``search``
and the vector store, and everything else of SQLite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.docids import possible_doc_ids
from memsync.config.records import InvalidRecordId, RecordRefError, ms_from_iso, parse_record_ref, valid_row_id
from memsync.config.settings import Settings
from memsync.search import fts, hydrate
from memsync.search.hydrate import PageEntry
from memsync.search.models import (
    Filters,
    Format,
    Key,
    Mode,
    Order,
    Response,
    Result,
    Scope,
    SearchError,
    Signal,
    make_window,
)
from memsync.search.request import SearchRequest
from memsync.search.semantic import passing_hits
from memsync.search.sql import SourceRows
from memsync.search.vectorstore import VectorStore, VectorUnavailable

_TIMELINE_KIND_ORDER = {Kind.PROMPT: 0, Kind.OBSERVATION: 1, Kind.SUMMARY: 2}  # same date: prompt first


class Lookups(ABC):
    """find_by_*, get, timeline, recent_context, similar, and the lists a caller validates against."""

    settings: Settings

    @abstractmethod
    def search(self, request: SearchRequest) -> Response:
        """Hybrid search (``search.engine``)."""

    @property
    @abstractmethod
    def vector(self) -> VectorStore:
        """The vector store (``search.engine``)."""

    def _rows(self) -> SourceRows:
        """A connection to the agent's database for one call; the caller closes it."""
        return SourceRows.open(self.settings)

    def find_by(self, request: SearchRequest) -> Response:
        """Filter first in SQLite (concept, file or type: the request's filters), then rank the
        matches by meaning of its query when one is given (recency breaks ties), else newest first.
        The filter is applied before any cut, so no match is lost to rows outside it."""
        return self.search(replace(request, order=Order.RELEVANCE if fts.tokens(request.query) else Order.NEWEST))

    def find_by_concept(self, concept: str, query: str = "", **kw: Any) -> Response:
        """Observations tagged with ``concept`` (substring of the concepts list), ranked by ``query``;
        ``kw``: ``project`` and any other field of :class:`SearchRequest`."""
        return self.find_by(SearchRequest(query=query, kinds=(Kind.OBSERVATION,),
                                          filters=Filters(project=kw.pop("project", None), concepts=(concept,)), **kw))

    def find_by_file(self, path: str, query: str = "", **kw: Any) -> Response:
        """Observations and summaries whose files read/modified contain ``path``, ranked by ``query``."""
        return self.find_by(SearchRequest(query=query, kinds=(Kind.OBSERVATION, Kind.SUMMARY),
                                          filters=Filters(project=kw.pop("project", None), files=(path,)), **kw))

    def find_by_type(self, types: str | Sequence[str], query: str = "", **kw: Any) -> Response:
        """Observations of the given type(s) (e.g. bugfix, feature), ranked by ``query``."""
        wanted = (types,) if isinstance(types, str) else tuple(types)
        return self.find_by(SearchRequest(query=query, kinds=(Kind.OBSERVATION,),
                                          filters=Filters(project=kw.pop("project", None), types=wanted), **kw))

    def get(self, kind: Kind, ids: Sequence[int]) -> tuple[list[dict[str, Any]], list[int]]:
        """Full records in the requested order, and the ids that do not exist (an id past
        SQLite's 64-bit range cannot: it is not sent to SQLite, where it would overflow)."""
        rows = self._rows()
        try:
            found = hydrate.records(rows, kind, [i for i in ids if valid_row_id(i)])
        finally:
            rows.close()
        return [found[i] for i in ids if i in found], [i for i in ids if i not in found]

    def observation_types(self) -> list[str]:
        """The observation types this database uses (for validating a type filter)."""
        rows = self._rows()
        try:
            return rows.distinct(Kind.OBSERVATION, "type")
        finally:
            rows.close()

    def projects(self) -> list[str]:
        """The projects that have observations or summaries, sorted; excluded ones left out."""
        rows = self._rows()
        try:
            return sorted(set(rows.distinct(Kind.OBSERVATION, "project")) | set(rows.distinct(Kind.SUMMARY, "project")))
        finally:
            rows.close()

    def recent_context(self, project: str | None = None, limit: int = 10,
                       kinds: Sequence[Kind] = (Kind.SUMMARY, Kind.OBSERVATION)) -> list[Result]:
        """The newest summaries and observations (of a project), newest first."""
        return self.search(SearchRequest(kinds=kinds, filters=Filters(project=project), window_days=0, limit=limit,
                                         order=Order.NEWEST)).results

    def timeline(self, anchor: str, depth_before: int = 5, depth_after: int = 5,
                 project: str | None = None, format: Format = Format.INDEX) -> tuple[list[Result], Key]:
        """Records around an anchor, chronological, counted in records; returns them and the
        anchor's key (also marked with ``field='anchor'``). Anchor: ``123``/``#123`` (observation),
        ``S123`` (summary), ``P123`` (prompt), an ISO timestamp, or a query (its best match)."""
        if depth_before < 0 or depth_after < 0:
            raise SearchError("depths must be 0 or more")
        rows = self._rows()
        try:
            key, epoch = self._anchor(rows, anchor, project)
            candidates: dict[Key, int] = {}
            for kind in KINDS:
                for i, e in rows.around(kind, epoch, project, "<=", depth_before + 1):
                    candidates[(kind, i)] = e
                for i, e in rows.around(kind, epoch, project, ">=", depth_after + 1):
                    candidates[(kind, i)] = e
            if key is not None:
                candidates.setdefault(key, epoch)
            ordered = sorted(candidates, key=lambda k: (candidates[k], _TIMELINE_KIND_ORDER[k[0]], k[1]))
            if key is None:  # a timestamp: the anchor is the first record at or after it
                after = [k for k in ordered if candidates[k] >= epoch]
                key = after[0] if after else (ordered[-1] if ordered else None)
            if key is None:
                return [], (Kind.OBSERVATION, 0)
            pos = ordered.index(key)
            page = [PageEntry(k, 1.0, False, False) for k in ordered[max(0, pos - depth_before):pos + depth_after + 1]]
            results = hydrate.results(rows, page, {}, format, fused=False)
            for r in results:
                r.signals = Signal.LEXICAL
                if r.key == key:
                    r.field = "anchor"
            return results, key
        finally:
            rows.close()

    def _anchor(self, rows: SourceRows, anchor: str, project: str | None) -> tuple[Key | None, int]:
        """The anchor's key and date; a timestamp has no key."""
        text = anchor.strip()
        try:
            kind, i = parse_record_ref(text)
        except InvalidRecordId as exc:  # "0", "S0", "P-1", past int64: a wrong id, not a query
            raise SearchError(str(exc)) from None
        except RecordRefError:
            pass
        else:
            epochs = rows.epochs(kind, [i])
            if i not in epochs:
                raise SearchError(f"no {kind.value} with id {i}")
            return (kind, i), epochs[i]
        try:
            return None, ms_from_iso(text)
        except RecordRefError:
            pass
        found = self.search(SearchRequest(query=text, filters=Filters(project=project), window_days=0, limit=1))
        if not found.results:
            raise SearchError(f"nothing matches {text[:80]!r}")
        best = found.results[0]
        return best.key, int(best.created_at_epoch or 0)

    def similar(self, observation_id: int, limit: int = 10, window_days: int | None = 0
                ) -> tuple[list[Result], Mode, str | None]:
        """Past rows most like an observation, best first; ``field == 'near_duplicate'`` marks rows
        at or above the near-duplicate cosine (settings.near_duplicate). Falls back to a lexical
        search on the observation's own text when Chroma cannot answer."""
        try:
            parse_record_ref(observation_id)  # an id past SQLite's 64-bit range would overflow there
        except RecordRefError as exc:
            raise SearchError(str(exc)) from None
        rows = self._rows()
        try:
            found = hydrate.records(rows, Kind.OBSERVATION, [observation_id])
            if observation_id not in found:
                raise SearchError(f"no observation with id {observation_id}")
            row = found[observation_id]
            facts = row.get("facts") if isinstance(row.get("facts"), list) else []
            doc_ids = possible_doc_ids(Kind.OBSERVATION, observation_id, len(facts or []))
        finally:
            rows.close()
        text = " ".join(str(row.get(k) or "") for k in ("title", "subtitle", "narrative", "text"))
        try:
            vectors = self.vector.vectors(doc_ids)
            if not vectors:
                raise VectorUnavailable(f"observation {observation_id} is not synced yet")
            mean = np.mean(list(vectors.values()), axis=0)
            mean /= float(np.linalg.norm(mean)) or 1.0
            hits = self.vector.nearest(mean.astype(np.float32), self.settings.candidates)
        except VectorUnavailable as exc:
            resp = self.search(SearchRequest(query=text, window_days=window_days, limit=limit + 1, mode=Mode.LEXICAL,
                                               show_all=True))
            results = [r for r in resp.results if r.key != (Kind.OBSERVATION, observation_id)][:limit]
            return results, Mode.LEXICAL_FALLBACK, str(exc)
        hits = [h for h in hits if (h.kind, h.id) != (Kind.OBSERVATION, observation_id)]
        window = make_window(window_days, self.settings.window_days)
        rows = self._rows()
        try:
            if window.start_ms is not None:
                hits = passing_hits(rows, hits, set(KINDS), Scope(Filters(), window))
            page = [PageEntry((h.kind, h.id), h.similarity, True, False) for h in hits[:limit]]
            results = hydrate.results(rows, page, {(h.kind, h.id): h for h in hits}, Format.INDEX, fused=False)
        finally:
            rows.close()
        for r in results:
            if r.similarity is not None and r.similarity >= self.settings.near_duplicate:
                r.field = "near_duplicate"
        return results, Mode.SEMANTIC, None
