"""claude-mem databases memsync writes for people without claude-mem.

- ``importer``: ``memsync db init`` / ``memsync db import`` (``init_db``, ``import_records``,
  ``read_jsonl``);
- ``demo``: the deterministic demo memory (``generate``), from ``demo_episodes``, its handwritten
  sessions (834 lines of text).

This ``__init__`` imports nothing on purpose: importing any module of the room runs it first, and
``demo_episodes`` is a large module of text and ``importer`` loads pydantic. The command imports
what it needs from the modules inside the function that uses it, so ``memsync --help`` loads none of
them.
"""
