"""What the upstream-readable store costs, against memsync's own collection in the same run.

    .venv/bin/python -m scripts.bench_upstream [--rows 10000] [--repeats 3] [--out FILE]

On ``scripts.bench_sync``'s deterministic database of ``--rows`` rows, with the bundled model and a
managed Chroma server:

1. (a) the baseline: a full resync of memsync's own collection (as ``bench_sync``'s (b)).
2. (b) the upstream-readable store's first pass right after it (``upstream_store``): the same
   rows in claude-mem's format, texts stored; what it embeds (only the texts memsync's own
   collection does not hold: narratives without their folded titles) and what the embedding store
   gives it.
3. (b') the same first pass with an empty embedding store (the store turned on before memsync's
   own collection was ever synced, or an embedding store lost): every text embedded.
4. Unchanged passes of each (median of ``--repeats``): seconds per 100,000 rows, documents written.
5. Chroma's directory before and after (b): the bytes the second collection adds.

Prints a table and writes JSON (default ``.bench/bench_upstream.json``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

from memsync.chroma import collections as stores
from memsync.config.settings import Settings
from memsync.embedding import upstream_embedder
from memsync.worker.pipeline.resync import resync, upstream_resync
from memsync.worker.pipeline.sync import SyncResult
from memsync.worker.process import logs
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState
from memsync.worker.stores.embedstore import EmbeddingStore
from scripts.bench_sync import make_database
from scripts.benchlib import free_port, report, size_mb


def upstream_pass(settings: Settings, store: bool) -> SyncResult:
    """One pass into the upstream-readable store (``store``: with the embedding store)."""
    with SourceReader.open(settings) as reader, SyncState(settings.state_path) as state, \
            stores.connect(settings) as handle:
        embeddings = EmbeddingStore.open(settings) if store else None
        try:
            return upstream_resync(settings, handle.client, reader, state, embeddings)
        finally:
            if embeddings is not None:
                embeddings.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000, help="rows in the generated database")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=3, help="unchanged passes timed")
    parser.add_argument("--out", type=Path, default=Path(".bench/bench_upstream.json"))
    args = parser.parse_args(argv)
    logs.configure(level="warning")
    with tempfile.TemporaryDirectory(prefix="memsync-bench-") as tmp:
        own = Settings(db=Path(tmp) / "claude-mem.db", data_dir=Path(tmp) / "data", chroma_mode="managed",
                       chroma_port=free_port())
        both = own.model_copy(update={"upstream_store": True})
        make_database(own.db, args.rows, args.seed)
        upstream_embedder(own).embed(["a first text loads the model"] * 8)  # not part of (a)
        with stores.connect(own):  # one server from the first pass to the last
            first = resync(own)
            chroma_before = size_mb(own.chroma_dir)
            up_first = upstream_pass(both, store=True)
            chroma_after = size_mb(own.chroma_dir)
            own_again = [resync(own) for _ in range(args.repeats)]
            up_again = [upstream_pass(both, store=True) for _ in range(args.repeats)]
            # (b'): the same first pass into a fresh collection, without the embedding store.
            up_cold = upstream_pass(both.model_copy(update={"upstream_collection": "cm__cold"}), store=False)

    def parts(r: SyncResult) -> dict[str, Any]:
        return {"documents": r.added, "seconds": r.seconds, "embedded": r.embedded, "reused": r.reused,
                "embed_seconds": r.embed_seconds, "upsert_seconds": r.upsert_seconds, "read_seconds": r.read_seconds}

    def split(r: SyncResult) -> tuple[str, str]:
        return ("  of which embed / write / read", f"{r.embed_seconds:,.1f} / {r.upsert_seconds:,.1f} / "
                                                   f"{r.read_seconds:,.2f} s")

    def median_s(results: list[SyncResult]) -> float:
        return statistics.median(r.seconds for r in results)

    per_100k = 100_000 / args.rows
    result: dict[str, Any] = {
        "rows": args.rows,
        "own_first": parts(first), "upstream_first": parts(up_first), "upstream_cold": parts(up_cold),
        "own_unchanged_s_per_100k": median_s(own_again) * per_100k,
        "upstream_unchanged_s_per_100k": median_s(up_again) * per_100k,
        "unchanged_written": max(r.written for r in [*own_again, *up_again]),
        "chroma_mb_added": chroma_after - chroma_before, "chroma_mb_before": chroma_before,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average": os.getloadavg()},
    }
    rows = [
        ("rows", f"{args.rows:,}"),
        ("(a) own collection, full resync", f"{first.added:,} docs in {first.seconds:,.1f} s "
                                            f"({first.added / first.seconds:,.1f} docs/s)"),
        split(first),
        ("(b) upstream store, first pass after (a)",
         f"{up_first.added:,} docs in {up_first.seconds:,.1f} s ({up_first.added / up_first.seconds:,.1f} docs/s); "
         f"{up_first.embedded:,} embedded, {up_first.reused:,} from the embedding store"),
        split(up_first),
        ("(b)/(a) time", f"{up_first.seconds / first.seconds:.3f}"),
        ("(b') upstream store, empty embedding store",
         f"{up_cold.added:,} docs in {up_cold.seconds:,.1f} s ({up_cold.added / up_cold.seconds:,.1f} docs/s); "
         f"{up_cold.embedded:,} embedded"),
        split(up_cold),
        (f"unchanged pass per 100k rows (median of {args.repeats}): own / upstream",
         f"{result['own_unchanged_s_per_100k']:.2f} / {result['upstream_unchanged_s_per_100k']:.2f} s, "
         f"{result['unchanged_written']} written"),
        ("Chroma directory: before (b) / added by (b)",
         f"{chroma_before:,.1f} MB / {chroma_after - chroma_before:,.1f} MB"),
    ]
    report(rows, result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
