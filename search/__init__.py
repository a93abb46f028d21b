"""memsync search library: hybrid semantic + FTS5 search over claude-mem memory.

A server imports :class:`Searcher` (one per process) and calls ``search``, ``find_by``,
``timeline``, ``recent_context``, ``get`` and ``similar``. Nothing here needs the worker running:
when the vector store cannot answer, results come from FTS5, labelled ``lexical_fallback``.
"""

from memsync.config.records import parse_kinds
from memsync.search.engine import Searcher, SearchError, make_window
from memsync.search.models import Filters, Format, Mode, Order, Response, Result, Signal, Window
from memsync.search.rows import QueryTimeout
from memsync.search.semantic import VectorUnavailable

__all__ = [
    "Filters", "Format", "Mode", "Order", "QueryTimeout", "Response", "Result", "SearchError", "Searcher", "Signal",
    "VectorUnavailable", "Window", "make_window", "parse_kinds",
]
