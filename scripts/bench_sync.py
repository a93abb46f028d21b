"""Sync benchmark: full resync rate against the raw embedding rate, measured in the same run.

    .venv/bin/python -m scripts.bench_sync [--rows 10000] [--chroma-mode managed] [--out FILE]

1. Generates a deterministic claude-mem database of ``--rows`` rows (the demo generator: realistic
   field lengths, three projects).
2. (a) raw embedding rate: the same documents the resync will embed, through the same embedder,
   sorted by length over the whole set and cut into chunks of ``batch_size``, with nothing else:
   the ceiling for sync (which sorts within each read batch). Half the chunks (every other one) are
   embedded before the resync and half after, so a load that drifts during the run (a shared
   machine) weighs on both sides alike.
3. (b) full resync into a fresh data directory (read, derive, hash, embed, upsert, record). CPU
   seconds of this process and of the managed Chroma server (Linux) say where the time goes.
4. Resyncs of the unchanged database (median of ``--repeats``): their time per 100,000 rows and
   the documents they wrote (targets: 0 written, at most 1 s per 100,000 rows).
5. The worker's reconcile of the unchanged database (``memsync worker``'s periodic full pass: the
   store check, then the same hash comparison; median of ``--repeats``), and the text index's
   fingerprint check that comes due with it.
6. The embedding store (:func:`embedding_store_step`): how many embeddings identical texts saved
   in (b); (b)'s time against the raw embedding of the distinct texts it embedded; the float16
   error against float32 on those vectors; a rebuild of the unchanged database (``resync
   --rebuild``: target 0 embedded); the store's bytes per vector on disk and the cost of a lookup
   of 256 documents.
7. ``--peer`` (default): the same on the same rows with LangChain's indexing API, what a user would
   otherwise build (``scripts/peer_langchain.py``, in a venv of its own made on first use), then
   a few edited and deleted rows and a third pass of each; a side-by-side table with ratios.
Prints a table and writes JSON (default ``.bench/bench_sync.json``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from memsync.config.claude_mem.schema import KINDS
from memsync.config.formats.embedding_store import roundtrip, store_path
from memsync.config.settings import Settings
from memsync.embedding import Embedder, get_embedder
from memsync.worker.pipeline.resync import resync
from memsync.worker.pipeline.sync import Destination, Syncer, SyncOptions, SyncResult
from memsync.worker.rows.documents import RowError, build_documents
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState
from memsync.worker.seed.demo import generate
from memsync.worker.seed.importer import import_records, init_db
from memsync.worker.stores.embedstore import EmbeddingStore, collect_garbage, store_model
from scripts import peer_langchain
from scripts.benchlib import print_table, report


def make_database(path: Path, rows: int, seed: int) -> None:
    """A claude-mem database with exactly ``rows`` rows from the demo generator."""
    init_db(path)
    # About 8 rows a session; generate generously and cut at exactly `rows`.
    import_records(path, islice(generate(n_sessions=rows // 4 + 10, seed=seed, span_days=365), rows))


def documents_of(settings: Settings) -> list[str]:
    """The texts a resync of this database will embed, in the order it embeds them."""
    texts: list[str] = []
    with SourceReader(settings.db) as reader:
        for kind in KINDS:
            for batch in reader.iter_rows(kind, settings.read_batch_rows):
                for row in batch:
                    try:
                        texts += [d.text for d in build_documents(row)]
                    except RowError:
                        continue
    return texts


def raw_embedding_rate(settings: Settings, texts: list[str]) -> float:
    """Documents per second through the embedder alone: the same texts, sorted by length over the
    whole set (the least padding any chunking can get, so an upper bound for sync), in chunks of
    ``batch_size`` as resync uses."""
    return len(texts) / raw_embedding_seconds(settings, texts)


def raw_embedding_seconds(settings: Settings, texts: list[str], part: int = 0, parts: int = 1) -> float:
    """Seconds to embed every ``parts``-th chunk (from ``part``) of ``texts`` sorted by length, cut
    into chunks of ``batch_size``: the parts of one set of texts can be timed at different moments."""
    texts = sorted(texts, key=len)
    embedder = get_embedder(settings.embedding_model, settings.embedding_batch_size, settings.embedding_max_tokens,
                            settings.embedding_threads)
    embedder.embed(texts[:64])  # warm-up: the first call initialises onnxruntime's arenas
    t = time.perf_counter()
    for start in range(part * settings.batch_size, len(texts), parts * settings.batch_size):
        embedder.embed(texts[start : start + settings.batch_size])
    return time.perf_counter() - t


def server_cpu_seconds(settings: Settings) -> float | None:
    """CPU seconds (user + system) the managed Chroma server used so far; None where unknown."""
    from memsync.chroma.server import ServerInfo

    info = ServerInfo.read(settings.data_dir)
    try:
        fields = Path(f"/proc/{info.pid}/stat").read_text().rsplit(")", 1)[1].split() if info else []
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else None
    except (OSError, ValueError, IndexError):
        return None


def unchanged_pass_cpu(settings: Settings, embedder: Embedder) -> float:
    """CPU seconds of this process for one pass over the unchanged database (a dry run: the same
    comparison, no store). A pass runs on one thread, so on a machine other work shares this is
    closer to what it costs alone than its wall time."""
    with SourceReader(settings.db) as reader, SyncState(settings.state_path) as state:
        collection = state.get_meta(ACTIVE_COLLECTION)
        assert collection is not None
        t = time.process_time()
        r = Syncer(reader, state, Destination(collection, None), embedder,
                   SyncOptions.from_settings(settings)).run(dry_run=True)
        assert r.written == 0, r
        return time.process_time() - t


def worker_reconciles(settings: Settings, repeats: int) -> tuple[list[float], list[float], float]:
    """Seconds and CPU seconds of ``repeats`` reconciles of a running worker (each a step with a
    reconcile due, as the schedule or SIGUSR1 asks), and seconds of one text index fingerprint check."""
    from memsync.worker.loop.daemon import Worker

    worker = Worker(settings)
    worker._start()
    try:
        worker.step()  # start-up: opens everything, checks the store; the first reconcile
        out, cpu = [], []
        for _ in range(repeats):
            worker.request_reconcile()
            t, c = time.perf_counter(), time.process_time()
            worker.step()
            out.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        t = time.perf_counter()
        worker._text.step(force_full=True)
        return out, cpu, time.perf_counter() - t
    finally:
        worker._shutdown()


def embedding_store_step(settings: Settings, texts: list[str], first: SyncResult) -> tuple[list[tuple[str, str]],
                                                                                        dict[str, Any]]:
    """Step 5: what the embedding store saved and costs, after (b) filled it. Returns
    table rows and JSON fields."""
    embedder = get_embedder(settings.embedding_model, settings.embedding_batch_size, settings.embedding_max_tokens,
                            settings.embedding_threads)
    distinct = sorted(set(texts), key=len)
    t = time.perf_counter()  # (a'): the raw embedder on exactly the distinct texts (b) embedded
    vectors = np.concatenate([embedder.embed(distinct[i:i + settings.batch_size])
                              for i in range(0, len(distinct), settings.batch_size)])
    distinct_s = time.perf_counter() - t
    back = roundtrip(vectors)
    cosine = (back * vectors).sum(axis=1) / (np.linalg.norm(back, axis=1) * np.linalg.norm(vectors, axis=1))
    rebuilt = resync(settings, rebuild=True)
    lookups: list[float] = []
    with EmbeddingStore(store_path(settings)) as store, SyncState(settings.state_path) as state:
        stored, disk = store.count(), store.file_bytes()
        model = store_model(store, embedder)
        hashes = sorted({h for m, h in state.text_hashes() if m == embedder.model_id})
        # What one 256-document chunk costs when nothing was cached in memory yet (one SELECT).
        for start in range(0, len(hashes), 256):
            t = time.perf_counter()
            store.get(model or 0, hashes[start:start + 256], embedder.dimension)
            lookups.append((time.perf_counter() - t) * 1000)
        collected = collect_garbage(store, state)  # what the worker's collection costs (nothing to remove)
    overhead = distinct_s / first.seconds
    fields: dict[str, Any] = {
        "first_resync_reused": first.reused, "first_resync_embedded": first.embedded,
        "distinct_texts": len(distinct), "raw_embed_distinct_seconds": distinct_s,
        "first_resync_embedding_share": overhead,
        "float16_min_cosine": float(cosine.min()), "float16_max_abs_error": float(np.abs(back - vectors).max()),
        "rebuild_seconds": rebuilt.seconds, "rebuild_embedded": rebuilt.embedded, "rebuild_reused": rebuilt.reused,
        "rebuild_written": rebuilt.written, "rebuild_store_seconds": rebuilt.store_seconds,
        "store_vectors": stored, "store_bytes": disk, "store_bytes_per_vector": disk / max(stored, 1),
        "store_lookup_256_ms_p50": statistics.median(lookups),
        "store_lookup_256_ms_max": max(lookups), "store_collect_seconds": collected.seconds,
    }
    rows = [
        ("(b) identical texts: embeddings saved", f"{first.reused:,} of {first.added:,} documents "
                                                  f"({first.embedded:,} distinct texts embedded)"),
        ("(a') raw embedding of those distinct texts", f"{distinct_s:,.1f} s = {overhead:.3f} of (b)'s time "
                                                       "(target >= 0.9)"),
        ("float16 store vs float32: min cosine / max abs", f"{cosine.min():.9f} / {np.abs(back - vectors).max():.2e}"),
        ("rebuild of the unchanged database", f"{rebuilt.seconds:,.1f} s, {rebuilt.written:,} written, "
                                              f"{rebuilt.embedded} embedded  (target 0)"),
        ("embedding store on disk", f"{stored:,} vectors, {disk / 1e6:,.1f} MB, "
                                    f"{disk / max(stored, 1):,.0f} B per vector"),
        ("store lookup of 256 documents p50 / max", f"{statistics.median(lookups):.2f} / {max(lookups):.2f} ms "
                                                    f"(embedding them: ~{256 / (len(distinct) / distinct_s):.1f} s)"),
        ("store garbage collection (all referenced)", f"{collected.seconds:.2f} s for {len(hashes):,} texts"),
    ]
    return rows, fields


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000, help="rows in the generated database")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--chroma-mode", default="managed", choices=["managed", "embedded"])
    parser.add_argument("--port", type=int, default=8799, help="port of the managed server")
    parser.add_argument("--repeats", type=int, default=3, help="unchanged resyncs and worker reconciles timed")
    parser.add_argument("--out", type=Path, default=Path(".bench/bench_sync.json"))
    peer_langchain.add_arguments(parser)
    args = parser.parse_args(argv)
    try:  # before measuring anything: a missing network costs seconds, not a whole run
        peer_python = peer_langchain.ensure_env() if args.peer else None
    except peer_langchain.PeerUnavailable as exc:
        print(f"bench_sync: {exc}", file=sys.stderr)
        return 2

    from memsync.chroma import collections as stores
    from memsync.worker.process import logs

    logs.configure(level="warning")
    with tempfile.TemporaryDirectory(prefix="memsync-bench-") as tmp:
        settings = Settings(db=Path(tmp) / "claude-mem.db", data_dir=Path(tmp) / "data", chroma_mode=args.chroma_mode,
                            chroma_port=args.port)
        t = time.perf_counter()
        make_database(settings.db, args.rows, args.seed)
        gen_s = time.perf_counter() - t
        texts = documents_of(settings)
        cpu = time.process_time()
        raw_s = raw_embedding_seconds(settings, texts, 0, 2)
        raw_cpu = time.process_time() - cpu
        with stores.connect(settings):  # the server stays up from the first resync to the last reconcile
            cpu, server_cpu = time.process_time(), server_cpu_seconds(settings)
            first = resync(settings)
            cpu, server_after = time.process_time() - cpu, server_cpu_seconds(settings)
            chroma_cpu = server_after - server_cpu if server_cpu is not None and server_after is not None else None
            again = [resync(settings) for _ in range(args.repeats)]
            pass_cpu = sorted(unchanged_pass_cpu(settings, get_embedder(settings.embedding_model))
                              for _ in range(args.repeats))[args.repeats // 2]
            reconciles, reconcile_cpu, text_check_s = worker_reconciles(settings, args.repeats)
            store_rows, store_fields = embedding_store_step(settings, texts, first)
        t = time.process_time()
        raw_s += raw_embedding_seconds(settings, texts, 1, 2)
        raw_cpu += time.process_time() - t
        raw_rate = len(texts) / raw_s
        second = sorted(again, key=lambda r: r.seconds)[len(again) // 2]
        side, peer_error = None, None
        if peer_python is not None:
            try:
                side = peer_langchain.side_by_side(settings, peer_python, Path(tmp), args.rows, raw_rate,
                                                   (first, second), edits=args.peer_edits,
                                                   index_batch_size=args.peer_batch_size, cleanup=args.peer_cleanup)
            except peer_langchain.PeerUnavailable as exc:
                peer_error = str(exc)
    sync_rate = first.added / first.seconds  # documents written per second (identical texts embedded once)
    per_100k = second.seconds * 100_000 / args.rows
    reconcile_s = sorted(reconciles)[len(reconciles) // 2]
    result: dict[str, Any] = {
        "rows": args.rows, "documents": len(texts), "chroma_mode": args.chroma_mode, "generate_seconds": gen_s,
        "raw_embed_docs_per_s": raw_rate, "resync_docs_per_s": sync_rate, "ratio": sync_rate / raw_rate,
        "resync_seconds": first.seconds, "resync_embed_seconds": first.embed_seconds,
        "resync_upsert_seconds": first.upsert_seconds, "resync_read_seconds": first.read_seconds,
        "raw_embed_cpu_ms_per_doc": 1000 * raw_cpu / len(texts),
        "resync_cpu_ms_per_doc": 1000 * cpu / max(first.embedded, 1),
        "chroma_server_cpu_ms_per_doc": None if chroma_cpu is None else 1000 * chroma_cpu / max(first.embedded, 1),
        "second_resync_seconds": second.seconds, "second_resync_written": max(r.written for r in again),
        "second_resync_embedded": max(r.embedded for r in again), "second_resync_s_per_100k_rows": per_100k,
        "second_resync_seconds_all": [r.seconds for r in again], "second_resync_cpu_seconds": pass_cpu,
        "worker_reconcile_seconds": reconcile_s, "worker_reconcile_seconds_all": reconciles,
        "worker_reconcile_s_per_100k_rows": reconcile_s * 100_000 / args.rows,
        "worker_reconcile_cpu_seconds": sorted(reconcile_cpu)[len(reconcile_cpu) // 2],
        "text_index_check_seconds": text_check_s,
        **store_fields,
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count(),
                    "platform": platform.platform(), "load_average": os.getloadavg()},
    }
    chroma_ms = "?" if chroma_cpu is None else f"{1000 * chroma_cpu / max(first.embedded, 1):.2f}"
    rows = [
        ("rows / documents", f"{args.rows:,} / {len(texts):,}"),
        ("(a) raw embedding rate", f"{raw_rate:,.1f} docs/s"),
        ("(b) full resync rate", f"{sync_rate:,.1f} docs/s ({first.seconds:,.1f} s)"),
        ("(b)/(a)", f"{sync_rate / raw_rate:.3f}  (target >= 0.95)"),
        ("  of which embed / upsert / read", f"{first.embed_seconds:,.1f} / {first.upsert_seconds:,.1f} / "
                                             f"{first.read_seconds:,.2f} s"),
        ("  CPU ms per document: (a) / (b) / Chroma server",
         f"{1000 * raw_cpu / len(texts):.2f} / {1000 * cpu / max(first.embedded, 1):.2f} / {chroma_ms}"),
        (f"unchanged resync (median of {len(again)})",
         f"{second.seconds:.3f} s, {result['second_resync_written']} written, "
         f"{result['second_resync_embedded']} embedded"),
        ("unchanged resync per 100k rows", f"{per_100k:.2f} s  (target <= 1 s, 0 written)"),
        ("  the same pass: CPU seconds per 100k rows", f"{pass_cpu * 100_000 / args.rows:.2f} s"),
        (f"worker reconcile (median of {len(reconciles)})", f"{reconcile_s:.3f} s"),
        ("worker reconcile per 100k rows", f"{result['worker_reconcile_s_per_100k_rows']:.2f} s  (target <= 1 s)"),
        ("  the same: CPU seconds per 100k rows",
         f"{result['worker_reconcile_cpu_seconds'] * 100_000 / args.rows:.2f} s"),
        ("text index fingerprint check", f"{text_check_s:.3f} s"),
        *store_rows,
    ]
    if side is not None or peer_error:
        result["peer"] = side.as_json() if side is not None else {"error": peer_error}
    report(rows, result, args.out)
    if side is not None:
        print_table(side.table())
    if peer_error:
        print(f"bench_sync: {peer_error}", file=sys.stderr)
    return 1 if peer_error else 0


if __name__ == "__main__":
    raise SystemExit(main())
