"""The layout of memsync's own BM25 index of the agent's rows (tantivy), shared by the worker, which
owns and writes it (``worker.stores.textsync``), and the search, which only reads it (``search.textindex``).

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

Checked, never trusted (:func:`unreadable`): an index whose files tantivy cannot open or read (a
damaged or missing ``meta.json``, a segment file missing or garbled) or that disagrees with
memsync's own record of it (the meta file records the commit's opstamp and live documents: an
index recreated empty, or rolled back, does not hold them) is rebuilt by the worker from the
database, and searches rank with FTS5 meanwhile and say so in their reason. Every segment file
ends with tantivy's footer holding the CRC-32 of the bytes before it; a file garbled in place keeps
its size and footer, and tantivy itself checks no checksum when it reads (it panics, or ranks from
garbage), so the check recomputes them (:func:`garbled_files`). Readers never create anything: an
index whose ``meta.json`` is gone stays gone (tantivy's own open would create an empty one).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import zlib
from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any

import tantivy

from memsync.config import cjk
from memsync.config.claude_mem.schema import FTS_TABLES, Kind
from memsync.config.errors import MemsyncError
from memsync.config.native import guarded
from memsync.config.settings import Settings

INDEX_DIR = "text-index"
META_FILE = "memsync-meta.json"
TANTIVY_META = "meta.json"  # tantivy's own: the committed segments
# A segment's files (tantivy 0.2x); a deletes file is ``<segment>.<opstamp>.del``.
SEGMENT_FILES = (".idx", ".term", ".store", ".fast", ".fieldnorm", ".pos")
FOOTER_MAGIC = 1337  # tantivy's footer: JSON {"version": ..., "crc": CRC-32 of the body}, its length, this
CRC_CHUNK = 1 << 20  # bytes read at a time while checking a file's CRC
# 4: CJK runs indexed as characters and bigrams (config.cjk); 3: fingerprints hash the filter cells
# too (2 had the text only). An index of another version is rebuilt.
VERSION = 4
ANALYZER = "memsync_en"
KIND_TERM: dict[Kind, str] = {Kind.OBSERVATION: "o", Kind.SUMMARY: "s", Kind.PROMPT: "p"}  # the `kind` field's term
FINGERPRINT_HASH_BYTES = 4  # per-row hashes that SQLite sums: 2^31 rows before an int64 could overflow


class TextIndexDamaged(MemsyncError):
    """memsync's text index cannot be read: a file tantivy fails on (or panics on), a garbled
    segment, a ``meta.json`` gone, an index that disagrees with memsync's record of it. Searches
    answer from FTS5 and say so in their reason; the worker deletes the index and rebuilds it."""


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
    with _analyzer_lock, guarded("tantivy's analyzer", TextIndexDamaged):
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
    """The tantivy index at ``path`` with memsync's analyzer registered. Without ``create`` (every
    reader) an index that is not there raises ValueError and nothing is written: tantivy's
    ``Index(schema, path)`` would create an empty index where a ``meta.json`` was lost, and that
    empty index would then pass for the real one."""
    if create:
        path.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(schema(), path=str(path), reuse=True)
    else:
        index = tantivy.Index.open(str(path))
    index.register_tokenizer(ANALYZER, analyzer())
    # Reloaded only when asked (every reader here calls reload()): tantivy's default reloads a
    # reader in a background thread whenever meta.json changes, which opened every segment again
    # after each of the worker's own commits for a reader it never uses, and in a search process
    # read segment files off the caller's thread.
    index.config_reader(reload_policy="manual")
    return index


def committed(path: Path) -> tuple[int, int] | None:
    """(opstamp, live documents) of the index's last commit, from tantivy's ``meta.json``; None
    when there is none. ValueError when it cannot be parsed. Merges keep both."""
    try:
        meta = json.loads((path / TANTIVY_META).read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"tantivy's {TANTIVY_META} is unreadable: {exc}") from exc
    try:
        live = sum(int(seg["max_doc"]) - int((seg.get("deletes") or {}).get("num_deleted_docs", 0))
                   for seg in meta["segments"])
        return int(meta["opstamp"]), live
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"tantivy's {TANTIVY_META} is not an index's: {exc}") from exc


def disagreement(path: Path, meta: dict[str, Any]) -> str | None:
    """How the index at ``path`` disagrees with memsync's record of it (``meta``: the opstamp and
    live documents of the commit the worker last recorded); None when it agrees, or the record
    predates these fields. An index newer than the record (the worker committed and has not yet
    written the meta file) agrees: its watermarks are only lower than the index's."""
    try:
        index = committed(path)
    except ValueError as exc:
        return str(exc)
    if index is None:
        return f"tantivy's {TANTIVY_META} is missing"
    opstamp, docs = index
    if "opstamp" not in meta or "docs" not in meta:
        # A record from before these fields: an index recreated empty (by a reader of an older
        # memsync, where a meta.json was lost) still shows, as rows recorded and none held.
        rows = sum(int(k.get("n", 0)) for k in meta.get("kinds", {}).values())
        return f"the index is empty, memsync recorded {rows} rows" if docs == 0 and rows else None
    if opstamp < int(meta["opstamp"]):
        return f"the index is at commit {opstamp}, memsync recorded commit {meta['opstamp']}"
    if opstamp == int(meta["opstamp"]) and docs != int(meta["docs"]):
        return f"the index holds {docs} documents, memsync recorded {meta['docs']}"
    return None


CheckedFile = tuple[int, int, int]  # inode, size, mtime_ns: a file checked once is not read again until it changes


def garbled_files(path: Path, verified: MutableMapping[str, CheckedFile] | None = None) -> str | None:
    """Why a segment file of the committed index is missing or does not match its footer's
    CRC-32 (None: all match). ``verified`` remembers the files already found whole, by inode,
    size and mtime, so a caller that checks often reads only the files written or changed since;
    without it every byte is read (about 1 ms per MB)."""
    try:
        meta = json.loads((path / TANTIVY_META).read_text())
        segments = [(str(seg["segment_id"]).replace("-", ""), seg.get("deletes")) for seg in meta["segments"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"tantivy's {TANTIVY_META} is unreadable: {type(exc).__name__}"
    present = {p.name for p in path.iterdir()}
    if verified is not None:  # forget the files merges removed (a long-running worker sees thousands)
        for name in [n for n in verified if n not in present]:
            del verified[name]
    for segment, deletes in segments:
        names = [segment + ext for ext in SEGMENT_FILES if segment + ext in present]
        if not any(n.endswith(".idx") for n in names):
            return f"segment {segment} has no postings file"
        if deletes:
            names.append(f"{segment}.{int(deletes['opstamp'])}.del")
        for name in names:
            why = _crc_mismatch(path / name, verified)
            if why is not None:
                return why
    return None


def _crc_mismatch(file: Path, verified: MutableMapping[str, CheckedFile] | None) -> str | None:
    """Why ``file``'s bytes disagree with its footer (None: they agree)."""
    try:
        st = os.stat(file)
        if verified is not None and verified.get(file.name) == (st.st_ino, st.st_size, st.st_mtime_ns):
            return None
        with open(file, "rb") as fh:
            st = os.fstat(fh.fileno())
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if st.st_size < 8:
                return f"{file.name} is shorter than its footer"
            fh.seek(st.st_size - 8)
            footer_len, magic = struct.unpack("<II", fh.read(8))
            if magic != FOOTER_MAGIC or footer_len + 8 > st.st_size:
                return f"{file.name} has no footer"
            body = st.st_size - 8 - footer_len
            fh.seek(body)
            expected = int(json.loads(fh.read(footer_len))["crc"])
            fh.seek(0)
            crc, left = 0, body
            while left > 0:
                chunk = fh.read(min(CRC_CHUNK, left))
                if not chunk:
                    return f"{file.name} is shorter than its footer says"
                crc, left = zlib.crc32(chunk, crc), left - len(chunk)
    except FileNotFoundError:
        return f"{file.name} is missing"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{file.name}: {type(exc).__name__}: {exc}"[:200]
    if crc != expected:
        return f"{file.name} is garbled (its checksum does not match)"
    if verified is not None:
        verified[file.name] = stamp
    return None


def unreadable(path: Path, verified: MutableMapping[str, CheckedFile] | None = None) -> str | None:
    """Why the tantivy index at ``path`` cannot be trusted (None: it agrees with memsync's record,
    every segment file matches its checksum, and it opens and answers a query over every segment,
    no panic), when a second look agrees: a reader beside the running worker can see a file its
    merge just removed. Costs reading the segment files not in ``verified`` (see
    :func:`garbled_files`) and an open of the index, a few ms: tantivy reads every segment's footer."""
    why = _untrusted(path, verified)
    return None if why is None else _untrusted(path, verified)


def _untrusted(path: Path, verified: MutableMapping[str, CheckedFile] | None) -> str | None:
    meta = read_meta(path) or {}
    why = disagreement(path, meta) or garbled_files(path, verified)
    if why is not None:
        return why
    try:
        with guarded("tantivy", TextIndexDamaged):
            index = open_index(path, create=False)
            index.reload()
            searcher = index.searcher()
            hits = searcher.search(tantivy.Query.all_query(), 1).hits
            searcher.fast_field_values("row", [addr for _, addr in hits])
    except (OSError, ValueError, RuntimeError, TextIndexDamaged) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


def damage(settings: Settings) -> str | None:
    """Why the text index of ``settings``' database cannot be trusted, with every check of
    :func:`unreadable` (None: it can, or it is off or not built for this database)."""
    if not settings.text_index:
        return None
    path = index_path(settings)
    meta = read_meta(path)
    if meta is None or meta.get("db") != source_id(settings.db):
        return "its meta file is unreadable" if meta_unreadable(path) else None
    return unreadable(path)


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
