"""memsync: semantic search over an AI coding agent's memory (claude-mem's SQLite database).

The package's parts: ``memsync.config`` (the shared kernel), ``memsync.worker`` (the sync daemon),
``memsync.search`` (the search library: ``from memsync.search import Searcher``),
``memsync.servers`` (MCP and HTTP), and the ``memsync`` command (``memsync.main``,
``python -m memsync``).
"""
