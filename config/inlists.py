"""``IN (...)`` lists in SQLite statements: one size for every list of values memsync binds into a
statement (the agent's database, the sync records, the embedding store), and the slices of it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

# Values per IN (...) list: under SQLite's bound-variable limit of old builds (999), with room for
# the statement's other parameters; small statements plan fast.
IN_LIST_SIZE = 900


def chunks(items: Sequence[T], size: int = IN_LIST_SIZE) -> Iterator[list[T]]:
    """``items`` in consecutive slices of at most ``size`` (one ``IN (...)`` list each)."""
    for i in range(0, len(items), size):
        yield list(items[i:i + size])
