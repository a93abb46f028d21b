"""Reading memsync's own BM25 index (tantivy), the fast path of lexical search.

The index (layout: ``config.textindex``) is written by the worker (``worker.stores.textsync``) after each
sync pass; searches only read it. It records per kind the highest row id it holds (its watermark).
Rows above it (committed since the worker's last pass, or all of them when no worker runs) are the
*tail*, which the lexical side (``search.lexical``) takes from FTS5: the index can be behind, never
wrong about new rows. Edits and deletes reach it at the worker's reconcile; deleted rows are dropped at hydration
anyway. Filters it cannot apply (concepts, files) and date order use FTS5. An index that cannot
be trusted (memsync's record disagrees with it, a segment file fails its checksum, tantivy fails
or panics reading it: :class:`TextIndexDamaged`) is never opened for writing or created here:
the search ranks with FTS5 and says why, and the worker rebuilds it. Query words get the
body field's analysis and are OR-ed as term queries (no query parser, so no input is syntax).

Pseudo-relevance feedback (RM3-style, ``expanded``): the words that the best few matches share
and the query lacks, weighted by how well those matches scored and how rare the words are, are
added to the query at a fraction of a query word's weight. A memory's question rarely uses the
words of the turn that answers it ("support group" asked, "LGBTQ meeting" written); the top
matches usually carry some of them. Measured on the LoCoMo dev set with no observations
(``scripts/bench_quality.py``): lexical recall@10 0.612 → 0.619, the fused hybrid 0.678 → 0.701.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import tantivy

from memsync.config.claude_mem.schema import Kind
from memsync.config.errors import MemsyncError
from memsync.config.formats.text_index import (
    KIND_TERM,
    META_FILE,
    TANTIVY_META,
    CheckedFile,
    TextIndexDamaged,
    analyzed,
    disagreement,
    garbled_files,
    index_path,
    meta_unreadable,
    open_index,
    read_meta,
    source_id,
    terms,
)
from memsync.config.native import guarded
from memsync.config.settings import Settings
from memsync.search import fts
from memsync.search.models import Filters, Scope

_EPOCH_MAX = 2**62
# The filters the index applies itself (its fields; dates are its window): a search with any other
# filter asks FTS5, which applies every filter in SQL.
INDEXED_FILTERS = frozenset({"project", "types", "date_from", "date_to"})
FEEDBACK_DOCS = 5  # best matches whose words expand the query
FEEDBACK_TERMS = 8  # words added
FEEDBACK_WEIGHT = 0.3  # an added word's weight, against 1 for a query word
FEEDBACK_MAX_DF = 0.1  # words in more than this share of the indexed rows say nothing: never added
_readers: dict[str, Any] = {}  # one open index per path and process: opening reads every segment's meta
# An index found damaged, per path: the two meta files' stats then, why, and when. Until either
# changes (the worker rebuilt it), or for DAMAGED_RECHECK_S, searches answer from FTS5 without
# opening it again: each read of a damaged segment can panic again, and tantivy prints every
# panic to stderr.
_damaged: dict[str, tuple[tuple[tuple[int, int, int], ...], str, float]] = {}
DAMAGED_RECHECK_S = 30.0
# Per path, the segment files whose checksums matched (``garbled_files``): a process checks each
# file once, and again only when it changes; a one-shot search reads the whole index (about 0.75 ms
# per MB of index, measured on this machine's zlib.crc32).
_verified: dict[str, dict[str, CheckedFile]] = {}
_verify_lock = threading.Lock()  # one check at a time per process: the searches' threads share the memo
_readers_lock = threading.Lock()


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """A read of the index: whatever tantivy fails with (a panic through ``config.native``, or its
    errors for files it cannot read) is :class:`TextIndexDamaged`; memsync's own errors (a
    query timeout of the FTS5 texts the feedback reads) pass."""
    try:
        with guarded("tantivy", TextIndexDamaged):
            yield
    except MemsyncError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:  # half-written, foreign or damaged files
        raise TextIndexDamaged(f"{type(exc).__name__}: {exc}"[:120]) from exc


def _damage(path: Path, meta: dict[str, Any], verified: dict[str, CheckedFile]) -> str | None:
    """Why the index disagrees with memsync's record or has a garbled file (tantivy's meta.json
    deleted, an index recreated empty, a segment overwritten in place: tantivy checks no checksum
    when it reads, and panics or ranks from garbage), when a second look agrees: a merge of the
    worker's can remove a file between reading tantivy's meta.json and the file."""
    def look() -> str | None:
        return disagreement(path, meta) or garbled_files(path, verified)

    return look() and look()


def _stamps(path: Path) -> tuple[tuple[int, int, int], ...]:
    """The stats of the index's two meta files (zeros for a missing one)."""
    out = []
    for name in (META_FILE, TANTIVY_META):
        try:
            st = os.stat(path / name)
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


class TextIndex:
    """A read-only view of the index for one search; see the module docstring."""

    def __init__(self, index: Any, meta: dict[str, Any]) -> None:
        self._index = index
        self._searcher = index.searcher()
        self._marks = {k: int(v["max_id"]) for k, v in meta.get("kinds", {}).items()}
        self._schema = index.schema

    @classmethod
    def open(cls, settings: Settings) -> TextIndex | None:
        """The index when there is one for this database, else None (searches then use FTS5)."""
        return cls.open_checked(settings)[0]

    @classmethod
    def open_checked(cls, settings: Settings) -> tuple[TextIndex | None, str | None]:
        """:meth:`open`, and when the index is there but cannot be read (damaged files), why: the
        worker rebuilds it, and the search says that FTS5 ranked in its place."""
        path = index_path(settings)
        key, stamps = str(path), _stamps(path)
        with _readers_lock:
            seen = _damaged.get(key)
            verified = _verified.setdefault(key, {})
        if seen is not None and seen[0] == stamps and time.monotonic() - seen[2] < DAMAGED_RECHECK_S:
            return None, seen[1]
        meta = read_meta(path)
        if meta is None or meta.get("db") != source_id(settings.db):
            return None, "its meta file is unreadable" if meta_unreadable(path) else None
        try:
            with _verify_lock:
                why = _damage(path, meta, verified)
            if why is not None:
                raise TextIndexDamaged(why)
            with _readers_lock, reading():
                index = _readers.get(key) or open_index(path, create=False)  # never creates one
                index.reload()  # the worker's latest commit
                _readers[key] = index
                _damaged.pop(key, None)
            return cls(index, meta), None
        except TextIndexDamaged as exc:  # FTS5 answers
            forget(settings, str(exc), stamps)
            return None, str(exc)

    def watermark(self, kind: Kind) -> int | None:
        """The highest row id of ``kind`` the index holds (None: the kind is not indexed)."""
        return self._marks.get(kind.value)

    @staticmethod
    def supports(filters: Filters) -> bool:
        """Whether the index can apply these filters itself (project, types and dates; not concepts,
        files, platform or any other)."""
        return filters.supported(INDEXED_FILTERS)

    def _query(self, kind: Kind, text: str, scope: Scope, extra: Mapping[str, float] | None = None) -> Any | None:
        wanted = query_terms(text)
        if not wanted:
            return None
        Q, Occur = tantivy.Query, tantivy.Occur
        should = [(Occur.Should, Q.term_query(self._schema, "body", t)) for t in wanted]
        should.extend((Occur.Should, Q.boost_query(Q.term_query(self._schema, "body", t), boost))
                      for t, boost in (extra or {}).items())
        words = Q.boolean_query(should)
        must: list[tuple[Any, Any]] = [(Occur.Must, words),
                                       (Occur.Must, Q.term_query(self._schema, "kind", KIND_TERM[kind]))]
        filters, window = scope.filters, scope.window
        if names := filters.projects():
            # Several names (a worktree's and its repository's) as one set, which scores the same for
            # each: term queries would add each project's IDF and favour the smaller project's rows.
            must.append((Occur.Must, Q.term_query(self._schema, "project", names[0]) if len(names) == 1
                         else Q.term_set_query(self._schema, "project", list(names))))
        if filters.types:
            must.append((Occur.Must, Q.boolean_query(
                [(Occur.Should, Q.term_query(self._schema, "type", t)) for t in filters.types])))
        if window is not None and (window.start_ms is not None or window.end_ms is not None):
            lo = window.start_ms if window.start_ms is not None else -_EPOCH_MAX
            hi = window.end_ms if window.end_ms is not None else _EPOCH_MAX
            must.append((Occur.Must, Q.range_query(self._schema, "epoch", tantivy.FieldType.Integer, lo, hi)))
        return Q.boolean_query(must)

    def search(self, kind: Kind, text: str, scope: Scope, limit: int,
               extra: Mapping[str, float] | None = None) -> list[tuple[int, float]]:
        """(row id, BM25 score) best first, among rows at or below the watermark within the scope's
        filters and window; ``extra`` words are added to the query with their weights."""
        with reading():
            query = self._query(kind, text, scope, extra)
            if query is None:
                return []
            hits = self._searcher.search(query, limit, count=False).hits
            rows = self._searcher.fast_field_values("row", [addr for _, addr in hits])  # no stored-doc reads
        return [(int(r), float(score)) for (score, _), r in zip(hits, rows, strict=True) if r is not None]

    def weak(self, kind: Kind, text: str, rows: Sequence[int]) -> set[int]:
        """The ``rows`` of ``kind`` that hold only words of the query common in English
        (``fts.common``: "people", "two", "time"), none of its rarer ones: left to the dense side,
        which knows what they mean. None when the query has only common words or only rarer ones
        (nothing to tell its matches apart by)."""
        rare = [t for w in fts.rarer(fts.tokens(text)) for t in terms(w)]
        if not rows or not rare:
            return set()
        Q, Occur = tantivy.Query, tantivy.Occur
        query = Q.boolean_query([
            (Occur.Must, Q.boolean_query([(Occur.Should, Q.term_query(self._schema, "body", t)) for t in rare])),
            (Occur.Must, Q.term_query(self._schema, "kind", KIND_TERM[kind])),
            (Occur.Must, Q.term_set_query(self._schema, "row", list(rows)))])
        with reading():
            hits = self._searcher.search(query, len(rows), count=False).hits
            held = self._searcher.fast_field_values("row", [addr for _, addr in hits])
        return set(rows) - {int(r) for r in held if r is not None}

    def expanded(self, kind: Kind, text: str, scope: Scope, limit: int,
                 texts: Callable[[list[int]], Mapping[int, str]]) -> list[tuple[int, float]]:
        """``search`` with pseudo-relevance feedback (see the module docstring); ``texts`` gives the
        indexed text of rows by id (the index stores none). The plain ranking when nothing is added.
        Weak matches (``weak``) are left out, and give no feedback words."""
        first = self.search(kind, text, scope, limit)
        weak = self.weak(kind, text, [row for row, _ in first])
        first = [hit for hit in first if hit[0] not in weak]
        top = first[:FEEDBACK_DOCS]
        if not top or top[0][1] <= 0:
            return first
        own = set(query_terms(text))
        bodies = texts([row for row, _ in top])
        weight: dict[str, float] = {}
        for row, score in top:
            for term in set(analyzed(bodies.get(row, ""))) - own:
                weight[term] = weight.get(term, 0.0) + score / top[0][1]
        with reading():
            n_docs = max(1, self._searcher.num_docs)
            for term in list(weight):
                df = self._searcher.doc_freq("body", term)
                weight[term] = weight[term] * math.log(n_docs / (1 + df)) if df <= FEEDBACK_MAX_DF * n_docs else 0.0
        best = sorted((w, t) for t, w in weight.items() if w > 0)[::-1][:FEEDBACK_TERMS]
        extra = {t: FEEDBACK_WEIGHT for _, t in best}
        if not extra:
            return first
        return [hit for hit in self.search(kind, text, scope, limit, extra) if hit[0] not in weak]

    def count(self, kind: Kind, text: str, scope: Scope) -> int:
        """How many indexed rows match within the scope's filters and window (e.g. outside the window)."""
        with reading():
            query = self._query(kind, text, scope)
            return 0 if query is None else int(self._searcher.search(query, 1, count=True).count or 0)


def forget(settings: Settings, why: str, stamps: tuple[tuple[int, int, int], ...] | None = None) -> None:
    """The index was found damaged (``why``): drop this process's open reader, and answer from
    FTS5 without opening it again until its meta files change (the worker rebuilt it)."""
    path = index_path(settings)
    key = str(path)
    with _readers_lock:
        _readers.pop(key, None)
        _damaged[key] = (stamps if stamps is not None else _stamps(path), why, time.monotonic())


def query_terms(text: str) -> list[str]:
    """The index terms of a query's words, in order, once each."""
    return list(dict.fromkeys(t for w in fts.tokens(text) for t in terms(w)))


def merge_tail(indexed: Sequence[int], tail: Sequence[int], limit: int) -> list[int]:
    """The index's ranked ids and the FTS5-ranked tail (newer rows) interleaved, first from each in
    turn: the two BM25 scores come from different statistics, so ranks are what can be compared.
    The tail is usually a few rows from the last second."""
    out: dict[int, None] = {}
    for pair in zip(indexed, tail, strict=False):
        out.update(dict.fromkeys(pair))
    longer = indexed if len(indexed) > len(tail) else tail
    out.update(dict.fromkeys(longer[min(len(indexed), len(tail)):]))
    return list(out)[:limit]
