"""memsync's own copy of the vectors it wrote to Chroma, for exact filtered ranking: the layout,
shared by the worker, which writes it (``worker.vectorcopy``) beside every Chroma write, and the
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
  and the code tables of fields, projects and types (an entry stores indexes into them).

Append-only between rewrites: a document written again gets a new entry and its old one is marked
dead (``live`` = 0, written in place); a deleted document is marked dead. The manifest is replaced
atomically after the appended bytes are on disk, so a reader never sees an entry beyond ``count``.
``complete`` says the copy holds every document Chroma acknowledged for the generation (a
generation started with the copy, or one filled from Chroma); a reader uses nothing else.

A rewrite (``worker.vectorcopy`` ``reorder``) drops the dead entries and sorts the live ones by
date into files of a new ``layout`` number (``vectors.N.i8``, ``entries.N.bin``; layout 0 is the
plain names), then switches the manifest: a reader that mapped the old files keeps them until it
is done, and positions never change under it. ``ordered`` entries from the start are sorted by
``epoch`` (the rewrite's); the ones after them were appended since. A window then reads a slice
found by binary search plus that tail, not every entry: the default 90-day window is the path
almost every search takes, and without the order it cost a mask over the whole copy and a gather
of scattered vectors.
"""

from __future__ import annotations

import json
import os
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
VERSION = 2
READ_VERSIONS = (1, 2)  # version 1: no layout or order (layout 0, nothing ordered)

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
                       int(data.get("layout", 0)), min(int(data.get("ordered", 0)), int(data["count"])))
        except (KeyError, TypeError, ValueError):
            return None

    def write(self, directory: Path) -> None:
        """Replace the manifest atomically (after the data it counts is on disk)."""
        tmp = directory / (MANIFEST_FILE + ".tmp")
        payload = {"version": VERSION, "model": self.model, "dim": self.dim, "count": self.count,
                   "complete": self.complete, "fields": self.fields, "projects": self.projects,
                   "types": self.types, "layout": self.layout, "ordered": self.ordered}
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
