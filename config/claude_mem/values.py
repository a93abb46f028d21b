"""How memsync reads claude-mem's column values: the one owner of the rules for messy cells.

Text may be NULL, bytes that are not UTF-8, or padded; list columns (``facts``, ``concepts``,
``files_read``, ...) hold JSON arrays as text, sometimes invalid JSON or a bare path. The worker
(documents, the text index) and the search library (hydration) read them with the same rules.
"""

from __future__ import annotations

import json
from typing import Any

# The columns that hold a JSON array as text.
LIST_COLUMNS: frozenset[str] = frozenset({"facts", "concepts", "files_read", "files_modified", "files_edited"})

def clean(value: Any) -> str:
    """A text value as a stripped string; NULL becomes ''."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return str(value).strip()


def parse_list(value: Any) -> list[str]:
    """A JSON-array column as strings: NULL/''/'[]' → [], invalid JSON or a bare path → [value],
    non-string elements → their JSON text, empty elements kept as '' so positions stay stable."""
    text = clean(value)
    if not text:
        return []
    try:
        parsed = json.loads(text)
    except ValueError:
        return [text]
    if isinstance(parsed, list):
        return [x.strip() if isinstance(x, str) else "" if x is None else json.dumps(x) for x in parsed]
    if isinstance(parsed, str):
        return [parsed.strip()]
    return [text]
