"""Test reference: the Chroma documents upstream claude-mem would write for a database.

A line-by-line Python port, kept for tests only, of how claude-mem builds its Chroma documents in
its backfill. It was first a transliteration of v13.15.3's ``src/services/sync/ChromaSync.ts``
(formatObservationDocs, formatSummaryDocs, formatUserPromptDoc, the backfill SELECTs and
addDocuments' metadata filter), ``src/services/sqlite/observations/files.ts`` (parseFileList) and
``src/shared/platform-source.ts`` (normalizePlatformSource), all at upstream commit
e2d1df569a8f04075d40e92461128ece7cf04c82, written from upstream's source alone, without reading
memsync's implementation, so a test can compare the two. Its ``facts`` and ``concepts`` parser
follows 13.25.3 (the one tested, ``tests/upstream/versions.json``: the function that
formatObservationDocs calls for them in the released ``worker-service.cjs``), which no longer
throws; the rest is unchanged in 13.25.3.

The real worker now writes its own store in ``tests/system/test_claude_mem_store.py``, compared
with memsync's; this port stays for the row shapes that claude-mem 13.25.3 cannot be made to
produce through its ``/api/import`` (see ``tests/worker/test_upstream_store.py``).

It ports upstream's JavaScript semantics, quirks included: truthiness, ``||`` defaults,
``JSON.parse``, ``Array.prototype.join`` and ``String(x)``. Upstream runs on Bun, so values read
from SQLite are what bun:sqlite returns. Two deliberate departures from upstream's backfill:
every row is read (upstream backfills per project, past a watermark, and only for projects that
have observations), and a prompt's platform_source is normalised as the live ``syncUserPrompt``
does (the backfill passes it through as the SELECT returns it).

Two additions of upstream's main branch after 13.25.3 (ChromaSync.ts: ``observationTitleText`` and
the title document in formatObservationDocs, and addDocuments' NUL replacement) are ported too, as
:func:`title_document` and :func:`replace_nul`; 13.25.3 itself writes neither.

``JSON.parse`` throwing is :class:`UpstreamThrows`, which the parsers here catch as upstream does.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeAlias

# What JSON.parse can return. JSON numbers are floats: JavaScript has only doubles.
Json: TypeAlias = "None | bool | float | str | list[Json] | dict[str, Json]"
Row: TypeAlias = dict[str, Any]
Document: TypeAlias = tuple[str, Any, dict[str, Any]]  # id, document, metadata before cleaning

DEFAULT_PLATFORM_SOURCE = "claude"

# ECMAScript WhiteSpace and LineTerminator: what String.prototype.trim() strips and regex \s
# matches. Python's str.strip() and re's \s use another set (they take \x1c-\x1f and \x85, and
# leave \ufeff), so neither can stand in for them.
_JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_WHITESPACE_RUN = re.compile(f"[{_JS_WHITESPACE}]+")

# The same SELECTs as upstream's backfillObservations/backfillSummaries/backfillPrompts, without
# the per-project watermark (`WHERE project = ? AND id > ?`): this reference covers all rows.
_OBSERVATIONS_SQL = """
  SELECT
    o.*,
    COALESCE(NULLIF(s.platform_source, ''), 'claude') as platform_source
  FROM observations o
  LEFT JOIN sdk_sessions s ON s.memory_session_id = o.memory_session_id
  ORDER BY o.id ASC
"""
_SUMMARIES_SQL = """
  SELECT
    ss.*,
    COALESCE(NULLIF(s.platform_source, ''), 'claude') as platform_source
  FROM session_summaries ss
  LEFT JOIN sdk_sessions s ON s.memory_session_id = ss.memory_session_id
  ORDER BY ss.id ASC
"""
# An inner join: a prompt whose session_db_id is NULL or dangling gets no document.
_PROMPTS_SQL = """
  SELECT
    up.*,
    s.project,
    s.memory_session_id,
    COALESCE(NULLIF(s.platform_source, ''), 'claude') as platform_source
  FROM user_prompts up
  JOIN sdk_sessions s ON up.session_db_id = s.id
  ORDER BY up.id ASC
"""

_SUMMARY_FIELDS = ("request", "investigated", "learned", "completed", "next_steps", "notes")


class UpstreamThrows(Exception):
    """Upstream's JavaScript throws for this row (a SyntaxError or TypeError). In 13.25.3 its
    backfill skips such a row (``Skipped unformattable row``) and marks it pending; no value of a
    TEXT column makes formatObservationDocs throw any more."""


def reference_documents(db_path: str | Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every Chroma document upstream would write for the database at ``db_path``:
    id -> (document, metadata as addDocuments sends it, i.e. after cleanMetadatas).

    The document is typed ``str`` because upstream means it to be one; a fact that is not a JSON
    string is passed on as its parsed value (see :func:`format_observation_docs`)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        docs: list[Document] = []
        for row in _rows(conn, _OBSERVATIONS_SQL):
            docs.extend(format_observation_docs(row))
        for row in _rows(conn, _SUMMARIES_SQL):
            docs.extend(format_summary_docs(row))
        for row in _rows(conn, _PROMPTS_SQL):
            # Upstream's live syncUserPrompt normalises platform_source; its backfill does not
            # (it stores the SELECT's value, e.g. ' Codex CLI ' as is). This follows the live path.
            row["platform_source"] = normalize_platform_source(row["platform_source"])
            docs.append(format_user_prompt_doc(row))
    finally:
        conn.close()
    return {doc_id: (replace_nul(document), clean_metadata(metadata)) for doc_id, document, metadata in docs}


def replace_nul(document: Any) -> Any:
    """Upstream main's addDocuments: ``document.replaceAll('\\0', '\\uFFFD')`` for every document
    that includes a NUL (a document that is no string is passed on as it is)."""
    return document.replace("\0", "\ufffd") if isinstance(document, str) and "\0" in document else document


def _js_trim(value: Any) -> str:
    """``value?.trim() ?? ''``: trim() of a string (a non-string throws upstream; not modelled)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise NotImplementedError(f"trim() of a {type(value).__name__}: not modelled")
    return value.strip(_JS_WHITESPACE)


def title_document(obs: Row, base: dict[str, Any]) -> Document | None:
    """Upstream main: when formatObservationDocs made no document, the observation's title and
    subtitle (``observationTitleText``: trimmed, 'Untitled' as no title, non-empty parts joined by
    a newline) become ``obs_{id}_title``, field_type 'title', when that text is not empty."""
    title = _js_trim(obs["title"])
    parts = ["" if title == "Untitled" else title, _js_trim(obs["subtitle"])]
    text = "\n".join(part for part in parts if len(part) > 0)
    if not text:
        return None
    return (f"obs_{obs['id']}_title", text, {**base, "field_type": "title"})


def _rows(conn: sqlite3.Connection, sql: str) -> list[Row]:
    """The rows of ``sql`` as bun:sqlite's ``.all()`` returns them: one object per row, by column
    name, integers as JavaScript numbers. (No name repeats: in claude-mem's schema only
    sdk_sessions has platform_source, and user_prompts has no project or memory_session_id.)"""
    cursor = conn.execute(sql)
    names = [d[0] for d in cursor.description]
    rows = []
    for values in cursor.fetchall():
        row: Row = {}
        for name, value in zip(names, values, strict=True):
            if isinstance(value, bytes):
                # bun:sqlite gives a BLOB as a Uint8Array; what upstream makes of it is not ported.
                raise NotImplementedError(f"BLOB in column {name!r}: not modelled")
            if isinstance(value, int) and abs(value) > 2**53:
                value = int(float(value))  # bun:sqlite rounds integers beyond 53 bits to a double
            row[name] = value
        rows.append(row)
    return rows


def clean_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """addDocuments' cleanMetadatas: drop keys whose value is null, undefined or ''. 0 stays."""
    return {k: v for k, v in metadata.items() if not (v is None or (isinstance(v, str) and v == ""))}


# SQLite values (str, int, float, None; never NaN, which SQLite stores as NULL) have the same
# truthiness in Python as in JavaScript, so `if value` and `value or default` below are exact ports
# of upstream's `if (value)` and `value || default`. A whitespace-only string is truthy in both.


def format_observation_docs(obs: Row) -> list[Document]:
    """formatObservationDocs: a document per truthy narrative and text, and one per fact that
    :func:`parse_string_list` keeps (its index counts the kept ones only)."""
    facts = parse_string_list(obs["facts"])
    concepts = parse_string_list(obs["concepts"])
    files_read = parse_file_list(obs["files_read"])
    files_modified = parse_file_list(obs["files_modified"])

    base: dict[str, Any] = {
        "sqlite_id": obs["id"],
        "doc_type": "observation",
        "memory_session_id": obs["memory_session_id"],
        "project": obs["project"],
        "merged_into_project": obs["merged_into_project"],  # `?? null`, dropped by cleanMetadatas
        # `x ? normalizePlatformSource(x) : normalizePlatformSource(undefined)` is just this.
        "platform_source": normalize_platform_source(obs["platform_source"]),
        "created_at_epoch": obs["created_at_epoch"],
        "type": obs["type"] or "discovery",
        "title": obs["title"] or "Untitled",
    }
    if obs["subtitle"]:
        base["subtitle"] = obs["subtitle"]
    if len(concepts) > 0:
        base["concepts"] = ",".join(concepts)
    # parseFileList always returns an array, but its elements are any JSON value.
    if len(files_read) > 0:
        base["files_read"] = _js_join(files_read)  # '[null]' joins to '', which cleanMetadatas drops
    if len(files_modified) > 0:
        base["files_modified"] = _js_join(files_modified)

    docs: list[Document] = []
    if obs["narrative"]:
        docs.append((f"obs_{obs['id']}_narrative", obs["narrative"], {**base, "field_type": "narrative"}))
    if obs["text"]:
        docs.append((f"obs_{obs['id']}_text", obs["text"], {**base, "field_type": "text"}))
    for index, fact in enumerate(facts):
        docs.append((f"obs_{obs['id']}_fact_{index}", fact,
                     {**base, "field_type": "fact", "fact_index": index}))
    if len(docs) == 0 and (title := title_document(obs, base)) is not None:
        docs.append(title)
    return docs


def format_summary_docs(summary: Row) -> list[Document]:
    """formatSummaryDocs: one document per truthy field, in upstream's order."""
    base: dict[str, Any] = {
        "sqlite_id": summary["id"],
        "doc_type": "session_summary",
        "memory_session_id": summary["memory_session_id"],
        "project": summary["project"],
        "merged_into_project": summary["merged_into_project"],
        "platform_source": normalize_platform_source(summary["platform_source"]),
        "created_at_epoch": summary["created_at_epoch"],
        "prompt_number": summary["prompt_number"] or 0,  # so NULL becomes 0, which is kept
    }
    return [(f"summary_{summary['id']}_{field}", summary[field], {**base, "field_type": field})
            for field in _SUMMARY_FIELDS if summary[field]]


def format_user_prompt_doc(prompt: Row) -> Document:
    """formatUserPromptDoc: always one document, even for an empty prompt_text (no truthiness
    check upstream). platform_source is used as given; the caller decides on normalising."""
    return (f"prompt_{prompt['id']}", prompt["prompt_text"], {
        "sqlite_id": prompt["id"],
        "doc_type": "user_prompt",
        "memory_session_id": prompt["memory_session_id"],
        "project": prompt["project"],
        "platform_source": prompt["platform_source"],
        "created_at_epoch": prompt["created_at_epoch"],
        "prompt_number": prompt["prompt_number"],
    })


def parse_string_list(value: str | None) -> list[str]:
    """13.25.3's parser of facts and concepts (ChromaSync, ``JK(value, field, id)`` in the bundle):

        if (!t) return [];
        try { let n = JSON.parse(t);
              return Array.isArray(n) ? n.filter(s => typeof s == "string" && s.trim().length > 0)
                   : typeof n == "string" ? (n.trim() ? [n] : []) : (t.trim() ? [t] : []) }
        catch { return t.trim() ? [t] : [] }
    """
    if not value:
        return []
    try:
        parsed = _json_parse(value, None)
    except UpstreamThrows:
        return [value] if _js_trim(value) else []
    if isinstance(parsed, list):
        return [item for item in parsed if isinstance(item, str) and len(_js_trim(item)) > 0]
    if isinstance(parsed, str):
        return [parsed] if _js_trim(parsed) else []
    return [value] if _js_trim(value) else []


def parse_file_list(value: str | None) -> list[Json]:
    """files.ts parseFileList: '' or NULL -> []; a JSON array as is (elements of any type); any
    other JSON value -> [String(value)]; text that is not JSON -> [the text] (no throw)."""
    if not value:
        return []
    try:
        parsed = _json_parse(value, None)
    except UpstreamThrows:
        return [value]
    return parsed if isinstance(parsed, list) else [_js_string(parsed)]


def normalize_platform_source(value: str | None) -> str:
    """platform-source.ts normalizePlatformSource: trim, lower-case, whitespace runs to '-', then
    anything containing codex/cursor/claude collapses to that name ('transcript' means codex)."""
    if not value:
        return DEFAULT_PLATFORM_SOURCE
    source = _JS_WHITESPACE_RUN.sub("-", value.strip(_JS_WHITESPACE).lower())
    if not source:
        return DEFAULT_PLATFORM_SOURCE
    if source == "transcript":
        return "codex"
    # Checked in this order: 'claude-codex' is codex, 'cursor-claude' is cursor.
    for name in ("codex", "cursor", "claude"):
        if name in source:
            return name
    return source


# --- JavaScript semantics -------------------------------------------------------------------------


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")  # Python's json accepts NaN/Infinity; JSON.parse does not


def _json_parse(text: str, row: Row | None) -> Json:
    """JSON.parse: numbers as doubles, NaN/Infinity rejected. A SyntaxError becomes UpstreamThrows.

    Very deep nesting (~1000 levels) raises RecursionError here, where JavaScript may parse it: not
    modelled."""
    try:
        parsed: Json = json.loads(text, parse_int=float, parse_constant=_reject_constant)
    except ValueError as e:
        where = f"row {row['id']}: " if row else ""
        raise UpstreamThrows(f"{where}JSON.parse throws on {text!r}: {e}") from e
    return parsed


def _js_join(items: list[Json]) -> str:
    """Array.prototype.join(','): null (and undefined) elements become '', others String(x)."""
    return ",".join("" if item is None else _js_string(item) for item in items)


def _js_string(value: Json) -> str:
    """String(value) for a JSON.parse result. An array stringifies as its join(',')."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _js_number_string(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _js_join(value)
    return "[object Object]"


def _js_number_string(x: float) -> str:
    """Number.prototype.toString() (ECMAScript Number::toString): the shortest round-trip digits,
    like Python's repr, but laid out differently (1 not 1.0, 1e+21 not 1e21, 0.000001 not 1e-06)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"  # -0 too
    if x < 0:
        return "-" + _js_number_string(-x)
    digits_tuple, exponent = Decimal(repr(x)).as_tuple()[1:]
    assert isinstance(exponent, int)
    digits = "".join(map(str, digits_tuple)).rstrip("0")
    k = len(digits)
    n = exponent + len(digits_tuple)  # x = 0.<digits> * 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"
