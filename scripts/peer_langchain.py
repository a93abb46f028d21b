"""bench_sync's peer: the same sync built the way a user would without memsync (a baseline).

The peer is LangChain's indexing API: ``index(docs, SQLRecordManager, Chroma, cleanup="incremental",
source_id_key="row")`` from ``langchain-classic`` / ``langchain-core``, into ``langchain-chroma``.
It indexes the very documents memsync derives (``worker.rows.documents.build_documents`` on the same
rows: same text, same metadata, plus the row's key as LangChain's source id so that incremental
cleanup works per row) with the very embedder memsync uses (the bundled MiniLM through
``get_embedder``, wrapped as a LangChain ``Embeddings``), into the same Chroma (1.5.9, the same
mode: a managed ``chroma run`` server of its own, or a directory of its own when embedded).

Two sides of a process boundary:

- bench side (memsync's ``.venv``, no LangChain): :func:`ensure_env` makes ``.bench/peer-venv``
  once, :func:`side_by_side` runs the peer's passes there beside memsync's and edits the bench's
  database between them, :func:`table` prints both.
- peer side (``python -m scripts.peer_langchain SPEC`` in that venv): one ``index()`` pass,
  timed from the first row read to ``index()`` returning, reported as one JSON line on stdout.

Why a venv of its own (the product does not depend on LangChain): its ~40 packages would otherwise
move versions memsync's own environment resolved (pydantic, numpy, ...). langchain-chroma 1.1.0
accepts ``chromadb>=1.3.5,<2``, so ``pip install -e <repo>`` in that venv brings memsync's own
pin, chromadb 1.5.9, and memsync's embedder and derivation code from this checkout: nothing is
copied, and an edit to the derivation reaches both sides.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memsync.chroma import collections as stores
from memsync.chroma.server import ManagedServer
from memsync.config.claude_mem.schema import KINDS
from memsync.config.settings import Settings
from memsync.worker.pipeline.resync import resync
from memsync.worker.pipeline.sync import SyncResult
from memsync.worker.rows.documents import Document, RowError, build_documents
from memsync.worker.rows.source import SourceReader

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = ROOT / ".bench" / "peer-venv"
# Pinned so that a rerun measures the same peer; langchain-core 1.7.2 is what pip resolves beside
# the other two. chromadb comes from memsync's own pin (pip install -e .). SQLRecordManager imports
# sqlalchemy.ext.asyncio, which SQLAlchemy 2.1 refuses without greenlet: hence the extra.
REQUIREMENTS = ("langchain-core==1.7.2", "langchain-classic==1.0.8", "langchain-chroma==1.1.0",
                "SQLAlchemy[asyncio]==2.1.9")
VERSION_OF = ("langchain-core", "langchain-classic", "langchain-chroma", "chromadb", "SQLAlchemy")
SOURCE_KEY = "row"  # the metadata key index() groups a row's documents by (its source_id_key)
# index()'s default is sha1, with a warning that recommends another; sha256 is the first it names.
KEY_ENCODER = "sha256"
INDEX_BATCH_SIZE = 100  # index()'s own default
# The peer is "incremental" (per source: deletes what a row no longer yields). "full" deletes
# whatever this run did not yield, so also vanished rows; "scoped_full" cleans up after the loop.
CLEANUPS = ("incremental", "full", "scoped_full")
WARMUP_TEXTS = [" ".join(["warm-up text"] * n) for n in range(1, 65)]


class PeerUnavailable(RuntimeError):
    """The peer's environment could not be made or a pass failed; the message says what to do."""


# --- shared by both sides: the documents -------------------------------------------------------


def row_key(doc: Document) -> str:
    """The row a document belongs to, as LangChain's source id: ``observation:12``."""
    return f"{doc.kind.value}:{doc.source_id}"


def peer_fields(doc: Document) -> tuple[str, str, dict[str, str | int]]:
    """(id, text, metadata) of the LangChain document for a memsync document: memsync's metadata as
    derived (absent keys left out: Chroma rejects None on add) plus the row key."""
    return doc.doc_id, doc.text, {**doc.metadata, SOURCE_KEY: row_key(doc)}


def derived_documents(db: Path, read_batch_rows: int) -> Iterator[Document]:
    """Every document memsync derives from ``db``, in memsync's read order (kind, then row id); rows
    memsync records as failed (RowError) have none. A lazy loader: rows are read as index() asks."""
    with SourceReader(db) as reader:
        for kind in KINDS:
            for batch in reader.iter_rows(kind, read_batch_rows):
                for row in batch:
                    try:
                        yield from build_documents(row)
                    except RowError:
                        continue


# --- peer side: one index() pass ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PassSpec:
    """What one peer pass needs; JSON on the command line of the peer's process."""

    db: str
    record_db: str
    collection: str
    chroma_path: str | None  # embedded mode: a directory of the peer's own
    chroma_host: str | None  # managed mode: a server of the peer's own
    chroma_port: int | None
    read_batch_rows: int
    index_batch_size: int
    cleanup: str
    embedding_model: str
    embedding_batch_size: int
    embedding_max_tokens: int
    embedding_threads: int


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one ``index()`` pass did, in LangChain's terms, and the store's document count after it."""

    seconds: float
    seen: int  # documents the loader yielded
    added: int
    updated: int
    skipped: int
    deleted: int
    stored: int
    versions: dict[str, str]

    @property
    def embedded(self) -> int:
        """Documents embedded (index() embeds everything it adds or updates)."""
        return self.added + self.updated

    @property
    def written(self) -> int:
        """Documents written to Chroma (added, updated or deleted)."""
        return self.added + self.updated + self.deleted


def run_pass(spec: PassSpec) -> PassResult:
    """One incremental ``index()`` pass over the database (peer side: needs LangChain)."""
    from importlib.metadata import version

    from chromadb.config import Settings as ChromaSettings
    from langchain_chroma import Chroma  # pyright: ignore[reportMissingImports]  (the peer's own extra)
    from langchain_classic.indexes import SQLRecordManager, index  # pyright: ignore[reportMissingImports]  (the peer's own extra)
    from langchain_core.documents import Document as LCDocument  # pyright: ignore[reportMissingImports]  (the peer's own extra)
    from langchain_core.embeddings import Embeddings  # pyright: ignore[reportMissingImports]  (the peer's own extra)

    from memsync.embedding import get_embedder

    embedder = get_embedder(spec.embedding_model, spec.embedding_batch_size, spec.embedding_max_tokens,
                            spec.embedding_threads)

    class MemsyncMiniLM(Embeddings):
        """memsync's bundled model as a LangChain embedding function."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return embedder.embed(texts).tolist()  # type: ignore[no-any-return]

        def embed_query(self, text: str) -> list[float]:
            return embedder.embed([text])[0].tolist()  # type: ignore[no-any-return]

    embedder.embed(WARMUP_TEXTS)  # as bench_sync warms memsync's: onnxruntime's arenas
    where: dict[str, Any] = ({"persist_directory": spec.chroma_path} if spec.chroma_path else
                             {"host": spec.chroma_host, "port": spec.chroma_port})
    store = Chroma(collection_name=spec.collection, embedding_function=MemsyncMiniLM(),
                   client_settings=ChromaSettings(anonymized_telemetry=False),
                   collection_configuration={"hnsw": {"space": "cosine"}}, **where)  # memsync's metric
    records = SQLRecordManager(f"chroma/{spec.collection}", db_url=f"sqlite:///{spec.record_db}")
    records.create_schema()
    seen = 0

    def documents() -> Iterator[Any]:
        nonlocal seen
        for doc in derived_documents(Path(spec.db), spec.read_batch_rows):
            seen += 1
            doc_id, text, metadata = peer_fields(doc)
            yield LCDocument(id=doc_id, page_content=text, metadata=metadata)

    t = time.perf_counter()
    counts = index(documents(), records, store, cleanup=spec.cleanup, source_id_key=SOURCE_KEY,  # type: ignore[arg-type]
                   batch_size=spec.index_batch_size, key_encoder=KEY_ENCODER)
    seconds = time.perf_counter() - t
    return PassResult(seconds, seen, counts["num_added"], counts["num_updated"], counts["num_skipped"],
                      counts["num_deleted"], store._collection.count(), {name: version(name) for name in VERSION_OF})


# --- bench side: the environment, the passes, the edits, the table ------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """bench_sync's options for the peer."""
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the LangChain indexing peer side by side (installs it on first use)")
    parser.add_argument("--peer-edits", type=int, default=10, help="observations the peer comparison edits, "
                        "and as many it deletes, before a third pass")
    parser.add_argument("--peer-cleanup", default="incremental", choices=CLEANUPS,
                        help="the peer's index() cleanup mode")
    parser.add_argument("--peer-batch-size", type=int, default=INDEX_BATCH_SIZE,
                        help="the peer's index() batch_size (LangChain's default)")


def _installed_marker(root: Path) -> str:
    pyproject = hashlib.sha256((root / "pyproject.toml").read_bytes()).hexdigest()[:16]
    return "\n".join([*REQUIREMENTS, f"memsync pyproject {pyproject}", ""])


def ensure_env(venv: Path = DEFAULT_VENV, root: Path = ROOT) -> Path:
    """The peer venv's python: created on first use (``python -m venv`` + ``pip install -e <root>``
    and the pinned LangChain packages from the registry), reused while the pins and memsync's
    ``pyproject.toml`` are unchanged. PeerUnavailable, with pip's last lines, when pip fails
    (no network, an index that lacks a pin): the bench stops before measuring anything."""
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    want = _installed_marker(root)
    if python.exists() and marker.exists() and marker.read_text() == want:
        return python
    print(f"peer: installing LangChain ({', '.join(REQUIREMENTS)}) and memsync into {venv} "
          "(first use; a minute or two)", file=sys.stderr)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--retries", "2",
              "--timeout", "30", "-e", str(root), *REQUIREMENTS]]
    for cmd in steps:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PeerUnavailable(f"could not prepare the LangChain peer in {venv}: {exc}; "
                                  "run with --no-peer to skip it") from exc
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip() and "is ignored" not in line]
            said = [line for line in lines if "ERROR" in line or "rror:" in line][-4:] or lines[-6:]
            raise PeerUnavailable(
                f"could not install the LangChain peer into {venv} (`{' '.join(cmd[1:4])} ...` exited "
                f"{done.returncode}; it needs the package registry):\n  " + "\n  ".join(said)
                + "\nrun with --no-peer to measure memsync alone")
    marker.write_text(want)
    return python


def _run_in_env(python: Path, spec: PassSpec, label: str, timeout_s: float) -> PassResult:
    print(f"peer: {label} (LangChain index(), cleanup={spec.cleanup})", file=sys.stderr)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    env["ANONYMIZED_TELEMETRY"] = "False"
    try:
        done = subprocess.run([str(python), "-m", "scripts.peer_langchain", json.dumps(asdict(spec))], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise PeerUnavailable(f"the peer's {label} took longer than {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n  ".join(done.stderr.strip().splitlines()[-15:])
        raise PeerUnavailable(f"the peer's {label} failed (exit {done.returncode}):\n  {tail}")
    fields = json.loads(done.stdout.strip().splitlines()[-1])
    return PassResult(**fields)


def edit_rows(db: Path, n: int) -> tuple[list[int], list[int]]:
    """Edit the narrative of ``n`` observations and delete ``n`` others, spread over the ids; returns
    (edited, deleted) ids. Only ever on the bench's own generated database."""
    with closing(sqlite3.connect(db)) as con, con:
        ids = [r[0] for r in con.execute("SELECT id FROM observations WHERE narrative != '' ORDER BY id")]
        picked = ids[:: max(1, len(ids) // (2 * n))][: 2 * n] if n else []
        edited, deleted = picked[0::2], picked[1::2]
        con.executemany("UPDATE observations SET narrative = narrative || ' (edited)' WHERE id = ?",
                        [(i,) for i in edited])
        con.executemany("DELETE FROM observations WHERE id = ?", [(i,) for i in deleted])
    return edited, deleted


def _memsync_stored(settings: Settings) -> int:
    with stores.connect(settings) as handle:
        return int(stores.open_active(handle.client, settings).count())


@dataclass(frozen=True, slots=True)
class SideBySide:
    """memsync's three passes and the peer's on the same rows, and what each store holds after."""

    rows: int
    raw_rate: float
    memsync: tuple[SyncResult, SyncResult, SyncResult]
    peer: tuple[PassResult, PassResult, PassResult]
    edited: int
    deleted: int
    expected: int  # documents the edited database implies
    memsync_stored: int
    index_batch_size: int
    cleanup: str
    chroma_mode: str

    def as_json(self) -> dict[str, Any]:
        """The ``peer`` section of bench_sync's JSON."""
        m1, m2, m3 = self.memsync
        p1, p2, p3 = self.peer
        names = ("first_sync", "unchanged_second", "after_edits")
        return {
            "what": "LangChain index() + SQLRecordManager (sqlite) into langchain-chroma",
            "versions": p1.versions, "requirements": list(REQUIREMENTS), "index_batch_size": self.index_batch_size,
            "cleanup": self.cleanup,
            "key_encoder": KEY_ENCODER, "source_id_key": SOURCE_KEY, "chroma_mode": self.chroma_mode,
            "passes": {name: {**{k: v for k, v in asdict(p).items() if k != "versions"}, "embedded": p.embedded,
                              "written": p.written} for name, p in zip(names, self.peer, strict=True)},
            "memsync_after_edits": {"seconds": m3.seconds, "written": m3.written, "embedded": m3.embedded,
                                    "updated": m3.updated, "deleted": m3.deleted},
            "edits": {"observations_edited": self.edited, "observations_deleted": self.deleted,
                      "expected_documents": self.expected, "memsync_stored": self.memsync_stored,
                      "peer_stored": p3.stored},
            "ratios": {
                "first_sync_docs_per_s_peer_over_memsync": (p1.embedded / p1.seconds) / (m1.embedded / m1.seconds),
                "first_sync_docs_per_s_peer_over_raw": (p1.embedded / p1.seconds) / self.raw_rate,
                "unchanged_seconds_peer_over_memsync": p2.seconds / m2.seconds,
                "after_edits_seconds_peer_over_memsync": p3.seconds / m3.seconds,
            },
        }

    def table(self) -> list[dict[str, str]]:
        """The side-by-side table: one row per measure, memsync, the peer, peer / memsync."""
        m1, m2, m3 = self.memsync
        p1, p2, p3 = self.peer
        r1, q1 = m1.embedded / m1.seconds, p1.embedded / p1.seconds
        per = 100_000 / self.rows

        def row(measure: str, mine: str, peer: str, ratio: str = "") -> dict[str, str]:
            return {"measure": measure, "memsync": mine, "LangChain peer": peer, "peer / memsync": ratio}

        return [
            row("first sync", f"{m1.seconds:,.1f} s", f"{p1.seconds:,.1f} s", f"{p1.seconds / m1.seconds:.2f}x time"),
            row("  documents/s", f"{r1:,.1f}", f"{q1:,.1f}", f"{q1 / r1:.3f}"),
            row("  / raw embedding rate", f"{r1 / self.raw_rate:.3f}", f"{q1 / self.raw_rate:.3f}"),
            row("unchanged second run", f"{m2.seconds:.2f} s", f"{p2.seconds:.2f} s",
                f"{p2.seconds / m2.seconds:.1f}x time"),
            row("  written / embedded", f"{m2.written} / {m2.embedded}", f"{p2.written} / {p2.embedded}"),
            row("  per 100k rows", f"{m2.seconds * per:.2f} s", f"{p2.seconds * per:.2f} s"),
            row(f"after {self.edited} edits, {self.deleted} deletes", f"{m3.seconds:.2f} s", f"{p3.seconds:.2f} s",
                f"{p3.seconds / m3.seconds:.1f}x time"),
            row("  written / embedded", f"{m3.written} / {m3.embedded}", f"{p3.written} / {p3.embedded}"),
            row("  documents in Chroma (database implies)", f"{self.memsync_stored:,} ({self.expected:,})",
                f"{p3.stored:,} ({self.expected:,})"),
        ]


def side_by_side(settings: Settings, python: Path, work: Path, rows: int, raw_rate: float,
                 memsync: tuple[SyncResult, SyncResult], *, edits: int = 10,
                 index_batch_size: int = INDEX_BATCH_SIZE, cleanup: str = "incremental") -> SideBySide:
    """The peer's first sync and unchanged second run on ``settings.db`` (memsync already did its
    two), then ``edits`` edited and ``edits`` deleted observations and a third pass of each."""
    peer_settings = Settings(db=settings.db, data_dir=work / "peer", chroma_mode="managed")
    server = ManagedServer(peer_settings) if settings.chroma_mode == "managed" else None
    info = server.ensure() if server is not None else None
    try:
        spec = PassSpec(
            db=str(settings.db), record_db=str(work / "peer" / "record_manager.sqlite"), collection="memsync_peer",
            chroma_path=None if info else str(work / "peer" / "chroma"),
            chroma_host=info.host if info else None, chroma_port=info.port if info else None,
            read_batch_rows=settings.read_batch_rows, index_batch_size=index_batch_size, cleanup=cleanup,
            embedding_model=settings.embedding_model, embedding_batch_size=settings.embedding_batch_size,
            embedding_max_tokens=settings.embedding_max_tokens, embedding_threads=settings.embedding_threads)
        timeout_s = 900 + rows * 0.25  # ~3.6 documents a row at well over 15 documents/s
        p1 = _run_in_env(python, spec, "first sync", timeout_s)
        p2 = _run_in_env(python, spec, "unchanged second run", timeout_s)
        edited, deleted = edit_rows(settings.db, edits)
        m3 = resync(settings)
        p3 = _run_in_env(python, spec, f"run after {len(edited)} edits and {len(deleted)} deletes", timeout_s)
    finally:
        if server is not None:
            server.stop()
    expected = sum(1 for _ in derived_documents(settings.db, settings.read_batch_rows))
    return SideBySide(rows, raw_rate, (*memsync, m3), (p1, p2, p3), len(edited), len(deleted), expected,
                      _memsync_stored(settings), index_batch_size, cleanup, settings.chroma_mode)


def main(argv: list[str] | None = None) -> int:
    """Peer side: run the pass described by the JSON spec argument; one JSON line on stdout."""
    args = sys.argv[1:] if argv is None else argv
    result = run_pass(PassSpec(**json.loads(args[0])))
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
