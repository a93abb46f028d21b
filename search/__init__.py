"""memsync search library: hybrid search over claude-mem memory, semantic (the vector store) fused
with BM25 (memsync's text index, with FTS5 for the rows newer than it and as the fallback when
there is no text index).

A server imports :class:`Searcher` (one per process) and calls ``search`` (with a
:class:`SearchRequest`; ``search.request`` also holds the one parser of the front ends), ``find_by``,
``timeline``, ``recent_context``, ``get`` and ``similar``. Nothing here needs the worker running:
without its text index the app's FTS5 tables answer, and when the vector store cannot answer,
results come from the lexical side alone, labelled ``lexical_fallback``.

Modules: ``request`` (the request, its limits and parser), ``plan`` (what one search does),
``engine`` (the pipeline, :class:`Searcher`), ``lexical`` and ``semantic`` (the two
sides, each deciding which index answers), ``fusion``, ``hydrate``, ``lookups``, ``sql`` (the
read-only connection, filters as SQL), and the indexes read: ``textindex``, ``app_fts`` (with
``fts``, query text → MATCH), ``lexical_index``, ``vectorstore``, ``vectorcopy``.
"""

from memsync.config.records import parse_kinds
from memsync.search.engine import Searcher
from memsync.search.models import (
    Filters,
    Format,
    Mode,
    Order,
    Response,
    Result,
    SearchError,
    Signal,
    Window,
    make_window,
)
from memsync.search.request import SearchRequest
from memsync.search.sql import QueryTimeout
from memsync.search.vectorstore import VectorUnavailable

__all__ = [
    "Filters", "Format", "Mode", "Order", "QueryTimeout", "Response", "Result", "SearchError", "SearchRequest",
    "Searcher", "Signal", "VectorUnavailable", "Window", "make_window", "parse_kinds",
]
