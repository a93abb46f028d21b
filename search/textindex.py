"""memsync's own BM25 index of the agent's rows (tantivy), the fast path of lexical search.

Why: FTS5 scores every row a query matches (bm25 runs per matching row, and a prefix term first
merges every matching term's whole doclist), so an OR of common words costs 25-70 ms per table at
100k rows and no query plan avoids it. tantivy ranks with block-max WAND, skipping postings that
cannot reach the top-k, and filters on indexed project/type/epoch fields: the three tables of the
same 100k-row database answer in 1.5-2 ms (measured, ``scripts/bench_search.py``).

Ownership: the worker writes it (:class:`TextIndexWriter`, after each sync pass, in its own data
directory; never the agent's database); searches only read it (:class:`TextIndex`). The index
records per kind the highest row id it holds (its watermark). Rows above it (committed since the
worker's last pass, or all of them when no worker runs) are the *tail*, which the search library
takes from FTS5 as before; so the index can be behind, never wrong about new rows. Edits and
deletes reach it at the worker's reconcile (a changed fingerprint rebuilds that kind); deleted rows
are dropped at hydration anyway. Filters it cannot apply (concepts, files) and date order use FTS5.

Text: the app's FTS columns of each table (the same text FTS5 sees), tokenized on letters and
digits, lower-cased, English Snowball stems. Query words get the same analysis, so no prefix
tricks are needed; they are OR-ed as term queries (no query parser, so no input is syntax).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from config.schema import FTS_TABLES, KINDS, TABLES, Kind
from config.settings import Settings
from search import fts
from search.models import Filters, Window
from search.rows import ALIAS, SourceRows

INDEX_DIR = "text-index"
META_FILE = "memsync-meta.json"
VERSION = 1
ANALYZER = "memsync_en"
_CODE = {Kind.OBSERVATION: "o", Kind.SUMMARY: "s", Kind.PROMPT: "p"}
_EPOCH_MAX = 2**62
READ_BATCH = 2000  # rows per SQLite read while (re)indexing


def index_path(settings: Settings) -> Path:
    """Where the index of ``settings``' data directory lives."""
    return settings.data_dir / INDEX_DIR


def _analyzer() -> Any:
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


_query_analyzer: Any = None
_analyzer_lock = threading.Lock()


def _terms(word: str) -> list[str]:
    """The index terms of one query word (the body field's analysis)."""
    global _query_analyzer
    with _analyzer_lock:
        if _query_analyzer is None:
            _query_analyzer = _analyzer()
        return [str(t) for t in _query_analyzer.analyze(word)]


def _schema() -> Any:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("kind", tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("row", indexed=True, fast=True)
    sb.add_text_field("project", tokenizer_name="raw", index_option="basic")  # own and merged-into
    sb.add_text_field("type", tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("epoch", indexed=True, fast=True)
    sb.add_text_field("body", tokenizer_name=ANALYZER, index_option="freq")
    return sb.build()


def _open(path: Path, create: bool) -> Any:
    if create:
        path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(_schema(), path=str(path), reuse=True)
    index.register_tokenizer(ANALYZER, _analyzer())
    return index


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("version") == VERSION else None


def _source_id(db: Path) -> str:
    return str(db.expanduser().resolve())


# -- write side (the worker) -------------------------------------------------------------------


@dataclass
class RefreshResult:
    """What one refresh did, per kind: rows appended and kinds rebuilt."""

    appended: dict[str, int]
    rebuilt: list[str]
    seconds: float
    interrupted: bool = False


class _Stopped(Exception):
    """The caller asked the refresh to stop (its work is rolled back, the index stays as it was)."""


class TextIndexWriter:
    """The one writer of the index (tantivy's own lock keeps a second process out). Not
    thread-safe: the worker calls it from its sync thread only."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path = index_path(settings)
        self._meta = _read_meta(self.path)
        if self._meta is None or self._meta.get("db") != _source_id(settings.db):
            # Another database, an older layout or a half-built index: start from nothing. The meta
            # file goes first, so a crash in between leaves an index no search trusts.
            (self.path / META_FILE).unlink(missing_ok=True)
            if self.path.exists():
                shutil.rmtree(self.path)
            self._meta = {"version": VERSION, "db": _source_id(settings.db), "kinds": {}}
        self._index = _open(self.path, create=True)
        self._writer = self._index.writer(heap_size=15_000_000, num_threads=1)
        self._stop: threading.Event | None = None

    def close(self) -> None:
        """Let merges finish and release the writer lock."""
        with contextlib.suppress(Exception):
            self._writer.wait_merging_threads()

    def refresh(self, rows: SourceRows, full: bool = False, stop: threading.Event | None = None) -> RefreshResult:
        """Append rows above the watermark; with ``full``, also compare each table's fingerprint
        (row count and text length) and rebuild a kind whose older rows changed. ``stop`` ends a
        long rebuild between batches: nothing is committed then, and the next refresh starts over."""
        t0 = time.perf_counter()
        self._stop = stop
        saved = json.loads(json.dumps(self._meta))
        try:
            return self._refresh(rows, full, t0)
        except _Stopped:
            self._writer.rollback()
            self._meta = saved
            return RefreshResult({}, [], time.perf_counter() - t0, interrupted=True)

    def _refresh(self, rows: SourceRows, full: bool, t0: float) -> RefreshResult:
        appended: dict[str, int] = {}
        rebuilt: list[str] = []
        assert self._meta is not None
        kinds_meta: dict[str, Any] = self._meta["kinds"]
        changed = False
        for kind in KINDS:
            cols = _text_columns(rows, kind)
            if not cols:
                continue
            mark = kinds_meta.get(kind.value)
            max_id = rows.max_id(kind)
            if mark is not None and max_id < int(mark["max_id"]):
                mark = None  # ids went down: the database was replaced
            if full and mark is not None and _fingerprint(rows, kind, cols, 0, int(mark["max_id"])) != (
                    int(mark["n"]), int(mark["chars"])):
                mark = None  # an edit or delete below the watermark
            if mark is None:
                self._writer.delete_documents_by_term("kind", _CODE[kind])
                self._add_rows(rows, kind, cols, 0, max_id)
                n, chars = _fingerprint(rows, kind, cols, 0, max_id)
                rebuilt.append(kind.value)
            elif max_id > int(mark["max_id"]):
                old = int(mark["max_id"])
                appended[kind.value] = self._add_rows(rows, kind, cols, old, max_id)
                n, chars = _fingerprint(rows, kind, cols, old, max_id)
                n, chars = n + int(mark["n"]), chars + int(mark["chars"])
            else:
                continue
            kinds_meta[kind.value] = {"max_id": max_id, "n": n, "chars": chars}
            changed = True
        if changed:
            self._writer.commit()
            _write_meta(self.path, self._meta)
        return RefreshResult(appended, rebuilt, time.perf_counter() - t0)

    def _add_rows(self, rows: SourceRows, kind: Kind, cols: list[str], after: int, up_to: int) -> int:
        """Index the rows with after < id <= up_to; returns how many."""
        select = ", ".join(f"{ALIAS}.\"{rows.schema.column(TABLES[kind], c)}\"" for c in cols)
        merged = rows.col(kind, "merged_into_project") if kind is not Kind.PROMPT else None
        type_col = rows.col(kind, "type") if kind is Kind.OBSERVATION else None
        extra = f", {merged}" if merged else ", NULL"
        extra += f", {type_col}" if type_col else ", NULL"
        n = 0
        while True:
            if self._stop is not None and self._stop.is_set():
                raise _Stopped
            batch = rows.query(
                f"SELECT {ALIAS}.id, {rows.project_expr(kind)}, {ALIAS}.created_at_epoch{extra}, {select} "
                f"FROM {TABLES[kind]} {ALIAS} WHERE {ALIAS}.id > ? AND {ALIAS}.id <= ? ORDER BY {ALIAS}.id LIMIT ?",
                [after, up_to, READ_BATCH])
            for r in batch:
                values = list(r)
                doc = tantivy.Document()
                doc.add_text("kind", _CODE[kind])
                doc.add_integer("row", int(values[0]))
                for project in {values[1], values[3]} - {None, ""}:
                    doc.add_text("project", str(project))
                if values[4]:
                    doc.add_text("type", str(values[4]))
                epoch = values[2]
                doc.add_integer("epoch", int(epoch) if isinstance(epoch, int | float) else 0)
                doc.add_text("body", " ".join(str(v) for v in values[5:] if v is not None))
                self._writer.add_document(doc)
            n += len(batch)
            if len(batch) < READ_BATCH:
                return n
            after = int(batch[-1][0])


def _text_columns(rows: SourceRows, kind: Kind) -> list[str]:
    return [c for c in FTS_TABLES[kind][1] if rows.schema.column(TABLES[kind], c)]


def _fingerprint(rows: SourceRows, kind: Kind, cols: list[str], after: int, up_to: int) -> tuple[int, int]:
    """(row count, total text length) of the rows with after < id <= up_to: a cheap stand-in for
    "unchanged" (an edit that keeps every length is missed until the kind is rebuilt)."""
    lengths = " + ".join(f"coalesce(length({ALIAS}.\"{rows.schema.column(TABLES[kind], c)}\"), 0)" for c in cols)
    row = rows.query(f"SELECT count(*), coalesce(sum({lengths}), 0) FROM {TABLES[kind]} {ALIAS} "
                     f"WHERE {ALIAS}.id > ? AND {ALIAS}.id <= ?", [after, up_to])[0]
    return int(row[0]), int(row[1])


def _write_meta(path: Path, meta: dict[str, Any]) -> None:
    tmp = path / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, path / META_FILE)


# -- read side (searches) ----------------------------------------------------------------------

_readers: dict[str, Any] = {}  # one open index per path and process: opening reads every segment's meta
_readers_lock = threading.Lock()


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
        path = index_path(settings)
        meta = _read_meta(path)
        if meta is None or meta.get("db") != _source_id(settings.db):
            return None
        key = str(path)
        try:
            with _readers_lock:
                index = _readers.get(key) or _open(path, create=False)
                index.reload()  # the worker's latest commit
                _readers[key] = index
            return cls(index, meta)
        except (OSError, ValueError):  # half-written or foreign files: FTS5 answers
            _readers.pop(key, None)
            return None

    def watermark(self, kind: Kind) -> int | None:
        """The highest row id of ``kind`` the index holds (None: the kind is not indexed)."""
        return self._marks.get(kind.value)

    @staticmethod
    def supports(filters: Filters) -> bool:
        """Whether the index can apply these filters itself (concepts and files it cannot)."""
        return not filters.concepts and not filters.files

    def _query(self, kind: Kind, text: str, filters: Filters, window: Window | None) -> Any | None:
        terms = list(dict.fromkeys(t for w in fts.tokens(text) for t in _terms(w)))
        if not terms:
            return None
        Q, Occur = tantivy.Query, tantivy.Occur
        words = Q.boolean_query([(Occur.Should, Q.term_query(self._schema, "body", t)) for t in terms])
        must: list[tuple[Any, Any]] = [(Occur.Must, words),
                                       (Occur.Must, Q.term_query(self._schema, "kind", _CODE[kind]))]
        if filters.project:
            must.append((Occur.Must, Q.term_query(self._schema, "project", filters.project)))
        if filters.types:
            must.append((Occur.Must, Q.boolean_query(
                [(Occur.Should, Q.term_query(self._schema, "type", t)) for t in filters.types])))
        if window is not None and (window.start_ms is not None or window.end_ms is not None):
            lo = window.start_ms if window.start_ms is not None else -_EPOCH_MAX
            hi = window.end_ms if window.end_ms is not None else _EPOCH_MAX
            must.append((Occur.Must, Q.range_query(self._schema, "epoch", tantivy.FieldType.Integer, lo, hi)))
        return Q.boolean_query(must)

    def search(self, kind: Kind, text: str, filters: Filters, window: Window | None,
               limit: int) -> list[tuple[int, float]]:
        """(row id, BM25 score) best first, among rows at or below the watermark."""
        query = self._query(kind, text, filters, window)
        if query is None:
            return []
        hits = self._searcher.search(query, limit, count=False).hits
        rows = self._searcher.fast_field_values("row", [addr for _, addr in hits])  # no stored-doc reads
        return [(int(r), float(score)) for (score, _), r in zip(hits, rows, strict=True) if r is not None]

    def count(self, kind: Kind, text: str, filters: Filters, window: Window | None) -> int:
        """How many indexed rows match (e.g. outside the window)."""
        query = self._query(kind, text, filters, window)
        return 0 if query is None else int(self._searcher.search(query, 1, count=True).count or 0)


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
