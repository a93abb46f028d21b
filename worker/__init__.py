"""memsync's worker: keeps Chroma (and memsync's text index and vector copy) in step with the agent's database.

Its rooms, bottom to top (a room imports only rooms below it; ``tests/test_boundaries.py`` holds the
order): ``process`` (what every job of the process uses: logs, freed memory, signals) and ``seed``
(claude-mem databases for people without claude-mem) stand alone; ``rows`` (the agent's rows, the
documents they imply and memsync's sync records of them) ← ``stores`` (the derived stores beside
Chroma) ← ``pipeline`` (the sync pass) ← ``checks`` (``verify``, ``status``) and ``loop`` (the
daemon that runs the pass again and again).

Each room's ``__init__`` exports, in ``__all__``, what other rooms and packages use, and imports
each name only when it is first used (:func:`lazy_exports`): importing a room costs nothing, so a
command imports its room without loading numpy, tantivy or pydantic before it needs them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(
    package: str, modules: Mapping[str, Iterable[str]],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A room's module ``__getattr__`` and ``__dir__`` (PEP 562): ``modules`` maps each module of the
    room to the names it exports; a name's module is imported on first use, the name kept in the room."""
    names = {name: module for module, exported in modules.items() for name in exported}

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:  # an AttributeError lets ``from room import module`` import the module
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
