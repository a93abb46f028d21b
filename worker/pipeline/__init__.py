"""The sync pass: the agent's rows in, exact documents out, recorded so that a pass can be repeated.

- ``source`` (``SourceReader``) reads bounded batches → ``documents`` turns rows into field
  documents (pure) → ``sync`` compares them with the sync records (``state``), embeds, and writes
  through ``sink`` (Chroma) and the derived stores; ``syncpass`` is the full pass (``Scope``) the
  worker, ``worker --once`` and resync share;
- ``target``: the Chroma side (the connection, the active generation's sink, its vector copy);
- ``upstream``: claude-mem's own document format and its sink; ``writers``: who writes that store;
- ``frontier``: a first sync's frontier, where searches see it;
- ``resync``: one exact pass as a batch (``resync``, ``rebuild``, ``count_rows``).

This ``__init__`` imports nothing on purpose: importing any module of the room runs it first, and
``sync``, ``syncpass``, ``target`` and ``resync`` pull in numpy, tantivy, pydantic and httpx. The
command imports what it needs from the modules inside the function that uses it, so ``memsync
--help`` loads none of them.
"""
