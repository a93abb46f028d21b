"""The sync pass: the agent's rows in, exact documents out, recorded so a pass can be repeated.

``source`` reads rows → ``documents`` turns them into field documents (pure) → ``sync`` and
``syncpass`` compare them with the sync records (``state``), embed and write through ``sink``
(Chroma) and ``target`` (the active generation); ``upstream`` is claude-mem's own format,
``frontier`` a first sync's frontier, ``writers`` who writes the upstream store, and ``resync``
runs one pass as a batch.
"""
