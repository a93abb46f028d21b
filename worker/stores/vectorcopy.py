"""Writes memsync's local copy of the vectors (layout and reasons: ``config.formats.vector_copy``).

The sync writes a document here right after Chroma acknowledged it and before its sync record
(``worker.pipeline.sync``, through ``worker.pipeline.sink.MirroredSink``), so the copy holds at least what the
records say Chroma holds: a crash in between replays the batch, and writing a document again only
supersedes its entry. Writers take
an exclusive lock on the directory for each step (a resync may run beside the worker).

A copy that does not yet hold a generation's documents (made by an older memsync, or deleted) is
filled from Chroma itself (:func:`fill_from_store`) and only then marked complete. So is a damaged
one (truncated, or entries that do not match the manifest's codes or checksum,
``config.formats.vector_copy`` :func:`damage`; vectors that do not match their block checksums,
:func:`vectors_damage`): the writer checks the files when it opens them and when the worker asks
(:meth:`VectorCopyWriter.check`, :meth:`VectorCopyWriter.check_vectors`), and discards a damaged
copy (``vector_copy_damaged``) so that the fill rebuilds it. A rewrite checks the vectors before it
copies them, so that it never gives damaged vectors fresh checksums.

Appending leaves dead entries behind and puts edited old rows after new ones; :meth:`reorder`
rewrites the copy without its dead entries, sorted by date (layout: ``config.formats.vector_copy``),
when :meth:`needs_reorder` says enough of it is dead or out of order: at the end of a resync and in
the worker's idle step. So the copy of a corpus that deletes as much as it adds stays the same size,
and a window reads one slice of it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS
from memsync.config.docids import DocIdError, format_doc_id, parse_doc_id
from memsync.config.formats.vector_copy import (
    ENTRY,
    KIND_BYTE,
    LIVE_OFFSET,
    LOCK_FILE,
    MANIFEST_FILE,
    Manifest,
    block_count,
    copy_dir,
    damage,
    entries_checksum,
    entries_file,
    open_arrays,
    quantize,
    read_checksums,
    vector_checksums,
    vectors_damage,
    vectors_file,
)
from memsync.config.settings import Settings
from memsync.worker.process import logs
from memsync.worker.process.memory import release_responses
from memsync.worker.rows.state import SyncState
from memsync.worker.stores.copykeys import ROW_MAX, ROW_MIN, KeyIndex, pack, pack_arrays, unpack

CODE_TABLES = ("fields", "projects", "types")
PAGE = 500
# A rewrite is due when this share of the entries is dead (disk and scan time spent on nothing) or
# was appended after the ordered part (a window reads that tail whole), and at least REORDER_MIN
# entries would go or move: small copies are cheap to scan either way.
REORDER_DEAD = 0.2
REORDER_TAIL = 0.2
REORDER_MIN = 2000
REWRITE_CHUNK = 65536  # entries gathered per write of a rewrite: bounded memory at any size


@dataclass(frozen=True, slots=True)
class ReorderResult:
    """What a rewrite did: live entries kept, dead ones dropped, bytes before and after."""

    kept: int
    dropped: int
    bytes_before: int
    bytes_after: int


class VectorCopyWriter:
    """Appends, supersedes and deletes documents of one generation's copy."""

    def __init__(self, settings: Settings, collection: str, model: str, dim: int, *, fresh: bool) -> None:
        """``fresh``: the generation has no acknowledged documents yet, so an empty copy is complete."""
        self.dir = copy_dir(settings, collection)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.collection, self.model, self.dim = collection, model, dim
        self._lock_fh: IO[str] = open(self.dir / LOCK_FILE, "a+")  # noqa: SIM115 - held for the writer's life
        self._keys = KeyIndex()  # packed (kind, row, field) → entry position of each live document
        self._loaded = 0
        self._codes: dict[str, dict[str, int]] = {}  # value → code per manifest table, for O(1) lookups
        self.absent: set[str] = set()  # acknowledged ids a fill found missing in Chroma
        with self._locked():
            manifest = Manifest.read(self.dir)
            reason = None
            if manifest is not None and manifest.model == model and manifest.dim == dim:
                reason, crc = damage(self.dir, manifest)
                reason = reason or vectors_damage(self.dir, manifest)
                if reason is None and (manifest.crc is None or manifest.blocks is None):
                    # A manifest of an older memsync: sizes and codes checked, checksums recorded.
                    manifest.crc = crc
                    manifest.blocks = manifest.blocks if manifest.blocks is not None else \
                        read_checksums(self.dir, manifest)
                    manifest.write(self.dir)
            if manifest is None or manifest.model != model or manifest.dim != dim or reason is not None:
                if reason is not None:
                    logs.get_logger().warning(logs.VECTOR_COPY_DAMAGED, collection=collection, reason=reason)
                manifest = Manifest(model, dim, complete=fresh, crc=0, blocks=[])
                self._remove_files(keep=None)
                manifest.write(self.dir)
            self.manifest = manifest
            self._remove_files(keep=manifest.layout)  # a rewrite that crashed before or after its switch
            self._refresh()

    def close(self) -> None:
        """Release the lock file."""
        self._lock_fh.close()

    @property
    def complete(self) -> bool:
        """Whether the copy holds every acknowledged document of the generation."""
        return self.manifest.complete

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.flock(self._lock_fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fh, fcntl.LOCK_UN)

    def _remove_files(self, keep: int | None) -> None:
        """Delete the data files of every layout but ``keep`` (None: all of them)."""
        for path in self.dir.iterdir():
            if path.name in (LOCK_FILE, MANIFEST_FILE) or path.name.endswith(".tmp") and path.name.startswith(
                    MANIFEST_FILE):
                continue
            if keep is None or path.name not in (vectors_file(keep), entries_file(keep)):
                path.unlink(missing_ok=True)

    def _refresh(self) -> None:
        """Catch up with entries another writer appended (or with its rewrite: then every position
        changed); mark older duplicates dead (left by a crash between an append and its dead marks)."""
        manifest = Manifest.read(self.dir) or self.manifest
        if manifest.layout != self.manifest.layout:
            self._keys.clear()
            self._loaded = 0
        self.manifest = manifest
        self._codes = {name: {v: i for i, v in enumerate(getattr(manifest, name))} for name in CODE_TABLES}
        if manifest.count <= self._loaded:
            return
        arrays = open_arrays(self.dir, manifest)
        if arrays is None:
            raise OSError(f"vector copy {self.dir} is shorter than its manifest")
        dead = self._index(np.asarray(arrays[1][self._loaded:manifest.count]), self._loaded)
        self._loaded = manifest.count
        self._mark_dead(dead)

    def _index(self, entries: npt.NDArray[Any], start: int) -> list[int]:
        """Add the live ones of ``entries`` (at positions from ``start``) to the key index; returns
        the positions they supersede. Many at once (a start-up or a rewrite) in one sort."""
        live = np.flatnonzero(entries["live"])
        picked = entries[live]
        rows = picked["row"]
        fits = (rows >= ROW_MIN) & (rows <= ROW_MAX)
        dead: list[int] = []
        if len(live) >= 64:
            dead = self._keys.set_many(pack_arrays(picked["kind"][fits], rows[fits], picked["field"][fits]),
                                       live[fits].astype(np.int64) + start)
            live, picked = live[~fits], picked[~fits]
        for offset, kind, row, field_code in zip(live.tolist(), picked["kind"].tolist(), picked["row"].tolist(),
                                                 picked["field"].tolist(), strict=True):
            old = self._keys.set(pack(kind, row, field_code), start + offset)
            if old is not None:
                dead.append(old)
        return dead

    def _code(self, table: str, value: str) -> int:
        """The code of a field, project or type value, added to the manifest's table when new."""
        codes = self._codes[table]
        if value not in codes:
            values: list[str] = getattr(self.manifest, table)
            values.append(value)
            codes[value] = len(values) - 1
        return codes[value]

    def _key(self, doc_id: str, add: bool = False) -> int | None:
        """A document's key; None for a non-id, and (unless ``add``) for a field no entry has, so
        that lookups never grow the code tables."""
        try:
            d = parse_doc_id(doc_id)
        except DocIdError:
            return None
        field_name = d.field or ""
        if not add and field_name not in self._codes["fields"]:
            return None
        return pack(KIND_BYTE[d.kind], d.sqlite_id, self._code("fields", field_name))

    def put(self, doc_ids: Sequence[str], vectors: npt.NDArray[np.float32],
            metadatas: Sequence[Mapping[str, Any]]) -> None:
        """Write documents (new or again) with their vectors and Chroma metadata."""
        q, scale = quantize(np.asarray(vectors, dtype=np.float32).reshape(len(doc_ids), self.dim))
        with self._locked():
            self._refresh()
            self._append(doc_ids, q, scale, metadatas)

    def relabel(self, doc_ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]]) -> None:
        """New metadata for documents whose text (so vector) is unchanged; a document the copy
        lacks makes it incomplete (it is filled from Chroma again)."""
        with self._locked():
            self._refresh()
            arrays = open_arrays(self.dir, self.manifest)
            assert arrays is not None
            vecs, entries = arrays
            keep: list[int] = []
            positions: list[int] = []
            for i, doc_id in enumerate(doc_ids):
                key = self._key(doc_id)
                pos = self._keys.get(key) if key is not None else None
                if pos is None:
                    if self.manifest.complete:
                        self.manifest.complete = False
                        self.manifest.write(self.dir)
                    continue
                keep.append(i)
                positions.append(pos)
            if keep:
                self._append([doc_ids[i] for i in keep], np.array(vecs[positions]),
                             np.array(entries["scale"][positions]), [metadatas[i] for i in keep])

    def delete(self, doc_ids: Sequence[str]) -> None:
        """Mark documents dead (absent ones are ignored)."""
        with self._locked():
            self._refresh()
            dead = []
            for doc_id in doc_ids:
                key = self._key(doc_id)
                pos = self._keys.pop(key) if key is not None else None
                if pos is not None:
                    dead.append(pos)
            self._mark_dead(dead)

    def check(self) -> str | None:
        """Why the files on disk disagree with the manifest (None: they agree); a whole read of the
        entries (``config.formats.vector_copy`` :func:`damage`), asked by the worker now and then."""
        with self._locked():
            try:
                self._refresh()
            except OSError as exc:
                return str(exc)[:200]
            return damage(self.dir, self.manifest)[0]

    def check_vectors(self, first: int, blocks: int | None) -> tuple[str | None, int]:
        """Check ``blocks`` (None: all) of the vectors' checksum blocks from ``first`` on
        (``config.formats.vector_copy`` :func:`vectors_damage`): why they disagree (None: they
        agree), and the block to go on from (0: the check reached the last block). The worker
        checks the whole file a slice at a time, so that no step holds the lock long."""
        with self._locked():
            try:
                self._refresh()
            except OSError as exc:
                return str(exc)[:200], 0
            total = block_count(self.manifest.count)
            first = first if first < total else 0
            stop = total if blocks is None else min(total, first + blocks)
            reason = vectors_damage(self.dir, self.manifest, first, stop)
            return reason, 0 if reason is not None or stop >= total else stop

    def discard(self, reason: str) -> None:
        """Drop a damaged copy's files and start an empty, incomplete one: the worker's fill
        (:func:`fill_from_store`) rebuilds it from Chroma, and searches use Chroma meanwhile."""
        logs.get_logger().warning(logs.VECTOR_COPY_DAMAGED, collection=self.collection, reason=reason)
        with self._locked():
            self._reset()

    def _reset(self) -> None:
        """Drop the files and start an empty, incomplete copy (the caller holds the lock)."""
        self._remove_files(keep=None)
        self.manifest = Manifest(self.model, self.dim, complete=False, crc=0, blocks=[])
        self.manifest.write(self.dir)
        self._keys.clear()
        self._loaded = 0
        self._codes = {name: {} for name in CODE_TABLES}
        self.absent = set()

    def invalidate(self) -> None:
        """Declare the copy incomplete (a write failed); never raises."""
        with contextlib.suppress(OSError):
            self.manifest.complete = False
            self.manifest.write(self.dir)

    def mark_complete(self) -> None:
        """Declare that the copy holds every acknowledged document (after a fill)."""
        with self._locked():
            self._refresh()
            self.manifest.complete = True
            self.manifest.write(self.dir)

    def doc_ids(self) -> list[str]:
        """The ids of every live document in the copy."""
        return [d for chunk in self.doc_id_chunks(1 << 62) for d in chunk]

    def doc_id_chunks(self, size: int) -> Iterator[list[str]]:
        """The ids of every live document in the copy as of this call, ``size`` at a time (a check
        of a large copy never holds every id as a string)."""
        with self._locked():
            self._refresh()
            fields = list(self.manifest.fields)
            keys = self._keys.snapshot()
        for start in range(0, len(keys), size):
            chunk = keys[start:start + size]
            yield [format_doc_id(KINDS[k], row, fields[f] or None)
                   for k, row, f in map(unpack, chunk.tolist() if isinstance(chunk, np.ndarray) else chunk)]

    def missing(self, acknowledged: Sequence[str]) -> list[str]:
        """Which of these document ids the copy does not hold."""
        with self._locked():
            self._refresh()
            return [d for d in acknowledged if (k := self._key(d)) is None or k not in self._keys]

    def needs_reorder(self) -> bool:
        """Whether enough of the copy is dead or out of date order for a rewrite (thresholds above)."""
        with self._locked():
            self._refresh()
            count = self.manifest.count
            dead = count - len(self._keys)
            tail = count - self.manifest.ordered
            return (dead >= REORDER_MIN and dead >= REORDER_DEAD * count) or \
                (tail >= REORDER_MIN and tail >= REORDER_TAIL * count)

    def reorder(self) -> ReorderResult | None:
        """Rewrite the copy without its dead entries, sorted by date, into the files of a new layout,
        then switch the manifest and delete the old files (readers that mapped them keep them).
        A crash before the switch leaves the old copy as it was (the half-written files are
        deleted by the next writer); after it, the new one. A damaged copy is discarded instead
        (None), as :meth:`discard` does: rewritten, its damage would get checksums of its own."""
        with self._locked():
            self._refresh()
            old = self.manifest
            reason = damage(self.dir, old)[0] or vectors_damage(self.dir, old)
            if reason is not None:
                logs.get_logger().warning(logs.VECTOR_COPY_DAMAGED, collection=self.collection, reason=reason)
                self._reset()
                return None
            arrays = open_arrays(self.dir, old)
            if arrays is None:
                raise OSError(f"vector copy {self.dir} is shorter than its manifest")
            vecs, entries = arrays
            live = np.flatnonzero(np.asarray(entries["live"]) == 1)
            order = live[np.argsort(np.asarray(entries["epoch"])[live], kind="stable")]
            layout = old.layout + 1
            new = Manifest(old.model, old.dim, len(order), old.complete, old.fields, old.projects, old.types,
                           layout=layout, ordered=len(order), crc=0, blocks=[])
            try:
                for name, source in ((vectors_file(layout), vecs), (entries_file(layout), entries)):
                    # A new file, never one truncated in place: a reader may still map an old file
                    # of this name (unlinked, it keeps its pages); "x" fails rather than truncate.
                    (self.dir / name).unlink(missing_ok=True)
                    with open(self.dir / name, "xb") as fh:
                        for start in range(0, len(order), REWRITE_CHUNK):
                            chunk = np.ascontiguousarray(source[order[start:start + REWRITE_CHUNK]])
                            fh.write(chunk.tobytes())
                            if source is entries:
                                new.crc = entries_checksum(chunk, new.crc or 0)
                            else:
                                new.blocks = vector_checksums(new.blocks or [], start, chunk)
                        fh.flush()
                        os.fsync(fh.fileno())
                new.write(self.dir)
            except BaseException:
                self._remove_files(keep=old.layout)  # the old copy stays as it was
                raise
            self.manifest, self._loaded = new, len(order)
            self._keys.clear()
            for start in range(0, len(order), REWRITE_CHUNK):
                self._index(np.asarray(entries[order[start:start + REWRITE_CHUNK]]), start)
            self._remove_files(keep=layout)
            per_entry = old.dim + ENTRY.itemsize
            result = ReorderResult(len(order), old.count - len(order), old.count * per_entry, len(order) * per_entry)
        logs.get_logger().info(logs.VECTOR_COPY_REORDERED, collection=self.collection, kept=result.kept,
                               dropped=result.dropped)
        return result

    def _append(self, doc_ids: Sequence[str], q: npt.NDArray[np.int8], scale: npt.NDArray[np.float32],
                metadatas: Sequence[Mapping[str, Any]]) -> None:
        m = self.manifest
        rows = np.zeros(len(doc_ids), ENTRY)
        keys: list[int | None] = []
        for i, (doc_id, meta) in enumerate(zip(doc_ids, metadatas, strict=True)):
            key = self._key(doc_id, add=True)
            keys.append(key)
            if key is None:
                continue
            kind, row, field_code = unpack(key)
            rows[i] = (row, int(meta.get("created_at_epoch") or 0), scale[i],
                       self._code("projects", str(meta.get("project") or "")),
                       self._code("projects", str(meta.get("merged_into_project") or "")),
                       field_code, self._code("types", str(meta.get("type") or "")), kind, 1)
        start = m.count
        # Bytes past `count` are a crashed append: overwritten here.
        for name, data in ((vectors_file(m.layout), q), (entries_file(m.layout), rows)):
            fd = os.open(self.dir / name, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                offset = start * (data.nbytes // max(1, len(data)))
                if os.fstat(fd).st_size < offset:
                    # Cut short under this writer (its check has not run yet): a write at `offset`
                    # would leave a hole, and a hole read through a mapping on a full tmpfs is a
                    # SIGBUS in the reader. Failing here invalidates the copy; the check discards it.
                    raise OSError(errno.EIO, f"vector copy {self.dir / name} is shorter than its manifest")
                _pwrite_all(fd, np.ascontiguousarray(data).tobytes(), offset)
                os.fsync(fd)
            finally:
                os.close(fd)
        m.count = start + len(doc_ids)
        if m.crc is not None:  # None: a manifest an older memsync wrote meanwhile (no checksum kept)
            m.crc = entries_checksum(rows, m.crc)
        if m.blocks is not None:  # likewise
            m.blocks = vector_checksums(m.blocks, start, q)
        m.write(self.dir)
        self._loaded = m.count
        dead: list[int] = []
        for i, key in enumerate(keys):
            if key is None:
                dead.append(start + i)  # not a document id: never live
                continue
            old = self._keys.set(key, start + i)
            if old is not None:
                dead.append(old)
        self._mark_dead(dead)

    def _mark_dead(self, positions: Sequence[int]) -> None:
        if not positions:
            return
        with open(self.dir / entries_file(self.manifest.layout), "r+b") as fh:
            if os.fstat(fh.fileno()).st_size < (max(positions) + 1) * ENTRY.itemsize:
                # A mark past the end would leave a hole (see _append): cut short under this writer.
                raise OSError(errno.EIO, f"vector copy {fh.name} is shorter than its manifest")
            for pos in sorted(positions):
                fh.seek(pos * ENTRY.itemsize + LIVE_OFFSET)
                fh.write(b"\x00")


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``. ``os.pwrite`` may write part of it and return the count
    without an error (a file system that fills up mid-write, as tmpfs does); the rest is written
    again, so a full disk raises ENOSPC here instead of leaving an append shorter than the manifest
    counts: the next append would then leave a hole of zeros, read back as vectors, and a read of a
    hole through the mapping on a full tmpfs is a SIGBUS in the reading process."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view, offset = view[written:], offset + written


def open_writer(settings: Settings, state: SyncState, collection: str, model: str, dim: int) -> VectorCopyWriter | None:
    """The writer of a generation's copy; None when the setting is off or the directory cannot be
    written (logged; the sync goes on without a copy and searches use Chroma)."""
    if not settings.vector_copy:
        # A copy nobody keeps up to date would mislead searches that still use it: remove it.
        drop_copy(settings, collection)
        return None
    try:
        return VectorCopyWriter(settings, collection, model, dim, fresh=state.live_docs(collection) == 0)
    except (OSError, ValueError) as exc:
        logs.get_logger().warning(logs.VECTOR_COPY_FAILED, op="open", error=str(exc)[:200])
        return None


def fill_from_store(writer: VectorCopyWriter, collection: Any, acknowledged: Sequence[str],
                    budget: int | None = None) -> bool:
    """Copy documents the copy lacks from Chroma, at most ``budget`` per call (so that a worker
    keeps syncing new rows meanwhile); marks the copy complete and returns True when nothing is
    missing any more. Documents Chroma does not have (``verify`` reports them) are not waited for."""
    missing = [d for d in writer.missing(acknowledged) if d not in writer.absent]
    now = missing if budget is None else missing[:budget]
    for start in range(0, len(now), PAGE):
        page = now[start:start + PAGE]
        got = stores.store_call("get", collection.get, ids=page, include=["embeddings", "metadatas"])
        release_responses()
        if got["ids"]:
            writer.put(got["ids"], np.asarray(got["embeddings"], dtype=np.float32), got["metadatas"])
        writer.absent.update(set(page) - set(got["ids"]))
    if len(now) < len(missing):
        return False
    writer.mark_complete()
    logs.get_logger().info(logs.VECTOR_COPY_FILLED, collection=writer.collection, documents=len(missing))
    return True


def drop_copy(settings: Settings, collection: str) -> None:
    """Remove the copy of a generation that was replaced (readers keep their mappings)."""
    shutil.rmtree(copy_dir(settings, collection), ignore_errors=True)
