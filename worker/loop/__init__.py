"""The worker loop: the daemon that runs the sync pass again and again, and what keeps it running.

- ``daemon``: the loop (``Worker``: schedule, wake, back off, stop);
- ``tail``, ``watch``: change detection (poll = truth) and file events (hints);
- ``health``: the worker's health and ``worker.json``; ``metrics``: the same for Prometheus;
- ``progress``: what a first sync has made searchable (``FirstSyncProgress``);
- ``maintenance``: idle work (vector copy fill, date order, compaction scheduling);
- ``lock`` (one worker per data directory), ``signals`` (``SignalRelay``), ``backoff``, ``logs``
  (structlog), ``memory`` (freed memory back to the system).

This ``__init__`` imports nothing on purpose: importing any module of the room runs it first, and
``daemon`` and ``health`` pull in numpy, tantivy, pydantic and httpx, while ``signals`` must stay
cheap for every command. The command imports what it needs from the modules inside the function that
uses it, so ``memsync --help`` loads none of them.
"""
