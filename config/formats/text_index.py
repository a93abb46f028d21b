"""The layout of memsync's own BM25 index of the agent's rows (tantivy), shared by the worker, which
owns and writes it (``worker.textsync``), and the search, which only reads it (``search.textindex``).

Why it exists: FTS5 scores every row a query matches (bm25 runs per matching row, and a prefix term
first merges every matching term's whole doclist), so an OR of common words costs 25-70 ms per
table at 100k rows whatever the plan. tantivy ranks with block-max WAND, skipping postings that
cannot reach the top-k, and filters on indexed project/type/epoch fields: three tables of the same
database answer in 2-3 ms (``scripts/bench_search.py``).

Layout: one document per row with ``kind`` (o/s/p), ``row`` (the row id, a fast field),
``project`` (its own and the one it was merged into), ``type``, ``epoch`` (created_at_epoch) and
``body``: the app's FTS columns of the table (the text FTS5 sees), tokenized on letters and digits,
lower-cased, English Snowball stems; CJK runs as their characters and bigrams (``config.cjk``).
``memsync-meta.json`` says which database the index is of and, per kind, the highest row id it
holds (the watermark) with a fingerprint of the rows up to it.

Checked, never trusted (issue 24): an index whose files tantivy cannot open or read (a damaged
``meta.json``, a segment file missing or garbled: :func:`unreadable`) is rebuilt by the worker from
the database, and searches rank with FTS5 meanwhile and say so in their reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tantivy

from memsync.config import cjk
from memsync.config.claude_mem.schema import FTS_TABLES, Kind
from memsync.config.settings import Settings

INDEX_DIR = "text-index"
META_FILE = "memsync-meta.json"
# 4: CJK runs indexed as characters and bigrams (config.cjk); 3: fingerprints hash the filter cells
# too (2 had the text only). An index of another version is rebuilt.
VERSION = 4
ANALYZER = "memsync_en"
KIND_TERM: dict[Kind, str] = {Kind.OBSERVATION: "o", Kind.SUMMARY: "s", Kind.PROMPT: "p"}  # the `kind` field's term
FINGERPRINT_HASH_BYTES = 4  # per-row hashes that SQLite sums: 2^31 rows before an int64 could overflow


def index_path(settings: Settings) -> Path:
    """Where the index of ``settings``' data directory lives."""
    return settings.data_dir / INDEX_DIR


# The row cells, besides the text, that the index filters on (a prompt's project is its session's):
# part of each row's fingerprint, so that an edit of one of them (a project rewritten in place)
# rebuilds the kind as an edited text does.
FILTER_COLUMNS: dict[Kind, tuple[str, ...]] = {
    Kind.OBSERVATION: ("project", "merged_into_project", "type", "created_at_epoch"),
    Kind.SUMMARY: ("project", "merged_into_project", "created_at_epoch"),
    Kind.PROMPT: ("created_at_epoch",),
}


def text_columns(kind: Kind) -> tuple[str, ...]:
    """The logical columns whose text a row of ``kind`` is indexed by (the app's FTS columns)."""
    return tuple(FTS_TABLES[kind][1])


def fingerprint_hash(*values: bytes | None) -> int:
    """The 32-bit hash of one row's id and text columns whose sum over a table's rows is the meta
    file's per-kind ``hash`` (changing it needs a new ``VERSION``). The values come as blobs, so any
    bytes hash and no invalid UTF-8 can fail the call; length-prefixed, so moving text between
    columns changes it."""
    h = hashlib.blake2b(digest_size=FINGERPRINT_HASH_BYTES)
    for v in values:
        h.update(b"\xff" * 8 if v is None else len(v).to_bytes(8, "little") + v)
    return int.from_bytes(h.digest(), "little")


def analyzer() -> Any:
    """The body field's analysis: simple tokenizer, long tokens dropped, lower case, Snowball stems."""
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.stemmer("english"))
            .build())


_query_analyzer: Any = None
_analyzer_lock = threading.Lock()


def body(texts: Iterable[str]) -> str:
    """The body field's value for a row's text columns: joined, CJK runs cut (``config.cjk``)."""
    return cjk.index_form(" ".join(texts))


def _analyze(text: str) -> list[str]:
    global _query_analyzer
    with _analyzer_lock:
        if _query_analyzer is None:
            _query_analyzer = analyzer()
        return [str(t) for t in _query_analyzer.analyze(text)]


def analyzed(text: str) -> list[str]:
    """The index terms of a row's text (the same analysis as the body field, :func:`body` included)."""
    return _analyze(cjk.index_form(text))


def terms(word: str) -> list[str]:
    """The index terms of one query word (``search.fts.tokens`` already cut CJK runs into bigrams)."""
    return _analyze(word)


def schema() -> Any:
    """The index's tantivy schema."""
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("kind", tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("row", indexed=True, fast=True)
    sb.add_text_field("project", tokenizer_name="raw", index_option="basic")
    sb.add_text_field("type", tokenizer_name="raw", index_option="basic")
    sb.add_integer_field("epoch", indexed=True, fast=True)
    sb.add_text_field("body", tokenizer_name=ANALYZER, index_option="freq")
    return sb.build()


def open_index(path: Path, create: bool) -> Any:
    """The tantivy index at ``path`` with memsync's analyzer registered."""
    if create:
        path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(schema(), path=str(path), reuse=True)
    index.register_tokenizer(ANALYZER, analyzer())
    # Reloaded only when asked (every reader here calls reload()): tantivy's default reloads a
    # reader in a background thread whenever meta.json changes, which opened every segment again
    # after each of the worker's own commits for a reader it never uses, and in a search process
    # read segment files off the caller's thread.
    index.config_reader(reload_policy="manual")
    return index


def unreadable(path: Path) -> str | None:
    """Why the tantivy index at ``path`` cannot be read (None: it opens and answers a query over
    every segment). Costs an open of the index, a few ms: tantivy reads every segment's footer."""
    try:
        index = open_index(path, create=False)
        index.reload()
        searcher = index.searcher()
        hits = searcher.search(tantivy.Query.all_query(), 1).hits
        searcher.fast_field_values("row", [addr for _, addr in hits])
    except (OSError, ValueError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


def meta_unreadable(path: Path) -> bool:
    """Whether the index's meta file is there but cannot be parsed (a damaged file, not a missing one)."""
    try:
        json.loads((path / META_FILE).read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return False


def read_meta(path: Path) -> dict[str, Any] | None:
    """The index's meta file, or None when missing, unreadable or of another layout version."""
    try:
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("version") == VERSION else None


def write_meta(path: Path, meta: dict[str, Any]) -> None:
    """Replace the meta file atomically (after the commit it describes)."""
    tmp = path / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, path / META_FILE)


def source_id(db: Path) -> str:
    """How the meta file names the database it indexes."""
    return str(db.expanduser().resolve())
