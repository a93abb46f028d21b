"""The shared kernel: what the worker and the search library both need, and nothing else.

- ``settings``, ``errors``: the one settings model; errors named by what the caller does next.
- ``claude_mem``: the agent's database contract (schema eras, read-only connection).
- ``docids``: document ids, their ``doc_type`` and metadata keys.
- ``embedding``: the embedding model (offline ONNX MiniLM).
- ``chroma``: Chroma collections and the managed ``chroma run`` server.
- ``formats``: memsync's own on-disk formats in its data directory.
"""
