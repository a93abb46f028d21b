"""Verify: the documents SQLite implies versus what Chroma holds, independent of sync records.

missing: expected ids not in Chroma; orphan: Chroma ids no row implies; stale: present but with a
content hash that differs from the one the row implies now; duplicates: vectors beyond one per id.
The derived files are checked too: the vector copy against its manifest and Chroma, the text
index against memsync's record of it and its files' checksums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS
from memsync.config.docids import format_doc_id
from memsync.config.formats.database_owner import claim
from memsync.config.formats.text_index import damage as text_index_damage
from memsync.config.formats.vector_copy import Manifest, copy_dir, damage, open_arrays, vectors_damage
from memsync.config.settings import Settings
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.rows.documents import RowError, build_documents
from memsync.worker.rows.source import SourceReader

SAMPLE = 20


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Counts (and a few example ids) of every kind of drift."""

    collection: str | None
    expected: int
    in_chroma: int
    missing: int
    orphan: int
    stale: int
    duplicates: int
    unusable_rows: int
    examples: dict[str, list[str]] = field(default_factory=dict)
    copy_drift: int | None = None  # documents the vector copy has wrong; None without a complete copy
    copy_damaged: str | None = None  # why the copy's files disagree with its manifest (the worker rebuilds it)
    text_index_damaged: str | None = None  # why the text index cannot be trusted (the worker rebuilds it)

    @property
    def clean(self) -> bool:
        """True when Chroma holds exactly what SQLite implies (and the vector copy, undamaged, what
        Chroma holds)."""
        return self.missing == 0 and self.orphan == 0 and self.stale == 0 and self.duplicates == 0 and \
            not self.copy_drift and self.copy_damaged is None and self.text_index_damaged is None


def expected_documents(reader: SourceReader, batch: int = 2000) -> tuple[dict[str, str], int]:
    """doc id → content hash for every document the source implies; also the count of unusable rows."""
    expected: dict[str, str] = {}
    unusable = 0
    for kind in KINDS:
        for rows in reader.iter_rows(kind, batch):
            for row in rows:
                try:
                    docs = build_documents(row)
                except RowError:
                    unusable += 1
                    continue
                expected.update((d.doc_id, d.content_hash) for d in docs)
    return expected, unusable


def verify(settings: Settings, client: Any | None = None) -> VerifyReport:
    """Compare the source database with the active Chroma collection (opens Chroma unless given;
    DatabaseMismatch when the data directory belongs to another database)."""
    claim(settings)
    with SourceReader.open(settings) as reader:
        expected, unusable = expected_documents(reader)
    if client is None:
        with stores.connect(settings) as handle:
            name, held, seen, count, labels = _held(handle.client, settings)
    else:
        name, held, seen, count, labels = _held(client, settings)
    damaged = None if name is None else copy_damage(settings, name)
    drift = None if name is None or damaged is not None else copy_drift(settings, name, labels)
    missing = sorted(expected.keys() - held.keys())
    orphan = sorted(held.keys() - expected.keys())
    stale = sorted(k for k in expected.keys() & held.keys() if expected[k] != held[k])
    return VerifyReport(
        collection=name, expected=len(expected), in_chroma=count, missing=len(missing), orphan=len(orphan),
        stale=len(stale), duplicates=max(0, count - len(held)) + (seen - len(held)), unusable_rows=unusable,
        examples={"missing": missing[:SAMPLE], "orphan": orphan[:SAMPLE], "stale": stale[:SAMPLE],
                  "copy_drift": (drift or [])[:SAMPLE]},
        copy_drift=None if drift is None else len(drift), copy_damaged=damaged,
        text_index_damaged=text_index_damage(settings),
    )


Label = tuple[str, str, int, str]  # project, merged_into_project, created_at_epoch, type


def _label(meta: dict[str, Any]) -> Label:
    return (str(meta.get("project") or ""), str(meta.get("merged_into_project") or ""),
            int(meta.get("created_at_epoch") or 0), str(meta.get("type") or ""))


def copy_damage(settings: Settings, collection: str) -> str | None:
    """Why the generation's vector copy disagrees with its manifest (None: it agrees, or there is none)."""
    directory = copy_dir(settings, collection)
    manifest = Manifest.read(directory)
    return None if manifest is None else damage(directory, manifest)[0] or vectors_damage(directory, manifest)


def copy_drift(settings: Settings, collection: str, labels: dict[str, Label]) -> list[str] | None:
    """Documents whose presence or labels in the vector copy differ from Chroma's (ids and
    metadata; the vectors themselves are written from the same array), sorted; None when the
    generation has no complete copy."""
    directory = copy_dir(settings, collection)
    manifest = Manifest.read(directory)
    if manifest is None or not manifest.complete:
        return None
    arrays = open_arrays(directory, manifest)
    if arrays is None:
        return ["(copy shorter than its manifest)"]
    entries = np.asarray(arrays[1])
    live = entries[entries["live"] == 1]
    copied: dict[str, Label] = {}
    drift: set[str] = set()
    for e in live:
        doc_id = format_doc_id(KINDS[int(e["kind"])], int(e["row"]), manifest.fields[int(e["field"])] or None)
        if doc_id in copied:
            drift.add(doc_id)  # two live entries of one document
        copied[doc_id] = (manifest.projects[int(e["project"])], manifest.projects[int(e["merged"])],
                          int(e["epoch"]), manifest.types[int(e["type"])])
    drift |= labels.keys() ^ copied.keys()
    drift |= {d for d in labels.keys() & copied.keys() if labels[d] != copied[d]}
    return sorted(drift)


def _held(client: Any, settings: Settings) -> tuple[str | None, dict[str, str], int, int, dict[str, Label]]:
    """(active collection, doc id → content hash, ids seen while paging, count, doc id → labels) of
    what Chroma holds."""
    name = stores.active_collection_name(client, settings)
    if name is None:
        return None, {}, 0, 0, {}
    sink = ChromaSink(stores.open_active(client, settings))
    held: dict[str, str] = {}
    labels: dict[str, Label] = {}
    seen = 0
    for doc_id, meta in sink.iter_metadata():
        seen += 1
        held[doc_id] = str(meta.get("content_hash", ""))
        labels[doc_id] = _label(meta)
    return name, held, seen, sink.count(), labels
