"""Rows → field documents: pure, no I/O.

One document per non-empty field, ids from ``config.docids`` (the upstream scheme), metadata keys
exactly those of upstream claude-mem plus ``content_hash``. Values are Chroma scalars and never
null or empty (absent keys are left out). ``content_hash`` covers exactly what is embedded and
stored: the text, the metadata and the derivation version.

Bad input never raises here except :class:`RowError`, for a row with nothing usable at all; a
list column that is not JSON counts as a one-element list, invalid UTF-8 was already replaced by
the reader.
"""

from __future__ import annotations

import hashlib
import json
import marshal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memsync.config.claude_mem.platform import normalize_platform
from memsync.config.claude_mem.schema import SUMMARY_FIELDS, Kind
from memsync.config.claude_mem.values import clean, parse_list
from memsync.config.docids import DOC_TYPES, fact_field, format_doc_id
from memsync.config.errors import BadData
from memsync.config.records import RecordRefError, ms_from_iso

# The cell a reader adds to each row when projects are excluded: 1 when the row's project is.
EXCLUDED_CELL = "excluded"

# Bump when the derivation below changes the documents: part of every document's content hash, so
# every document is then written again (relabelled when only its metadata moved).
DOCS_VERSION = 1
# Bump to derive every row again and compare its documents by content hash, writing only those that
# differ. 2: platform_source normalised as claude-mem does (rows recorded before upstream
# normalised get their metadata relabelled; every other document stays as it is).
ROW_VERSION = 2

# The one decision on observation titles: "fold" puts title and subtitle on top of the
# narrative document's text; "separate" writes an extra obs_N_title document. Upstream embeds
# neither. The search-quality benchmark decides; until then fold, which costs no
# extra vectors and gives the narrative vector the row's headline terms.
TITLE_POLICY = "fold"

# Texts are cut here before hashing and embedding: the model reads at most 256 tokens, and a token
# is at least one character, so the cut never changes a vector while it bounds tokenizer work.
MAX_TEXT_CHARS = 8000
# Metadata strings are capped: they are for filtering and display, and bloat the index otherwise.
MAX_META_CHARS = 1000

COMMON_KEYS = (
    "sqlite_id", "doc_type", "memory_session_id", "project", "merged_into_project", "platform_source",
    "created_at_epoch", "content_hash",
)
METADATA_KEYS: dict[Kind, tuple[str, ...]] = {
    Kind.OBSERVATION: (
        *COMMON_KEYS, "type", "title", "subtitle", "concepts", "files_read", "files_modified", "field_type",
        "fact_index",
    ),
    Kind.SUMMARY: (*COMMON_KEYS, "prompt_number", "field_type"),
    Kind.PROMPT: (*COMMON_KEYS, "prompt_number"),
}


class RowError(BadData):
    """The row cannot be turned into documents at all; recorded as failed with this reason."""


@dataclass(frozen=True, slots=True)
class Document:
    """One vector document: id, the text to embed, metadata, and hashes of what is written."""

    doc_id: str
    kind: Kind
    source_id: int
    text: str
    metadata: dict[str, str | int | float]  # float: only a REAL creation time kept as is (worker.pipeline.upstream)
    text_hash: str
    content_hash: str
    stored: str | None = None  # the text written to a store that keeps texts, when not ``text``


@dataclass(frozen=True, slots=True)
class SourceRow:
    """A source row in logical column names plus the session join (``platform_source``, and the
    project and memory_session_id of prompts)."""

    kind: Kind
    id: int
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def project(self) -> str:
        """The row's project ('' when unknown)."""
        return clean(self.values.get("project"))

    @property
    def merged_into_project(self) -> str:
        """The project this row was merged into ('' when none)."""
        return clean(self.values.get("merged_into_project"))

    @property
    def excluded(self) -> bool:
        """Whether the row's project is excluded (config.claude_mem.projects): it makes no
        documents in any store and is not searchable."""
        return bool(self.values.get(EXCLUDED_CELL))


def epoch_ms(epoch: Any, iso: Any) -> int:
    """Creation time in epoch milliseconds. A value that can only be seconds (before 1973 as ms) is
    scaled, since a seconds/ms mix-up made every row "recent" upstream."""
    if isinstance(epoch, (int, float)) and not isinstance(epoch, bool) and epoch > 0:
        value = int(epoch)
        return value * 1000 if value < 100_000_000_000 else value
    text = clean(iso)
    if text:
        try:
            return ms_from_iso(text)
        except RecordRefError:
            pass
    raise RowError("no usable created_at_epoch or created_at")


def _meta_str(value: str) -> str:
    return value[:MAX_META_CHARS]


def payload_hash(payload: Any) -> str:
    """The hash of a JSON-able value (sorted keys): a text's hash names its vector in the
    embedding store, whichever store's document it is (``worker.pipeline.upstream`` uses it too)."""
    data = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8", errors="surrogatepass")).hexdigest()[:32]


# Prefix of every row hash: a new derivation or row version (or title policy) makes every row compare
# as changed, so each is derived again and its documents compared by content hash.
ROW_HASH_SALT = f"memsync-row:{DOCS_VERSION}.{ROW_VERSION}:{TITLE_POLICY}:marshal2:".encode()


def row_shape(kind: Kind, names: Iterable[str]) -> str:
    """What a row hash says the cells are: the kind and the column names, in order."""
    return f"{kind.value}|{','.join(names)}"


def row_cells_hash(*cells: Any) -> str:
    """The row hash of ``(shape, value, value, ...)``, the values being SQLite's cells as Python
    reads them (str, int, float, bytes, None). ``marshal`` (format 2: no references, floats in
    binary) encodes them exactly, with their types and lengths, in one C call; the reader also
    registers this function in SQL, so a pass can hash every row without building it in Python
    (``worker.rows.source.SourceReader.row_hashes``)."""
    return hashlib.sha256(ROW_HASH_SALT + marshal.dumps(cells, 2)).hexdigest()[:32]


def row_values_hash(row: SourceRow) -> str:
    """Hash of every source value the derivation reads (plus its version): what a row's sync record
    keeps (``rows.row_hash``), so that a pass skips rows that did not change. Equal to the SQL
    function's hash of the same cells (:func:`row_cells_hash`)."""
    return row_cells_hash(row_shape(row.kind, row.values), *row.values.values())


def _base_metadata(row: SourceRow) -> dict[str, str | int]:
    v = row.values
    meta: dict[str, str | int] = {
        "sqlite_id": row.id,
        "doc_type": DOC_TYPES[row.kind],
        "created_at_epoch": epoch_ms(v.get("created_at_epoch"), v.get("created_at")),
        "platform_source": normalize_platform(clean(v.get("platform_source"))),
    }
    for key in ("memory_session_id", "project", "merged_into_project"):
        if text := clean(v.get(key)):
            meta[key] = _meta_str(text)
    return meta


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _make(row: SourceRow, field_name: str | None, text: str, meta: dict[str, str | int]) -> Document:
    text = text[:MAX_TEXT_CHARS]
    doc_id = format_doc_id(row.kind, row.id, field_name)
    text_hash = payload_hash(text)
    metadata: dict[str, str | int | float] = dict(meta)
    metadata["content_hash"] = payload_hash([DOCS_VERSION, doc_id, text_hash, meta])
    return Document(doc_id, row.kind, row.id, text, metadata, text_hash, str(metadata["content_hash"]))


def _observation(row: SourceRow) -> list[Document]:
    v = row.values
    base = _base_metadata(row)
    title, subtitle = clean(v.get("title")), clean(v.get("subtitle"))
    base["type"] = _meta_str(clean(v.get("type")) or "unknown")
    for key, value in (("title", title), ("subtitle", subtitle)):
        if value:
            base[key] = _meta_str(value)
    for key in ("concepts", "files_read", "files_modified"):
        joined = ", ".join(x for x in parse_list(v.get(key)) if x)
        if joined:
            base[key] = _meta_str(joined)
    docs: list[Document] = []
    narrative = clean(v.get("narrative"))
    if TITLE_POLICY == "fold":
        narrative = "\n".join(x for x in (title, subtitle, narrative) if x)
    elif headline := "\n".join(x for x in (title, subtitle) if x):
        docs.append(_make(row, "title", headline, {**base, "field_type": "title"}))
    if narrative:
        docs.append(_make(row, "narrative", narrative, {**base, "field_type": "narrative"}))
    if text := clean(v.get("text")):
        docs.append(_make(row, "text", text, {**base, "field_type": "text"}))
    for i, fact in enumerate(parse_list(v.get("facts"))):
        if fact:
            docs.append(_make(row, fact_field(i), fact, {**base, "field_type": "fact", "fact_index": i}))
    return docs


def _summary(row: SourceRow) -> list[Document]:
    base = _base_metadata(row)
    if (n := _int_or_none(row.values.get("prompt_number"))) is not None:
        base["prompt_number"] = n
    docs = []
    for name in SUMMARY_FIELDS:
        if text := clean(row.values.get(name)):
            docs.append(_make(row, name, text, {**base, "field_type": name}))
    return docs


def _prompt(row: SourceRow) -> list[Document]:
    base = _base_metadata(row)
    if (n := _int_or_none(row.values.get("prompt_number"))) is not None:
        base["prompt_number"] = n
    text = clean(row.values.get("prompt_text"))
    return [_make(row, None, text, base)] if text else []


Builders = Mapping[Kind, Callable[[SourceRow], list[Document]]]


def derive(row: SourceRow, builders: Builders) -> list[Document]:
    """A row's documents by the builder of its kind; none when its project is excluded."""
    return [] if row.excluded else builders[row.kind](row)


OWN_BUILDERS: Builders = {Kind.OBSERVATION: _observation, Kind.SUMMARY: _summary, Kind.PROMPT: _prompt}


def build_documents(row: SourceRow) -> list[Document]:
    """All documents of a row (possibly none, when every field is empty or its project is
    excluded); RowError when unusable."""
    return derive(row, OWN_BUILDERS)


def chroma_metadata(doc: Document) -> dict[str, str | int | float | None]:
    """The metadata to send to Chroma: every key of the kind, None for absent ones. Chroma merges
    metadata on upsert and deletes keys set to None (chromadb 1.5.9), so this clears stale keys."""
    return {key: doc.metadata.get(key) for key in METADATA_KEYS[doc.kind]}


@dataclass(frozen=True, slots=True)
class Derivation:
    """How a store's documents are made from rows: memsync's own (:data:`OWN`) or claude-mem's
    format for the upstream-readable store (``worker.pipeline.upstream``). A sync pass takes one."""

    name: str
    build: Callable[[SourceRow], list[Document]]  # a row's documents; RowError when unusable
    metadata: Callable[[Document], dict[str, str | int | float | None]]  # what Chroma gets (None clears a key)
    stores_text: bool = False  # documents are written with their text (``Document.stored``)


OWN = Derivation("memsync", build_documents, chroma_metadata)
