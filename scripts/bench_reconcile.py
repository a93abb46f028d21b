"""The unchanged pass at scale: a resync and the worker's reconcile of a database that did not change.

    .venv/bin/python -m scripts.bench_reconcile [--rows 100000] [--work .bench/search-ROWS] [--repeats 5]

Builds (or reuses) ``scripts.bench_search``'s deterministic database of ``--rows`` rows synced into
a managed Chroma with pool embeddings, then, with the server kept up: one warm-up resync (on a
reused directory written by older code it also does whatever that code left to do, e.g. storing
new row hashes), ``--repeats`` resyncs of the unchanged database (the pass alone, as resync
reports it, and the whole command: open, store check, pass, text index check; and the CPU
seconds of the same pass run dry, closer to its cost alone on a shared machine), ``--repeats``
reconciles of a running worker (``scripts.bench_sync.worker_reconciles``) and one text index
fingerprint check. Every figure also per 100,000 rows (target: at most 1 s). Prints a table and
writes JSON.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from memsync.chroma import collections as stores
from memsync.config.claude_mem.schema import KINDS
from memsync.embedding import get_embedder
from memsync.worker.pipeline.resync import resync
from memsync.worker.process import logs
from memsync.worker.rows.source import SourceReader
from scripts.bench_search import PoolEmbedder, build
from scripts.bench_sync import unchanged_pass_cpu, worker_reconciles
from scripts.benchlib import report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--work", type=Path, default=None, help="data to build or reuse (default .bench/search-ROWS)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path(".bench/bench_reconcile.json"))
    args = p.parse_args(argv)
    logs.configure(level="warning")
    settings = build(args.work or Path(f".bench/search-{args.rows}"), args.rows)
    with SourceReader(settings.db) as reader:
        rows = sum(reader.max_ids()[k] for k in KINDS)  # ids are dense in the generated database
    real = get_embedder(settings.embedding_model, 32, 256, 0)
    pool = PoolEmbedder(real.embed([f"pool text {i} about caching and retries" for i in range(500)]))
    with stores.connect(settings):  # one server for every measurement, as beside a running worker
        t = time.perf_counter()
        warm = resync(settings, embedder=pool)
        warm_s = time.perf_counter() - t
        passes, commands, pass_cpu = [], [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            r = resync(settings, embedder=pool)
            commands.append(time.perf_counter() - t)
            assert r.written == 0 and r.embedded == 0, r
            passes.append(r.seconds)
            pass_cpu.append(unchanged_pass_cpu(settings, pool))
        reconciles, reconcile_cpu, text_check_s = worker_reconciles(settings, args.repeats)

    def per_100k(seconds: float) -> float:
        return seconds * 100_000 / rows

    result: dict[str, Any] = {
        "unchanged_pass_cpu_s": pass_cpu, "unchanged_pass_cpu_s_per_100k": per_100k(statistics.median(pass_cpu)),
        "rows": rows, "documents": warm.unchanged + warm.written, "warm_up_resync_s": warm_s,
        "warm_up_written": warm.written, "unchanged_pass_s": passes, "unchanged_resync_command_s": commands,
        "worker_reconcile_s": reconciles, "worker_reconcile_cpu_s": reconcile_cpu, "text_index_check_s": text_check_s,
        "unchanged_pass_s_per_100k": per_100k(statistics.median(passes)),
        "unchanged_resync_command_s_per_100k": per_100k(statistics.median(commands)),
        "worker_reconcile_s_per_100k": per_100k(statistics.median(reconciles)),
    }
    table = [
        ("rows / documents", f"{rows:,} / {result['documents']:,}"),
        ("warm-up resync", f"{warm_s:.2f} s ({warm.written} written)"),
    ]
    for name, values in (("unchanged resync: the pass", passes), ("the same pass: CPU seconds", pass_cpu),
                         ("unchanged resync: the command", commands), ("worker reconcile", reconciles),
                         ("the same reconcile: CPU seconds", reconcile_cpu)):
        table.append((f"{name} (median / best of {len(values)})",
                      f"{statistics.median(values):.3f} / {min(values):.3f} s = "
                      f"{per_100k(statistics.median(values)):.2f} / {per_100k(min(values)):.2f} s per 100k rows"))
    table.append(("text index fingerprint check", f"{text_check_s:.3f} s = {per_100k(text_check_s):.2f} s per 100k"))
    report(table, result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
