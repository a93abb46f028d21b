"""Which entry of the vector copy holds each live document: the writer's index (``worker.stores.vectorcopy``).

A document's key (kind, row id, field code) is packed into one integer (:func:`pack`). Most keys
live in two sorted numpy arrays, keys and positions (16 bytes a document); a superseded key gets
its new position in place, and a deleted one position -1 until the next merge drops it. Keys not
in the arrays yet go to a small dict, merged into the arrays when it reaches a share of them.

Why (flat worker memory): the writer kept a ``dict[tuple, int]``, about 180 bytes a document (a 3-tuple, its
ints and a dict slot): 56 MB at 313k documents, and the worker's memory grew with every document
written. The arrays hold the same at 16 bytes a document, and a corpus that deletes as much as it
adds keeps their size (deleted keys go at the next merge).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

KIND_BITS = 2
FIELD_BITS = 16
ROW_SHIFT = KIND_BITS + FIELD_BITS
ROW_MIN, ROW_MAX = -(1 << (63 - ROW_SHIFT)), (1 << (63 - ROW_SHIFT)) - 1  # keys that fit an int64
MERGE_MIN = 1024  # the dict of recent keys is merged when it holds this many keys ...
MERGE_SHARE = 32  # ... or 1/MERGE_SHARE of the arrays' keys, whichever is more (amortised O(log n) a key)
GONE = -1


def pack(kind: int, row: int, field: int) -> int:
    """One integer for a document's key; it fits an int64 when ROW_MIN <= row <= ROW_MAX."""
    return (row << ROW_SHIFT) | (field << KIND_BITS) | kind


def unpack(key: int) -> tuple[int, int, int]:
    """(kind, row, field) of a packed key."""
    return key & ((1 << KIND_BITS) - 1), key >> ROW_SHIFT, (key >> KIND_BITS) & ((1 << FIELD_BITS) - 1)


def pack_arrays(kind: npt.NDArray[np.integer], row: npt.NDArray[np.integer],
                field: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """:func:`pack` of arrays (rows outside ROW_MIN..ROW_MAX do not fit: see :meth:`KeyIndex.load`)."""
    return (row.astype(np.int64) << ROW_SHIFT) | (field.astype(np.int64) << KIND_BITS) | kind.astype(np.int64)


class KeyIndex:
    """Packed key → entry position of the live documents."""

    def __init__(self) -> None:
        self._keys: npt.NDArray[np.int64] = np.zeros(0, np.int64)  # sorted
        self._pos: npt.NDArray[np.int64] = np.zeros(0, np.int64)  # GONE: deleted since the last merge
        self._gone = 0
        self._recent: dict[int, int] = {}  # keys not in the arrays (and keys too large for them)
        self._wide = 0  # how many of `_recent` never fit the arrays

    def __len__(self) -> int:
        return len(self._keys) - self._gone + len(self._recent)

    def __contains__(self, key: int) -> bool:
        return self.get(key) is not None

    @property
    def nbytes(self) -> int:
        """Memory held, about: the arrays plus the dict (its table and its int objects)."""
        return self._keys.nbytes + self._pos.nbytes + (len(self._recent) * 100 if self._recent else 0)

    def _find(self, key: int) -> int:
        """Index of ``key`` in the arrays, or -1."""
        if not ROW_MIN <= key >> ROW_SHIFT <= ROW_MAX or not len(self._keys):
            return -1
        i = int(np.searchsorted(self._keys, key))
        return i if i < len(self._keys) and int(self._keys[i]) == key else -1

    def get(self, key: int) -> int | None:
        """The position of a live document's entry, or None."""
        pos = self._recent.get(key)
        if pos is not None:
            return pos
        i = self._find(key)
        if i < 0:
            return None
        pos = int(self._pos[i])
        return None if pos == GONE else pos

    def set(self, key: int, pos: int) -> int | None:
        """Point ``key`` at ``pos``; returns the position it had (now dead), or None."""
        old = self._recent.get(key)
        if old is not None:
            self._recent[key] = pos
            return old
        i = self._find(key)
        if i >= 0:
            before = int(self._pos[i])
            self._pos[i] = pos
            if before == GONE:
                self._gone -= 1
                return None
            return before
        self._recent[key] = pos
        if not ROW_MIN <= key >> ROW_SHIFT <= ROW_MAX:
            self._wide += 1
        if len(self._recent) - self._wide >= max(MERGE_MIN, len(self._keys) // MERGE_SHARE):
            self.merge()
        return None

    def pop(self, key: int) -> int | None:
        """Forget ``key``; returns its position, or None when it was not live."""
        if key in self._recent:
            if not ROW_MIN <= key >> ROW_SHIFT <= ROW_MAX:
                self._wide -= 1
            return self._recent.pop(key)
        i = self._find(key)
        if i < 0 or int(self._pos[i]) == GONE:
            return None
        pos = int(self._pos[i])
        self._pos[i] = GONE
        self._gone += 1
        if self._gone >= max(MERGE_MIN, len(self._keys) // MERGE_SHARE):
            self.merge()
        return pos

    def merge(self) -> None:
        """Move the recent keys into the arrays and drop the deleted ones."""
        wide = {k: p for k, p in self._recent.items() if not ROW_MIN <= k >> ROW_SHIFT <= ROW_MAX}
        narrow = [k for k in self._recent if k not in wide]
        live = self._pos != GONE
        keys = np.concatenate([self._keys[live], np.fromiter(narrow, np.int64, len(narrow))])
        pos = np.concatenate([self._pos[live], np.fromiter((self._recent[k] for k in narrow), np.int64, len(narrow))])
        order = np.argsort(keys, kind="stable")
        self._keys, self._pos = keys[order], pos[order]
        self._recent, self._wide, self._gone = wide, len(wide), 0

    def set_many(self, keys: npt.NDArray[np.int64], positions: npt.NDArray[np.int64]) -> list[int]:
        """:meth:`set` of many keys at once (all fitting an int64; a later one of equal keys wins);
        returns the positions they replaced, now dead. One merge and one sort, not a loop."""
        order = np.argsort(keys, kind="stable")
        keys, positions = keys[order], positions[order]
        last = np.ones(len(keys), bool)
        last[:-1] = keys[1:] != keys[:-1]
        dead: list[int] = positions[~last].tolist()
        keys, positions = keys[last], positions[last]
        self.merge()
        at = np.searchsorted(self._keys, keys)
        hit = at < len(self._keys)
        hit[hit] = self._keys[at[hit]] == keys[hit]
        old = self._pos[at[hit]]
        dead += old[old != GONE].tolist()
        self._pos[at[hit]] = positions[hit]
        if not hit.all():
            merged = np.concatenate([self._keys, keys[~hit]])
            order = np.argsort(merged, kind="stable")
            self._keys, self._pos = merged[order], np.concatenate([self._pos, positions[~hit]])[order]
        return dead

    def clear(self) -> None:
        """Forget every key."""
        self._keys, self._pos = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self._recent, self._wide, self._gone = {}, 0, 0

    def __iter__(self) -> Iterator[int]:
        """Every live key (arrays first, in key order; then the recent ones)."""
        yield from self._keys[self._pos != GONE].tolist()
        yield from list(self._recent)

    def snapshot(self) -> list[int] | npt.NDArray[np.int64]:
        """Every live key as of this call, a copy (8 bytes a key in an array, not a Python int
        each, unless a key too wide for the arrays is among them)."""
        packed = self._keys[self._pos != GONE]
        if self._wide:  # keys beyond an int64 (no real row id is that large) stay Python ints
            return [*packed.tolist(), *self._recent]
        return np.concatenate([packed, np.fromiter(self._recent, np.int64, len(self._recent))])
