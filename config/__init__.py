"""The shared kernel: what the worker and the search library both need, and nothing else.

- ``settings``, ``errors``: the one settings model; errors named by what the caller does next.
- ``claude_mem``: the agent's database contract (schema eras, read-only connection).
- ``docids``: document ids, their ``doc_type`` and metadata keys.
- ``claude_code``: Claude Code's settings files, its MCP registrations and the hook entry swap adds.
- ``formats``: memsync's own on-disk formats in its data directory; ``limits``: every input bound.

The embedders (``memsync.embedding``) and the Chroma machinery (``memsync.chroma``) are kernel
packages of their own beside this one.
"""
