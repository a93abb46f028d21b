"""memsync's own copy of the vectors it wrote to Chroma, for exact filtered ranking: the layout,
shared by the worker, which writes it (``worker.stores.vectorcopy``) beside every Chroma write, and the
search, which only reads it (``search.vectorcopy``).

Why it exists: a search with a window or a project filter must rank exactly the rows that pass
(the no-loss rule), and Chroma has no fast way to do that at 100k rows (313k documents): its
``where`` costs 400-1,050 ms, a query restricted to 26k ids 50-70 ms plus the id lists, and an
over-fetched unfiltered top-N misses when few rows pass. A scan of int8 vectors of the documents
that pass costs 4-9 ms (``scripts/bench_search.py``). int8 (one scale per vector) is a quarter of
float32; its cosine differs from the float one by about 0.005, below what reorders a top list.

Layout, one directory per collection generation, ``DATA_DIR/vectors/<collection>/``:

- ``vectors.i8``: ``count × dim`` int8, a document's unit vector ≈ ``row * scale``;
- ``entries.bin``: ``count`` records of :data:`ENTRY` (kind, row id, field, project, the project
  it was merged into, observation type, created_at_epoch, scale, live);
- ``manifest.json``: version, model, dimension, ``count``, ``complete``, ``layout``, ``ordered``,
  the code tables of fields, projects and types (an entry stores indexes into them),
  ``entries_crc``: the crc32 of the first ``count`` entries with their ``live`` byte zeroed, and
  ``vectors_crc``: the crc32 of each block of :data:`BLOCK` vectors (the last block: the vectors
  it holds so far).

Checked, never trusted: a copy whose files are shorter than its manifest counts, whose
entries name codes its tables lack, or whose entries' checksum differs (:func:`damage`) is damaged.
Searches then use Chroma as for an incomplete copy, and the worker discards it and fills it again
(``worker.stores.vectorcopy``). The checksum leaves out the ``live`` byte so that marking an entry dead in
place changes nothing, and appending only continues it (crc32 runs on): a writer never reads the
file again to keep it. Checking the whole entries file costs a copy and a crc32 of 32 bytes an
entry: 2 ms at 100k entries, 8-9 ms at 313k (measured on two busy cores); readers check only the
entries appended since their last look.
A version 2 manifest has no checksum: its sizes and codes are checked, and the next writer records
the checksum of what it finds (no rebuild).

The vectors have checksums of their own, per block (:func:`vectors_damage`): the entries' checksum
never covered them, and random bytes written over the vectors file changed rankings unseen. A
writer continues the last block's crc32 as it appends (it never reads the file again) and a rewrite
computes them as it writes. Checking them reads the whole file (120 MB at 313k documents, 384
dimensions: a crc32 per 1.5 MB block, 40-90 ms), too much for a search; the worker checks them
on its schedule in slices (``worker.loop.maintenance``), ``status`` and ``verify`` whole. A version 3
manifest has none: the next writer records those of the vectors it finds (no rebuild), as for the
entries' checksum of version 2.

Append-only between rewrites: a document written again gets a new entry and its old one is marked
dead (``live`` = 0, written in place); a deleted document is marked dead. The manifest is replaced
atomically after the appended bytes are on disk, so a reader never sees an entry beyond ``count``.
``complete`` says the copy holds every document Chroma acknowledged for the generation (a
generation started with the copy, or one filled from Chroma); a reader uses nothing else.

A rewrite (``worker.stores.vectorcopy`` ``reorder``) drops the dead entries and sorts the live ones by
date into files of a new ``layout`` number (``vectors.N.i8``, ``entries.N.bin``; layout 0 is the
plain names), then switches the manifest: a reader that mapped the old files keeps them until it
is done, and positions never change under it. ``ordered`` entries from the start are sorted by
``epoch`` (the rewrite's); the ones after them were appended since. A window then reads a slice
found by binary search plus that tail, not every entry: the default 90-day window is the path
almost every search takes, and without the order it cost a mask over the whole copy and a gather
of scattered vectors.
"""

from __future__ import annotations

import io
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.settings import Settings

DIR = "vectors"
VECTORS_FILE = "vectors.i8"
ENTRIES_FILE = "entries.bin"
MANIFEST_FILE = "manifest.json"
LOCK_FILE = "lock"
VERSION = 4
# 1: no layout or order (layout 0, nothing ordered); 2: no entries_crc; 3: no vectors_crc
READ_VERSIONS = (1, 2, 3, 4)
CHECK_CHUNK = 16384  # entries copied per crc32 call (512 kB: stays in cache; bounded memory)
# Vectors per checksum block: 1.5 MB at 384 dimensions, the buffer a check reads into (bounded
# memory), and 77 checksums in the manifest at 313k documents (it is rewritten at every append).
BLOCK = 4096

ENTRY = np.dtype([
    ("row", "<i8"), ("epoch", "<i8"), ("scale", "<f4"), ("project", "<i4"), ("merged", "<i4"),
    ("field", "<i2"), ("type", "<i2"), ("kind", "u1"), ("live", "u1"),
])
LIVE_OFFSET = ENTRY.itemsize - 1  # `live`, the last byte of a packed entry
KIND_BYTE: dict[Kind, int] = {k: i for i, k in enumerate(KINDS)}  # an entry's `kind` byte


def vectors_file(layout: int) -> str:
    """The vectors file of a layout (0: the plain name of version 1)."""
    return VECTORS_FILE if layout == 0 else f"vectors.{layout}.i8"


def entries_file(layout: int) -> str:
    """The entries file of a layout (0: the plain name of version 1)."""
    return ENTRIES_FILE if layout == 0 else f"entries.{layout}.bin"


def copy_dir(settings: Settings, collection: str) -> Path:
    """Where the copy of one collection generation lives."""
    return settings.data_dir / DIR / collection


def quantize(vectors: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Rows → int8 rows and their scales (row ≈ int8 * scale), the largest component at ±127."""
    peak = np.abs(vectors).max(axis=1)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(vectors / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


@dataclass
class Manifest:
    """What a reader may use: the first ``count`` entries, decoded with these tables."""

    model: str
    dim: int
    count: int = 0
    complete: bool = False
    fields: list[str] = field(default_factory=list)
    projects: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    layout: int = 0  # which files hold the entries (a rewrite writes new ones)
    ordered: int = 0  # entries [0, ordered) are sorted by epoch
    crc: int | None = None  # entries_checksum of the first `count` entries; None: a version 2 manifest
    blocks: list[int] | None = None  # crc32 per BLOCK vectors (vector_checksums); None: before version 4

    @classmethod
    def read(cls, directory: Path) -> Manifest | None:
        """The manifest, or None when absent, unreadable or of another layout version."""
        try:
            data: dict[str, Any] = json.loads((directory / MANIFEST_FILE).read_text())
        except (OSError, ValueError):
            return None
        if data.get("version") not in READ_VERSIONS:
            return None
        try:
            return cls(str(data["model"]), int(data["dim"]), int(data["count"]), bool(data["complete"]),
                       list(data["fields"]), list(data["projects"]), list(data["types"]),
                       int(data.get("layout", 0)), min(int(data.get("ordered", 0)), int(data["count"])),
                       None if data.get("entries_crc") is None else int(data["entries_crc"]),
                       None if data.get("vectors_crc") is None else [int(c) for c in data["vectors_crc"]])
        except (KeyError, TypeError, ValueError):
            return None

    def write(self, directory: Path) -> None:
        """Replace the manifest atomically (after the data it counts is on disk)."""
        tmp = directory / (MANIFEST_FILE + ".tmp")
        payload = {"version": VERSION, "model": self.model, "dim": self.dim, "count": self.count,
                   "complete": self.complete, "fields": self.fields, "projects": self.projects,
                   "types": self.types, "layout": self.layout, "ordered": self.ordered, "entries_crc": self.crc,
                   "vectors_crc": self.blocks}
        with open(tmp, "w") as fh:
            json.dump(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / MANIFEST_FILE)


def open_arrays(directory: Path, manifest: Manifest) -> tuple[npt.NDArray[np.int8], npt.NDArray[Any]] | None:
    """Read-only mappings of the first ``count`` vectors and entries (None when the files are
    shorter than the manifest says: a copy being replaced)."""
    if manifest.count == 0:
        return np.zeros((0, manifest.dim), np.int8), np.zeros(0, ENTRY)
    try:
        vectors = np.memmap(directory / vectors_file(manifest.layout), dtype=np.int8, mode="r",
                            shape=(manifest.count, manifest.dim))
        entries = np.memmap(directory / entries_file(manifest.layout), dtype=ENTRY, mode="r",
                            shape=(manifest.count,))
    except (OSError, ValueError):
        return None
    return vectors, entries


def entries_checksum(entries: npt.NDArray[Any], crc: int = 0) -> int:
    """crc32 of ``entries`` with their ``live`` byte zeroed, continuing ``crc`` (the checksum of
    the entries before them): marking an entry dead leaves it as it was. Copied as plain bytes
    into one reused buffer (a structured copy costs five times as much: 313k entries 3.5 ms
    against 19 ms, measured)."""
    raw = np.asarray(entries).view(np.uint8).reshape(-1, ENTRY.itemsize)
    buf = np.empty((min(CHECK_CHUNK, len(raw)), ENTRY.itemsize), np.uint8)
    for start in range(0, len(raw), CHECK_CHUNK):
        part = buf[:min(CHECK_CHUNK, len(raw) - start)]
        np.copyto(part, raw[start:start + len(part)])
        part[:, LIVE_OFFSET] = 0
        crc = zlib.crc32(part.data, crc)
    return crc


def damage(directory: Path, manifest: Manifest, entries: npt.NDArray[Any] | None = None,
           start: int = 0, crc: int = 0) -> tuple[str | None, int]:
    """Why the copy's files disagree with ``manifest`` (None: they agree), and the checksum of its
    entries. ``entries`` (mapped already) from ``start`` on are checked, continuing ``crc``, the
    checksum of the ones before (a reader that checked them earlier); else the files are mapped and
    checked whole."""
    if manifest.count == 0:
        return None, 0
    for name, per in ((vectors_file(manifest.layout), manifest.dim), (entries_file(manifest.layout), ENTRY.itemsize)):
        try:
            size = (directory / name).stat().st_size
        except OSError:
            return f"{name} is missing", 0
        if size < manifest.count * per:  # longer is a crashed append: the bytes past `count` are unused
            return f"{name} holds {size} bytes, the manifest counts {manifest.count * per}", 0
    if entries is None:
        arrays = open_arrays(directory, manifest)
        if arrays is None:
            return f"{entries_file(manifest.layout)} cannot be mapped", 0
        entries, start, crc = arrays[1], 0, 0
    name = entries_file(manifest.layout)
    e = np.asarray(entries[start:manifest.count])
    if len(e):
        # The codes first: an entry naming a code its table lacks made every reader raise. Code 0
        # of an empty table is let pass: an entry that is not a document (written dead) has zeros.
        tables = (("kind", len(KINDS)), ("live", 2), ("field", len(manifest.fields)), ("type", len(manifest.types)),
                  ("project", len(manifest.projects)), ("merged", len(manifest.projects)))
        if any(int(e[f].min()) < 0 or int(e[f].max()) >= max(n, 1) for f, n in tables):
            return f"{name} holds entries with codes its manifest lacks", 0
        crc = entries_checksum(e, crc)
    if manifest.crc is not None and crc != manifest.crc:
        return f"{name} does not match its checksum", 0
    return None, crc


def block_count(count: int) -> int:
    """How many checksum blocks ``count`` vectors take (the last one may be partial)."""
    return -(-count // BLOCK)


def vector_checksums(blocks: list[int], start: int, vectors: npt.NDArray[np.int8]) -> list[int]:
    """``blocks`` (the checksums of the first ``start`` vectors) continued over ``vectors``, the
    ones appended at ``start``: the last partial block's crc32 runs on, full ones start anew."""
    out = list(blocks)
    raw = np.ascontiguousarray(vectors).reshape(len(vectors), -1)
    done = 0
    while done < len(raw):
        pos = start + done
        take = min(len(raw) - done, BLOCK - pos % BLOCK)
        part = raw[done:done + take].data
        if pos % BLOCK:
            out[pos // BLOCK] = zlib.crc32(part, out[pos // BLOCK])
        else:
            out.append(zlib.crc32(part))
        done += take
    return out


def vectors_damage(directory: Path, manifest: Manifest, first: int = 0, stop: int | None = None) -> str | None:
    """Why blocks ``first`` to ``stop`` (None: the last) of the copy's vectors disagree with their
    checksums (None: they agree, or the manifest predates them). The file is read block by block
    into one buffer through one descriptor, so memory stays at a block whatever the copy's size.
    A rewrite or discard that replaced the files meanwhile (another process's check: the worker
    checks under its lock) shows as a manifest that changed other than by appending: the blocks are
    checked once again against the new one, so a replaced copy is never reported as damage."""
    reason = _blocks_damage(directory, manifest, first, stop)
    if reason is None:
        return None
    now = Manifest.read(directory)
    if now is not None and _replaced(manifest, now):
        return _blocks_damage(directory, now, first, stop)
    return reason


def _replaced(old: Manifest, new: Manifest) -> bool:
    """Whether ``new`` describes other files than ``old`` (not just more vectors appended)."""
    if (new.layout, new.model, new.dim) != (old.layout, old.model, old.dim) or new.count < old.count:
        return True
    full = block_count(old.count) - 1  # the last block of `old` may have grown since
    return (new.blocks or [])[:full] != (old.blocks or [])[:full]


def read_checksums(directory: Path, manifest: Manifest) -> list[int]:
    """The block checksums of the copy's vectors as they are on disk (a version 3 manifest's, to
    record: the vectors are taken as they are, as a version 2 manifest's entries were). Raises
    OSError when the file is missing or shorter than the manifest counts."""
    if manifest.count == 0:
        return []
    with open(directory / vectors_file(manifest.layout), "rb", buffering=0) as fh:
        return [zlib.crc32(block) for _, block in _blocks(fh, manifest, 0, block_count(manifest.count))]


def _blocks(fh: io.RawIOBase, manifest: Manifest, first: int, stop: int) -> Iterator[tuple[int, memoryview]]:
    """Blocks ``first`` to ``stop`` of the vectors file, each read into the same buffer (one block
    of memory whatever the copy's size); OSError at a file shorter than the manifest counts."""
    row = manifest.dim
    buf = memoryview(bytearray(BLOCK * row))
    for b in range(first, stop):
        want = (min(manifest.count, (b + 1) * BLOCK) - b * BLOCK) * row
        got = 0
        fh.seek(b * BLOCK * row)
        while got < want and (n := fh.readinto(buf[got:want])):
            got += n
        if got < want:
            raise OSError(f"{vectors_file(manifest.layout)} holds {b * BLOCK * row + got} bytes, "
                          f"the manifest counts {manifest.count * row}")
        yield b, buf[:want]


def _blocks_damage(directory: Path, manifest: Manifest, first: int, stop: int | None) -> str | None:
    if manifest.blocks is None or manifest.count == 0:
        return None
    name = vectors_file(manifest.layout)
    total = block_count(manifest.count)
    if len(manifest.blocks) != total:
        return f"{name}: the manifest has {len(manifest.blocks)} block checksums for {total} blocks"
    try:
        with open(directory / name, "rb", buffering=0) as fh:
            for b, block in _blocks(fh, manifest, first, min(total if stop is None else stop, total)):
                if zlib.crc32(block) != manifest.blocks[b]:
                    last = min(manifest.count, (b + 1) * BLOCK) - 1
                    return f"{name} does not match its checksum (block {b}: vectors {b * BLOCK}-{last})"
    except FileNotFoundError:
        return f"{name} is missing"
    except OSError as exc:
        return str(exc)[:200]
    return None
