"""The upstream-readable store: rows → documents in claude-mem's own Chroma format, and its sink.

An opt-in second collection (``upstream_store``, named ``upstream_collection``, default
``cm__claude-mem``) that claude-mem's own search can read when pointed at memsync's Chroma server.
Its documents follow what claude-mem 13.25.3's ``ChromaSync`` backfill writes
(``formatObservationDocs``, ``formatSummaryDocs``, ``formatUserPromptDoc`` and ``addDocuments``'
metadata clean-up) value for value, plus the two document changes of upstream's main branch after
13.25.3 (below), which memsync's own format deliberately does not:

- texts stored with the vectors, as they are in the row (no title folded into the narrative, no
  trimming, no cut; only the embedded text is cut, which never changes the vector);
- JavaScript truthiness decides which fields make documents (``'  '`` does, ``''`` does not);
- ``facts`` and ``concepts`` parsed as 13.25.3 parses them: a JSON array's string elements that
  are not blank (a fact's index counts those), else the JSON string, else the column's text as
  one item (text that is not JSON, a JSON number, object or null), unless blank;
- ``type`` defaults to ``discovery``, ``title`` to ``Untitled``; ``concepts``, ``files_read``
  and ``files_modified`` are joined with ``,``; a summary's ``prompt_number`` defaults to 0;
- ``created_at_epoch`` as the row holds it; ``platform_source`` normalised (a prompt's too, as
  upstream's live sync does; its backfill stores the session's value as it is, which 13.25.3
  normalises when it writes the session); keys whose value is null or ``''`` are left out;
- as on upstream's main (ChromaSync.ts after 13.25.3): an observation with no narrative, text or
  fact document gets ``obs_{id}_title``, its trimmed title (not ``Untitled``) and subtitle joined by
  a newline, ``field_type`` ``title``; and NUL characters in every document's text are replaced by
  U+FFFD (Chroma keeps a NUL but its document search stops at it). 13.25.3 writes neither; sharing
  the store with it stays exact (it writes no title document and deletes none), and with a writer of
  main's format each row's set of ids is the same, so neither deletes the other's documents.

Where claude-mem's backfill leaves rows out, memsync keeps them: the rows of a project without
observations and of an empty project (its backfill visits only the projects that observations
name). A prompt without a session is left out, as upstream's join leaves it out (it has no project
to scope it by). Rows of excluded projects make no documents, as in memsync's own store.
``tests/system/test_claude_mem_store.py`` compares this store with the one the real claude-mem
writes from the same database.

Sync is the same exact pass as memsync's own (``worker.pipeline.sync`` with :data:`UPSTREAM`), with its own
records (keyed by the collection's name), so adds, edits, deletes and exclusions all reach it.
The content hash is computed from what the store holds (id, text, metadata), so an alignment with
the store (``worker.pipeline.target``) reads it back without a ``content_hash`` key in upstream's metadata.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from memsync.config.claude_mem.platform import normalize_platform
from memsync.config.claude_mem.schema import SUMMARY_FIELDS, Kind
from memsync.config.docids import DOC_TYPES, fact_field, format_doc_id
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.rows.documents import (
    MAX_TEXT_CHARS,
    Builders,
    Derivation,
    Document,
    SourceRow,
    derive,
    payload_hash,
)
from memsync.worker.rows.state import SyncState

# Bump when the documents below change: the worker then derives every row again and writes the
# documents that differ (:func:`bind_format`).
UPSTREAM_FORMAT_VERSION = 2  # 2: facts and concepts parsed as 13.25.3 does; title documents, NUL replaced (main)
FORMAT_META_PREFIX = "upstream_format:"  # state meta key per collection: the version its records follow

_COMMON = ("sqlite_id", "doc_type", "memory_session_id", "project", "merged_into_project", "platform_source",
           "created_at_epoch")
METADATA_KEYS: dict[Kind, tuple[str, ...]] = {
    Kind.OBSERVATION: (*_COMMON, "type", "title", "subtitle", "concepts", "files_read", "files_modified",
                       "field_type", "fact_index"),
    Kind.SUMMARY: (*_COMMON, "prompt_number", "field_type"),
    Kind.PROMPT: (*_COMMON, "prompt_number"),
}

Meta = dict[str, str | int | float]

NUL_REPLACEMENT = "\ufffd"
# ECMAScript's WhiteSpace and LineTerminator: what String.prototype.trim() strips (Python's strip()
# takes \x1c-\x1f and \x85 too and leaves \ufeff).
_JS_WHITESPACE = ("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                  "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")


def _js_truthy(value: Any) -> bool:
    """JavaScript's truthiness of a SQLite value: NULL, '' and 0 are false."""
    return value is not None and value != "" and not (isinstance(value, (int, float)) and value == 0)


def _js_number(value: float) -> str:
    """A number as JavaScript prints it: integers below 1e21 in full, others in shortest form."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
        return str(int(value))
    return repr(float(value)).replace("e-0", "e-").replace("e+0", "e+").replace("inf", "Infinity")


def _js_string(value: Any) -> str:
    """``String(value)`` of a JSON value, as JavaScript spells it (a BLOB in a text column as its
    UTF-8 text, as memsync's own documents read it)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _js_number(value)
    if isinstance(value, list):
        return _js_join(value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def _js_join(values: list[Any]) -> str:
    """``values.join(',')``: null elements become ''."""
    return ",".join("" if v is None else _js_string(v) for v in values)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json takes NaN and Infinity; JSON.parse does not


def _parse(value: Any) -> tuple[bool, Any]:
    """(parsed, value): ``JSON.parse`` of a list column's text; (False, text) when it is not JSON."""
    text = _js_string(value)
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return False, text


def _js_blank(text: str) -> bool:
    """``!text.trim()``: empty once JavaScript's white space is stripped."""
    return not text.strip(_JS_WHITESPACE)


def _string_list(value: Any) -> list[str]:
    """13.25.3's parser of ``facts`` and ``concepts`` (in ChromaSync): a JSON array's elements that
    are strings and not blank (others dropped); a JSON string unless blank; any other JSON value, or
    text that is not JSON, as the column's text unless blank; NULL or '' nothing."""
    if not _js_truthy(value):
        return []
    ok, parsed = _parse(value)
    if ok and isinstance(parsed, list):
        return [v for v in parsed if isinstance(v, str) and not _js_blank(v)]
    if ok and isinstance(parsed, str):
        return [] if _js_blank(parsed) else [parsed]
    text = _js_string(value)
    return [] if _js_blank(text) else [text]


def _file_list(value: Any) -> list[Any]:
    """Upstream's ``parseFileList``: JSON arrays as they are, another JSON value as ``[String(v)]``,
    text that is not JSON as ``[text]``."""
    if not _js_truthy(value):
        return []
    ok, parsed = _parse(value)
    if not ok:
        return [parsed]
    return parsed if isinstance(parsed, list) else [_js_string(parsed)]


def content_hash(doc_id: str, text: str, metadata: dict[str, Any]) -> str:
    """The hash of a stored document: its id, text and metadata (as Chroma gives them back); no
    version in it, so a new format rewrites only the documents it changes (:func:`bind_format`)."""
    return payload_hash([doc_id, payload_hash(text), metadata])


def _clean(meta: dict[str, Any]) -> Meta:
    """``addDocuments``' clean-up: keys whose value is null or '' are not sent."""
    return {k: v for k, v in meta.items() if v is not None and v != ""}


def _make(row: SourceRow, field_name: str | None, text: str, meta: dict[str, Any]) -> Document:
    doc_id = format_doc_id(row.kind, row.id, field_name)
    text = text.replace("\0", NUL_REPLACEMENT)  # upstream main's addDocuments, for every document
    metadata = _clean(meta)
    digest = content_hash(doc_id, text, metadata)
    # text_hash names the vector in the embedding store: equal to memsync's own for equal texts (a
    # fact, a summary field, a prompt), so these are embedded once for both stores. The embedded
    # text is cut like memsync's own (the model reads 256 tokens); the stored text is whole.
    cut = text[:MAX_TEXT_CHARS]
    return Document(doc_id, row.kind, row.id, cut, metadata, payload_hash(text), digest, None if cut == text else text)


def _base(row: SourceRow) -> dict[str, Any]:
    v = row.values
    platform = v.get("platform_source")
    return {
        "sqlite_id": row.id,
        "doc_type": DOC_TYPES[row.kind],
        "memory_session_id": v.get("memory_session_id"),
        "project": v.get("project"),
        "merged_into_project": v.get("merged_into_project"),
        "platform_source": normalize_platform(platform if isinstance(platform, str) else ""),
        "created_at_epoch": v.get("created_at_epoch"),
    }


def _observation(row: SourceRow) -> list[Document]:
    v = row.values
    base = _base(row)
    base["type"] = _js_string(v.get("type")) if _js_truthy(v.get("type")) else "discovery"
    base["title"] = _js_string(v.get("title")) if _js_truthy(v.get("title")) else "Untitled"
    if _js_truthy(v.get("subtitle")):
        base["subtitle"] = _js_string(v.get("subtitle"))
    for key, values in (("concepts", _string_list(v.get("concepts"))), ("files_read", _file_list(v.get("files_read"))),
                        ("files_modified", _file_list(v.get("files_modified")))):
        if values:
            base[key] = _js_join(values)
    docs: list[Document] = []
    for name in ("narrative", "text"):
        if _js_truthy(v.get(name)):
            docs.append(_make(row, name, _js_string(v.get(name)), {**base, "field_type": name}))
    for i, fact in enumerate(_string_list(v.get("facts"))):
        docs.append(_make(row, fact_field(i), fact, {**base, "field_type": "fact", "fact_index": i}))
    if not docs and (title := _title_text(v.get("title"), v.get("subtitle"))):
        docs.append(_make(row, "title", title, {**base, "field_type": "title"}))
    return docs


def _title_text(title: Any, subtitle: Any) -> str:
    """Upstream main's ``observationTitleText``: the trimmed title (``Untitled`` counts as none) and
    the trimmed subtitle, the non-empty ones joined by a newline; '' when neither."""
    parts = ["" if title is None else _js_string(title).strip(_JS_WHITESPACE),
             "" if subtitle is None else _js_string(subtitle).strip(_JS_WHITESPACE)]
    if parts[0] == "Untitled":
        parts[0] = ""
    return "\n".join(p for p in parts if p)


def _summary(row: SourceRow) -> list[Document]:
    v = row.values
    base = _base(row)
    number = v.get("prompt_number")
    base["prompt_number"] = number if _js_truthy(number) else 0
    return [_make(row, name, _js_string(v.get(name)), {**base, "field_type": name})
            for name in SUMMARY_FIELDS if _js_truthy(v.get(name))]


def _prompt(row: SourceRow) -> list[Document]:
    v = row.values
    if v.get("project") is None or v.get("prompt_text") is None:
        # No session row (upstream's INNER JOIN drops the prompt; sdk_sessions.project is NOT NULL),
        # or no text at all (the column is NOT NULL upstream).
        return []
    base = _base(row)
    base["prompt_number"] = v.get("prompt_number")
    return [_make(row, None, _js_string(v.get("prompt_text")), base)]


UPSTREAM_BUILDERS: Builders = {Kind.OBSERVATION: _observation, Kind.SUMMARY: _summary, Kind.PROMPT: _prompt}


def build_upstream_documents(row: SourceRow) -> list[Document]:
    """A row's documents in claude-mem's format (none for an excluded project, or a prompt
    without a session)."""
    return derive(row, UPSTREAM_BUILDERS)


def upstream_metadata(doc: Document) -> dict[str, str | int | float | None]:
    """Every key of the kind, None for absent ones (Chroma then removes a stale key on update)."""
    return {key: doc.metadata.get(key) for key in METADATA_KEYS[doc.kind]}


UPSTREAM = Derivation("upstream", build_upstream_documents, upstream_metadata, stores_text=True)


class UpstreamSink(ChromaSink):
    """The upstream-readable collection: as a ChromaSink, but read back with each document's
    content hash computed from its text and metadata (upstream's metadata has no such key)."""

    def iter_metadata(self, page: int = 5000) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every (id, {"content_hash": ...}) in the collection, paged."""
        for got in self.pages(["metadatas", "documents"], page):
            ids = got["ids"]
            texts = got["documents"] or [""] * len(ids)
            metas = got["metadatas"] or [{}] * len(ids)
            for doc_id, text, meta in zip(ids, texts, metas, strict=False):
                yield doc_id, {"content_hash": content_hash(doc_id, text or "", dict(meta or {}))}


def bind_format(state: SyncState, collection: str) -> bool:
    """Make the records of ``collection`` follow this format version: after an upgrade that changed
    it, every row record is forgotten, so the next pass derives each row again and writes only the
    documents that differ. True when that happened."""
    key = FORMAT_META_PREFIX + collection
    if state.get_meta(key) == str(UPSTREAM_FORMAT_VERSION):
        return False
    state.forget_all_rows(collection)
    state.set_meta(key, str(UPSTREAM_FORMAT_VERSION))
    return True
