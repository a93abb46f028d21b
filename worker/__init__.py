"""memsync's worker: keeps Chroma (and memsync's text index and vector copy) in step with the agent's database.

The data flow: ``source`` reads rows → ``documents`` turns them into field documents (pure) →
``sync`` compares them with the sync records (``state``), embeds and writes through ``sink``
(Chroma), ``vectorcopy`` and ``textsync``. ``daemon`` runs that step in a loop (``tail``,
``watch``, ``health``, ``maintenance``); ``resync`` runs it once; ``verify`` and ``status`` check it.
"""
