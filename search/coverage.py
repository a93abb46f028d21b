"""How much of a search's scope the semantic side could see: all of it, except during a first sync.

A first sync goes newest first and keeps its cursor where searches see it
(``config.formats.first_sync``). A search then answers hybrid over what is synced, and counts the
rows of its own scope (kinds, filters, window; evidence rows with the filters evidence keeps) that
the pass has not compared yet. None of them: the semantic side saw the whole scope (a default
window is usually covered minutes into a long first sync) and nothing is said. Some: the response
says which share is missing and from which date on the semantic side is complete (``coverage``
and ``reason``); the lexical side covers every row either way. No first sync: one ``stat``.
"""

from __future__ import annotations

from memsync.config.formats.first_sync import read_mark
from memsync.config.settings import Settings
from memsync.search.models import Coverage
from memsync.search.plan import Plan
from memsync.search.sql import SourceRows


def coverage(settings: Settings, rows: SourceRows, collection: str, plan: Plan) -> Coverage | None:
    """What the semantic side of ``plan`` could not see in ``collection`` (None: all of it)."""
    cursor = read_mark(settings.data_dir, collection)
    if cursor is None:
        return None
    tasks = [(k, plan.filters) for k in plan.kinds]
    tasks.extend((k, plan.filters.common()) for k in plan.evidence_kinds)
    missing = total = 0
    newest: int | None = None
    for kind, filters in tasks:
        count, behind, latest = rows.behind(kind, filters, plan.window, cursor.get(kind, 0))
        total += count
        missing += behind
        if latest is not None:
            newest = latest if newest is None else max(newest, latest)
    if not missing:
        return None
    return Coverage(newest if newest is not None else 0, missing, total)
