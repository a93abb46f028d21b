"""The worker loop: the daemon that runs the sync pass again and again, and what keeps it running.

``daemon`` (the loop), ``tail`` and ``watch`` (noticing new rows), ``health`` (``worker.json``,
metrics), ``maintenance`` (idle work), ``signals``, ``backoff``, ``lock``, ``logs``, ``metrics``,
``memory`` (giving freed memory back) and ``progress`` (a first sync's figures).
"""
