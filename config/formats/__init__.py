"""memsync's own on-disk formats in its data directory: sync records, text index, vector copy, ``worker.json``.

Each format has one module here that both its writer (``memsync.worker``) and its reader
(``memsync.search``, ``memsync.worker.checks.status``) import.
"""
