"""memsync's worker: keeps Chroma (and memsync's text index and vector copy) in step with the agent's database.

Its rooms:
- ``pipeline``: the sync pass (``source`` reads rows → ``documents`` turns them into field
  documents (pure) → ``sync`` compares them with the sync records (``state``), embeds and writes
  through ``sink`` (Chroma)); ``resync`` runs it once;
- ``stores``: the derived stores the pass writes beside Chroma (``vectorcopy``, ``textsync``,
  ``embedstore``, ``compact``);
- ``loop``: the daemon that runs the pass in a loop (``daemon``, ``tail``, ``watch``, ``health``,
  ``maintenance``, ...);
- ``checks``: ``verify`` and ``status`` check what it wrote;
- ``seed``: claude-mem databases for people without claude-mem (``importer``, the ``demo``).
"""
