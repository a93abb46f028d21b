"""Exact nearest rows within a window and filters, from memsync's local vector copy.

The copy (layout and why: ``config.formats.vector_copy``) is written by the worker beside every
Chroma write; a search only maps it read-only. The documents that pass kind, window, project and
type are scored exactly (int8 · query, times each vector's scale), so no passing document is
outranked by off-filter ones: the no-loss rule. The copy's metadata is as fresh as Chroma's; the
engine still checks the rows it returns against SQLite.

What a window costs: the part of the copy the worker rewrote in date order gives the window's
entries as one slice (two binary searches), plus the entries appended since; only those are
masked by kind, project and type. When the passing entries are most of their span, the span is
scored in contiguous blocks (no gather of scattered rows: 6 against 10 ms for 77k documents).
"""

from __future__ import annotations

import bisect
import concurrent.futures
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.formats.vector_copy import (
    KIND_BYTE,
    Manifest,
    copy_dir,
    damage,
    entries_file,
    open_arrays,
    vectors_file,
)
from memsync.config.settings import Settings
from memsync.search.models import Filters, Window
from memsync.search.vectorstore import RowHit

CHUNK = 4096  # rows per int8→float32 product: small enough to stay in cache
PARALLEL_MIN = 16_384  # rows from which a scan is split over two threads
DENSE = 1.5  # score the whole span when it is at most this many times the passing entries
# The filters its entries can apply (with the window); a search with any other goes to Chroma.
COPY_FILTERS = frozenset({"project", "types", "date_from", "date_to"})
_ROW_BITS = 56  # a (kind, row) key packed into one int64: kind byte above a 56-bit row id
# Sorted (kind, row) keys of a copy's entries, per copy directory and entry count: built once per
# process and count (append-only copy: a new count means new entries), reused by every search.
# The last entry's packed key rides along to tell the same copy from a refilled one.
_key_index: dict[str, tuple[int, npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.int64]]] = {}
_key_index_lock = threading.Lock()  # one thread sorts; the others wait for its result


def _pack(entries: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
    """(kind, row) of each entry as one int64."""
    return (entries["kind"].astype(np.int64) << _ROW_BITS) | entries["row"].astype(np.int64)


def _matches(cached: tuple[int, npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.int64]],
             entries: npt.NDArray[np.void], count: int) -> bool:
    """Whether the cached order was built from these entries: the entry it ended with is still the
    same (an append-only copy never changes an entry's kind or row; a refilled one does). A view
    opened before the cache grew (``count`` smaller) is taken as the same copy."""
    if count < cached[0] or cached[0] == 0:
        return True
    return bool(np.array_equal(_pack(np.asarray(entries[cached[0] - 1:cached[0]])), cached[3]))


_scan_pool: concurrent.futures.ThreadPoolExecutor | None = None
_scan_pool_lock = threading.Lock()


def _in_parts(work: Callable[[int, int], None], lo: int, hi: int) -> None:
    """``work(a, b)`` over [lo, hi): in two halves side by side when the range is large. The
    int8→float32 conversion is the scan's cost and numpy runs it outside the GIL, so the second
    core (free once the lexical side is done) halves the window's scan: 77k documents 6.4 → 4.3 ms
    on two idle cores (``scripts/bench_search`` stage ``copy_score``)."""
    global _scan_pool
    if hi - lo < PARALLEL_MIN or (os.cpu_count() or 1) < 2:
        work(lo, hi)
        return
    with _scan_pool_lock:
        if _scan_pool is None:
            _scan_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="memsync-scan")
        pool = _scan_pool
    mid = lo + (hi - lo) // 2
    other = pool.submit(work, mid, hi)
    work(lo, mid)
    other.result()


# The last mapping of each copy directory, reused while the files and the count are the same: a
# fresh mapping faults its pages in again, ~3 ms of a 90-day window's scan at 77k documents. Safe
# to keep: the writer only appends, marks in place (seen through the shared mapping) and rewrites
# into new files (a new inode here); one entry per directory, so a replaced file is let go.
# With it, what checking its files against the manifest found (a damaged copy is never
# used), and how far its entries were checked with which checksum: the copy only appends, so a
# grown one is checked from there (its new entries only).
_Arrays = tuple[npt.NDArray[np.int8], npt.NDArray[np.void]]
# directory -> (identity, mtime of the entries, arrays or None, why they are not used)
_maps: dict[Path, tuple[tuple[object, ...], int, _Arrays | None, str | None]] = {}
_checked: dict[Path, tuple[tuple[object, ...], int, int]] = {}  # (file identity, entries checked, checksum)
_maps_lock = threading.Lock()


def _mapped(directory: Path, manifest: Manifest) -> tuple[_Arrays | None, str | None]:
    """The copy's arrays for ``manifest`` (the cached mapping when nothing changed, else a new one,
    checked), or None and why the files disagree with the manifest (None: mid-rewrite, try again).

    What is checked when: a new mapping checks the entries appended since the last check (all of
    them the first time); entries rewritten in place (the worker's dead marks, or damage: a
    changed mtime at the same size) are checked whole again over the same mapping, 8-9 ms at 313k
    entries; a file of another size is mapped again (a mapping past a truncated file's end would
    kill the process with SIGBUS)."""
    if manifest.count == 0:
        return open_arrays(directory, manifest), None  # nothing to map (the files may not exist yet)
    try:
        vectors = (directory / vectors_file(manifest.layout)).stat()
        entries = (directory / entries_file(manifest.layout)).stat()
    except OSError:
        reason, _ = damage(directory, manifest)
        return None, reason if Manifest.read(directory) == manifest else None  # a rewrite's switch: again
    # The model too: a copy replaced for another model reuses its file names, and a freed inode
    # number can come back for the new file.
    files = (manifest.layout, manifest.model, vectors.st_ino, vectors.st_dev, entries.st_ino)
    identity = (*files, vectors.st_size, entries.st_size, manifest.count, manifest.crc)
    with _maps_lock:
        cached = _maps.get(directory)
        checked = _checked.get(directory)
    if cached is not None and cached[0] == identity:
        if cached[1] == entries.st_mtime_ns or cached[2] is None:
            return cached[2], cached[3]
        arrays: _Arrays | None = cached[2]
        start, crc = 0, 0  # written in place: every entry again
    else:
        arrays = open_arrays(directory, manifest)
        start, crc = (checked[1], checked[2]) if checked is not None and checked[0] == files \
            and checked[1] <= manifest.count else (0, 0)
    if arrays is None:
        reason, _ = damage(directory, manifest)
    else:
        reason, crc = damage(directory, manifest, arrays[1], start, crc)
        if reason is not None and start:
            reason, crc = damage(directory, manifest, arrays[1])  # a refilled copy that got the same inode
    with _maps_lock:
        if reason is None:
            _checked[directory] = (files, manifest.count, crc)
        _maps[directory] = (identity, entries.st_mtime_ns, arrays if reason is None else None, reason)
    return (arrays, None) if reason is None else (None, reason)


class VectorCopy:
    """A read-only view of one generation's copy, for one search."""

    def __init__(self, manifest: Manifest, vectors: npt.NDArray[np.int8], entries: npt.NDArray[np.void],
                 directory: str = "") -> None:
        self.manifest = manifest
        # Plain views of the mappings: a memmap's slices pay Python-level bookkeeping per slice.
        self._vectors = np.asarray(vectors)
        self._entries = np.asarray(entries)
        self._directory = directory

    @classmethod
    def open(cls, settings: Settings, collection: str, model: str, dim: int) -> VectorCopy | None:
        """The copy of ``collection`` when it is complete, of this model and undamaged, else None."""
        return cls.open_checked(settings, collection, model, dim)[0]

    @classmethod
    def open_checked(cls, settings: Settings, collection: str, model: str, dim: int
                     ) -> tuple[VectorCopy | None, str | None]:
        """:meth:`open`, and when the copy is damaged, why (its files disagree with its manifest:
        the search uses Chroma, as for an incomplete copy, and the worker rebuilds it)."""
        if not settings.vector_copy:
            return None, None
        directory = copy_dir(settings, collection)
        reason = None
        for _ in range(2):  # a rewrite may switch the files between reading the manifest and mapping them
            manifest = Manifest.read(directory)
            if manifest is None or not manifest.complete or manifest.model != model or manifest.dim != dim:
                return None, None
            arrays, reason = _mapped(directory, manifest)
            if arrays is not None:
                return cls(manifest, *arrays, directory=f"{directory}#{manifest.layout}"), None
        return None, reason

    def __len__(self) -> int:
        return self.manifest.count

    def _codes(self, table: list[str], values: Iterable[str]) -> list[int]:
        wanted = set(values)
        return [i for i, v in enumerate(table) if v in wanted]

    def candidates(self, kinds: Iterable[Kind], filters: Filters, window: Window) -> npt.NDArray[np.intp]:
        """Positions of the live documents that pass kind, window, project and types, ascending."""
        projects: list[int] | None = None
        if names := filters.projects():
            projects = self._codes(self.manifest.projects, names)
            if not projects:
                return np.zeros(0, np.intp)
        codes = [KIND_BYTE[k] for k in kinds]
        types = self._codes(self.manifest.types, filters.types) if filters.types else None
        spans = [(0, self.manifest.count)]
        ordered = self.manifest.ordered
        if ordered and (window.start_ms is not None or window.end_ms is not None):
            epochs = self._entries["epoch"]
            lo = 0 if window.start_ms is None else bisect.bisect_left(epochs, window.start_ms, 0, ordered)
            hi = ordered if window.end_ms is None else bisect.bisect_right(epochs, window.end_ms, lo, ordered)
            spans = [(lo, hi), (ordered, self.manifest.count)]
        parts = []
        for a, b in spans:
            if b <= a:
                continue
            e = self._entries[a:b]
            mask = e["live"] == 1
            if len(codes) < len(KINDS):
                mask &= np.isin(e["kind"], codes)
            if window.start_ms is not None:
                mask &= e["epoch"] >= window.start_ms
            if window.end_ms is not None:
                mask &= e["epoch"] <= window.end_ms
            if projects is not None:  # one comparison per name: np.isin costs ~40x more here (a hot path)
                hit = (e["project"] == projects[0]) | (e["merged"] == projects[0])
                for code in projects[1:]:
                    hit |= (e["project"] == code) | (e["merged"] == code)
                mask &= hit
            if types is not None:
                mask &= np.isin(e["type"], types)
            parts.append(np.flatnonzero(mask) + a)
        return np.concatenate(parts) if parts else np.zeros(0, np.intp)

    def _scores(self, q: npt.NDArray[np.float32], positions: npt.NDArray[np.intp]) -> npt.NDArray[np.float32]:
        """Scaled int8 · q of the vectors at ``positions`` (ascending): whole blocks of their span
        when they fill most of it, else gathered; a large span in parts on two threads."""
        lo, hi = int(positions[0]), int(positions[-1]) + 1
        scale = self._entries["scale"]
        if hi - lo <= DENSE * len(positions):
            span = np.empty(hi - lo, np.float32)

            def block(a: int, b: int) -> None:
                for i in range(a, b, CHUNK):
                    j = min(i + CHUNK, b)
                    np.multiply(self._vectors[i:j].astype(np.float32) @ q, scale[i:j], out=span[i - lo:j - lo])

            _in_parts(block, lo, hi)
            return span if len(positions) == hi - lo else span[positions - lo]
        scores = np.empty(len(positions), np.float32)

        def gathered(a: int, b: int) -> None:
            for i in range(a, b, CHUNK):
                at = positions[i:min(i + CHUNK, b)]
                np.multiply(self._vectors[at].astype(np.float32) @ q, scale[at], out=scores[i:i + len(at)])

        _in_parts(gathered, 0, len(positions))
        return scores

    def nearest(self, vector: npt.NDArray[np.float32], positions: npt.NDArray[np.intp], n_docs: int
                ) -> tuple[list[RowHit], bool]:
        """The rows of the ``n_docs`` best documents among ``positions``, best first, and whether
        that was all of them (then no passing row is missing from the answer)."""
        if len(positions) == 0:
            return [], True
        scores = self._scores(np.asarray(vector, dtype=np.float32), positions)
        cut = len(scores) - n_docs
        top = np.argpartition(scores, cut)[cut:] if cut > 0 else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        picked = self._entries[positions[top]]  # one gather, then plain lists: no per-item numpy
        best: dict[tuple[Kind, int], RowHit] = {}
        fields = self.manifest.fields
        for kind_code, row, field_code, score in zip(picked["kind"].tolist(), picked["row"].tolist(),
                                                      picked["field"].tolist(), scores[top].tolist(), strict=True):
            key = (KINDS[kind_code], row)
            if key not in best:
                best[key] = RowHit(key[0], row, min(1.0, max(0.0, score)), fields[field_code] or None)
        return list(best.values()), len(scores) <= n_docs

    def _keys(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]]:
        """Every entry's packed (kind, row) key among the first ``count``, sorted, and the entry
        positions in that order. The copy only appends: a grown copy sorts its new entries and
        inserts them into the cached order (one linear copy), so a worker writing all the time does
        not cost each search a full sort (90 ms at 313k entries); a view opened earlier (smaller
        count) uses the cache without its newer entries. The cache is checked against the copy's
        own entries (a copy dropped and refilled in the same directory is sorted anew)."""
        count = self.manifest.count
        e = self._entries
        with _key_index_lock:
            cached = _key_index.get(self._directory)
            if cached is not None and not _matches(cached, e, count):
                cached = None
            if cached is not None and cached[0] >= count:
                keys, order = cached[1], cached[2]
                if cached[0] > count:
                    keep = order < count
                    keys, order = keys[keep], order[keep]
                return keys, order
            start = cached[0] if cached is not None else 0
            new_keys = _pack(np.asarray(e[start:count]))
            new_order = np.argsort(new_keys, kind="stable") + start
            if cached is not None:
                sorted_new = new_keys[new_order - start]
                at = np.searchsorted(cached[1], sorted_new, side="right")  # after equal keys: entry order kept
                keys, order = np.insert(cached[1], at, sorted_new), np.insert(cached[2], at, new_order)
            else:
                keys, order = new_keys[new_order], new_order
            _key_index[self._directory] = (count, keys, order, _pack(np.asarray(e[count - 1:count])))
            return keys, order

    def row_vectors(self, rows: Iterable[tuple[Kind, int]]) -> dict[tuple[Kind, int], npt.NDArray[np.float32]]:
        """The live documents' unit vectors of each row (documents × dim, float32), for the rows the
        copy holds."""
        wanted = list(rows)
        if not wanted or self.manifest.count == 0:
            return {}
        keys, order = self._keys()
        packed = np.array([(KIND_BYTE[k] << _ROW_BITS) | r for k, r in wanted], dtype=np.int64)
        lo = np.searchsorted(keys, packed, side="left")
        hi = np.searchsorted(keys, packed, side="right")
        counts = hi - lo
        if not counts.any():
            return {}
        # Every entry of every wanted row in one gather (per-row memmap reads cost ~3 µs each).
        owner = np.repeat(np.arange(len(wanted)), counts)
        pos = order[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())]
        entries = np.asarray(self._entries)[pos]
        live = entries["live"] == 1
        owner, pos = owner[live], pos[live]
        vectors = np.asarray(self._vectors)[pos].astype(np.float32) * entries["scale"][live][:, None]
        out: dict[tuple[Kind, int], npt.NDArray[np.float32]] = {}
        starts = [0, *(np.flatnonzero(np.diff(owner)) + 1).tolist()]
        ends = [*starts[1:], len(owner)]
        owners = owner.tolist()
        for a, b in zip(starts, ends, strict=True):
            if b > a:
                out[wanted[owners[a]]] = vectors[a:b]
        return out
