"""Checks of what the worker wrote, for ``memsync status`` and ``memsync verify``.

- ``status``: per kind and project, rows in SQLite against documents acknowledged in Chroma, and
  the health verdict (``status``, ``verdict``);
- ``verify``: the documents the database implies against what Chroma holds (``verify``).

This ``__init__`` imports nothing on purpose: importing any module of the room runs it first, and
both pull in numpy, tantivy and pydantic (and the functions share their modules' names, so a
re-export would hide the module). The command imports what it needs from the modules inside the
function that uses it, so ``memsync --help`` loads none of them.
"""
