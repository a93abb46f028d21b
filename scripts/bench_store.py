"""What the store check and a repair cost, against an unchanged resync in the same run (the budget).

    .venv/bin/python -m scripts.bench_store [--rows 20000] [--work .bench/store-20000] [--delete 10000]

Builds (or reuses) ``scripts.bench_search``'s deterministic database of ``--rows`` rows synced into
a managed Chroma with pool embeddings (real MiniLM vectors mixed per text: speed is real, quality
is not), then measures: an unchanged resync (the baseline, which now includes the check); the
routine check (the collection's ``count()`` and the records' COUNT); a full alignment of the
records with the store's ids and hashes when nothing differs (what the daily audit costs); and the
repair of ``--delete`` documents deleted straight from the store (alignment plus re-embedding with
the pool embedder plus upserts; with the shipped model add its embedding rate). Prints a table and
writes JSON.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from memsync.chroma import collections as stores
from memsync.chroma.server import ManagedServer
from memsync.embedding import get_embedder
from memsync.worker.pipeline.resync import resync
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.pipeline.target import align_records, store_counts
from memsync.worker.rows.state import SyncState
from scripts.bench_search import PoolEmbedder, build
from scripts.benchlib import print_table, write_json


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--work", type=Path, default=None, help="data to build or reuse (default .bench/store-ROWS)")
    p.add_argument("--delete", type=int, default=10_000, help="documents deleted from the store for the repair")
    p.add_argument("--out", type=Path, default=Path(".bench/bench_store.json"))
    args = p.parse_args(argv)
    work = args.work or Path(f".bench/store-{args.rows}")

    settings = build(work, args.rows)
    real = get_embedder(settings.embedding_model, 32, 256, 0)
    pool = PoolEmbedder(real.embed([f"pool text {i} about caching and retries" for i in range(500)]))
    server = ManagedServer(settings)
    server.ensure()
    result: dict[str, Any] = {"rows": args.rows}
    try:
        def unchanged() -> float:
            t = time.perf_counter()
            r = resync(settings, embedder=pool)
            assert r.written == 0, r
            return time.perf_counter() - t

        result["unchanged_resync_s"] = [unchanged() for _ in range(3)]
        with SyncState(settings.state_path) as state, stores.connect(settings, server=server) as handle:
            collection = stores.open_collection(handle.client, settings, pool.model_id, pool.dimension)
            sink = ChromaSink(collection, handle.client.get_max_batch_size())
            cheap = []
            for _ in range(20):
                t = time.perf_counter()
                counts = store_counts(state, sink)
                cheap.append(time.perf_counter() - t)
            result["documents"] = counts.store_documents
            result["routine_check_ms"] = [x * 1000 for x in cheap]
            full = []
            for _ in range(2):
                t = time.perf_counter()
                aligned = align_records(state, sink, None, pool.model_id)
                full.append(time.perf_counter() - t)
                assert aligned.changed == 0, aligned
            result["full_alignment_s"] = full
            ids = sorted(collection.get(include=[], limit=args.delete, offset=0)["ids"])
            for i in range(0, len(ids), 5000):
                collection.delete(ids=ids[i:i + 5000])
            result["deleted"] = len(ids)
        t = time.perf_counter()
        repaired = resync(settings, embedder=pool)
        result["repair_s"] = time.perf_counter() - t
        result["repair"] = {"added": repaired.added, "embedded": repaired.embedded,
                            "embed_s": repaired.embed_seconds, "upsert_s": repaired.upsert_seconds}
        result["unchanged_resync_after_repair_s"] = unchanged()
    finally:
        server.stop()

    base = statistics.median(result["unchanged_resync_s"])
    print_table([
        {"what": "unchanged resync (baseline, check included)", "value": f"{base:.2f} s",
         "vs baseline": "1.00"},
        {"what": "routine check: count() + records COUNT (median / max)",
         "value": f"{statistics.median(result['routine_check_ms']):.1f} / {max(result['routine_check_ms']):.1f} ms",
         "vs baseline": f"{statistics.median(result['routine_check_ms']) / 1000 / base:.3f}"},
        {"what": "full alignment by ids, nothing to change (daily audit)",
         "value": f"{min(result['full_alignment_s']):.2f} s",
         "vs baseline": f"{min(result['full_alignment_s']) / base:.1f}"},
        {"what": f"repair of {result['deleted']} documents deleted from the store",
         "value": f"{result['repair_s']:.1f} s (embed {result['repair']['embed_s']:.1f}, "
                  f"upsert {result['repair']['upsert_s']:.1f})", "vs baseline": f"{result['repair_s'] / base:.1f}"},
        {"what": "unchanged resync after the repair", "value": f"{result['unchanged_resync_after_repair_s']:.2f} s",
         "vs baseline": f"{result['unchanged_resync_after_repair_s'] / base:.2f}"},
    ])
    print(f"{result['documents']:,} documents in the store ({args.rows:,} rows)")
    write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
