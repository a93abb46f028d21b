"""Worker memory over time: RSS of `memsync worker` while a writer appends rows steadily.

    .venv/bin/python -m scripts.bench_memory [--minutes 60] [--rate 5] [--sample-seconds 30]

Starts the worker (managed mode) as its own process, commits ``--rate`` rows per second (prompts
with an observation every tenth row) and samples the worker's RSS every ``--sample-seconds``.
Reports RSS at the first sample after warm-up, the last sample, the maximum, and the growth per
hour of a least-squares line through the samples after the first. Writes JSON
(default ``.bench/bench_memory.json``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from memsync.worker.demo import generate
from memsync.worker.importer import import_records
from scripts.bench_lag import rss_mb, wait
from scripts.benchlib import report, start_worker, stop_worker, worker_status


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return 3600 * sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=5.0, help="rows committed per second")
    p.add_argument("--sample-seconds", type=float, default=30.0)
    p.add_argument("--out", type=Path, default=Path(".bench/bench_memory.json"))
    args = p.parse_args(argv)

    s, proc = start_worker("memsync-mem-")
    records = [r for r in generate(n_sessions=2000, seed=9)]
    samples: list[tuple[float, float]] = []
    rows = 0
    try:
        wait(lambda: worker_status(s.data_dir).get("reconciles", 0) >= 1, 180, "the worker's first reconcile")
        start = time.monotonic()
        next_sample = start
        end = start + args.minutes * 60
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                samples.append((now - start, rss_mb(proc.pid)))
                next_sample += args.sample_seconds
            rec = dict(records[rows % len(records)])
            rec["created_at_epoch"] = int(time.time() * 1000)
            rec.pop("created_at", None)
            import_records(s.db, [rec])
            rows += 1
            time.sleep(max(0.0, start + rows / args.rate - time.monotonic()))
        wait(lambda: worker_status(s.data_dir).get("pending_rows", 1) == 0, 120, "the worker to catch up")
        samples.append((time.monotonic() - start, rss_mb(proc.pid)))
    finally:
        stop_worker(s, proc)
    after_warmup = samples[1:] or samples
    result = {
        "minutes": args.minutes, "rows_written": rows, "samples": samples,
        "rss_first_mb": after_warmup[0][1], "rss_last_mb": samples[-1][1], "rss_max_mb": max(m for _, m in samples),
        "growth_mb_per_hour": slope_per_hour(after_warmup),
    }
    report([
        ("duration / rows written", f"{args.minutes:g} min / {rows}"),
        ("RSS first (after warm-up) / last / max", f"{result['rss_first_mb']:.0f} / {result['rss_last_mb']:.0f} / "
                                                   f"{result['rss_max_mb']:.0f} MB"),
        ("RSS trend", f"{result['growth_mb_per_hour']:+.1f} MB per hour"),
    ], result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
