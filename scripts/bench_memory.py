"""Worker memory over time: RSS of `memsync worker` while a writer commits rows steadily.

    .venv/bin/python -m scripts.bench_memory [--minutes 60] [--rate 5] [--sample-seconds 30]
    .venv/bin/python -m scripts.bench_memory --constant --corpus 10000 --minutes 90

Starts the worker (managed mode, everything on: text index, vector copy) as its own process on a
database of about ``--corpus`` rows, synced before the worker starts with vectors mixed from a
random pool (what is measured is the worker from then on, not the model's minutes over the
corpus), commits ``--rate`` rows per second (prompts, observations and summaries of the demo
generator, about 3.6 documents a row) and samples the worker's RSS, its documents and its vector
copy's entries every ``--sample-seconds``.

- Growing (the default): the database only grows. Reports RSS after warm-up, last and maximum,
  the trend per hour, and what must grow: the bytes per document of RSS growth after minute 10
  (RSS growth / documents added, and the least-squares slope of RSS against documents).
- ``--constant``: each row added deletes the oldest one, so the corpus keeps its size (the bar:
  RSS at the end within 10% of RSS at minute 10). Reports RSS at minute 10 and at the end, their
  ratio, and the trend after minute 10.

The JSON (default ``.bench/bench_memory.json``) is rewritten at every sample and on SIGTERM, so a
run cut short leaves its figures (``"partial": true``).
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from memsync.config.claude_mem.schema import KINDS, TABLES, Kind
from memsync.config.formats.vector_copy import DIR as COPY_DIR
from memsync.config.formats.vector_copy import Manifest
from memsync.worker.seed.demo import generate
from memsync.worker.seed.importer import import_records
from scripts.bench_lag import rss_mb, wait
from scripts.bench_search import PoolEmbedder
from scripts.benchlib import report, start_worker, stop_worker, worker_status

WARM_S = 600.0  # minute 10: the reference after warm-up
ROWS_PER_SESSION = 8  # the demo generator's average


class _Stopped(Exception):
    """SIGTERM: write what was measured and stop."""


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per hour."""
    return 3600 * slope(points)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def copy_entries(data_dir: Path) -> tuple[int, int]:
    """(entries, layout number) of the largest vector copy in ``data_dir`` ((0, 0) without one)."""
    found = [m for d in (data_dir / COPY_DIR).glob("*") if (m := Manifest.read(d)) is not None]
    best = max(found, key=lambda m: m.count, default=None)
    return (best.count, best.layout) if best is not None else (0, 0)


class Corpus:
    """The writer's rows, oldest first, so that the constant mode deletes the oldest."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.rows: collections.deque[tuple[Kind, int]] = collections.deque()
        self.conn = sqlite3.connect(db, timeout=30)
        union = " UNION ALL ".join(f"SELECT {i}, id, created_at_epoch FROM {TABLES[k]}" for i, k in enumerate(KINDS))
        for i, row_id, _ in self.conn.execute(f"SELECT * FROM ({union}) ORDER BY 3, 1, 2"):
            self.rows.append((KINDS[i], int(row_id)))
        self.deleted = 0

    def add(self, rec: dict[str, Any]) -> None:
        """Commit one record (one transaction) and remember its row."""
        import_records(self.db, [rec])
        kind = Kind(rec["kind"])
        (row_id,) = self.conn.execute(f"SELECT max(id) FROM {TABLES[kind]}").fetchone()
        self.rows.append((kind, int(row_id)))

    def delete_oldest(self) -> None:
        """Delete the oldest row (one transaction)."""
        kind, row_id = self.rows.popleft()
        with self.conn:
            self.conn.execute(f"DELETE FROM {TABLES[kind]} WHERE id = ?", (row_id,))
        self.deleted += 1

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def summarize(args: argparse.Namespace, samples: list[dict[str, float]], rows: int, deleted: int,
              partial: bool) -> dict[str, Any]:
    """The figures of the run so far."""
    result: dict[str, Any] = {"mode": "constant" if args.constant else "growing", "minutes": args.minutes,
                              "rate": args.rate, "corpus_rows": args.corpus, "rows_written": rows,
                              "rows_deleted": deleted, "partial": partial, "samples": samples}
    if not samples:
        return result
    after_warmup = samples[1:] or samples
    warm = [s for s in samples if s["s"] >= WARM_S]
    ref = warm[0] if warm else samples[-1]
    last = samples[-1]
    result.update({
        "rss_first_mb": after_warmup[0]["rss_mb"], "rss_last_mb": last["rss_mb"],
        "rss_max_mb": max(s["rss_mb"] for s in samples),
        "growth_mb_per_hour": slope_per_hour([(s["s"], s["rss_mb"]) for s in after_warmup]),
        "rss_minute10_mb": ref["rss_mb"], "minute10_s": ref["s"],
        "ratio_end_to_minute10": last["rss_mb"] / ref["rss_mb"],
        "trend_after_minute10_mb_per_hour": slope_per_hour([(s["s"], s["rss_mb"]) for s in warm]),
    })
    # Single samples swing by 10-25 MB with the batch in flight; medians of minutes 5-15 and of the
    # last 10 minutes compare the levels.
    early = [s["rss_mb"] for s in samples if 300 <= s["s"] <= 900]
    late = [s["rss_mb"] for s in samples if s["s"] >= last["s"] - 600]
    if early and late and last["s"] >= 1200:
        result.update({"rss_median_minutes_5_15_mb": statistics.median(early),
                       "rss_median_last_10_minutes_mb": statistics.median(late),
                       "ratio_of_medians": statistics.median(late) / statistics.median(early)})
    added = last["documents"] - ref["documents"]
    result["documents_added_after_minute10"] = added
    if added > 0:
        result["bytes_per_document"] = (last["rss_mb"] - ref["rss_mb"]) * 2**20 / added
        result["bytes_per_document_fit"] = slope([(s["documents"], s["rss_mb"]) for s in warm]) * 2**20
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=5.0, help="rows committed per second")
    p.add_argument("--sample-seconds", type=float, default=30.0)
    p.add_argument("--constant", action="store_true", help="delete the oldest row for each row added")
    p.add_argument("--corpus", type=int, default=200, help="rows in the database before the clock starts")
    p.add_argument("--reconcile-seconds", type=float, default=None,
                   help="the worker's reconcile_interval_s (deletes are found at a reconcile; default its own)")
    p.add_argument("--out", type=Path, default=Path(".bench/bench_memory.json"))
    args = p.parse_args(argv)

    def on_term(signum: int, frame: Any) -> None:
        raise _Stopped

    signal.signal(signal.SIGTERM, on_term)
    extra = {} if args.reconcile_seconds is None else {"MEMSYNC_RECONCILE_INTERVAL_S": str(args.reconcile_seconds)}
    pool = np.random.default_rng(0).standard_normal((256, 384)).astype(np.float32)
    s, proc = start_worker("memsync-mem-", sessions=max(1, args.corpus // ROWS_PER_SESSION),
                           seed_embedder=PoolEmbedder(pool / np.linalg.norm(pool, axis=1, keepdims=True)), **extra)
    records = [r for r in generate(n_sessions=2000, seed=9)]
    samples: list[dict[str, float]] = []
    rows = 0
    corpus: Corpus | None = None
    partial = True

    def sample(t: float) -> None:
        entries, layout = copy_entries(s.data_dir)
        samples.append({"s": round(t, 1), "rss_mb": round(rss_mb(proc.pid), 1),
                        "documents": int(worker_status(s.data_dir).get("records_documents", 0)),
                        "copy_entries": entries, "copy_layout": layout, "rows_written": rows})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summarize(args, samples, rows, corpus.deleted if corpus else 0, True), indent=2))

    try:
        wait(lambda: worker_status(s.data_dir).get("reconciles", 0) >= 1, 3600, "the worker's first reconcile")
        corpus = Corpus(s.db)
        args.corpus = len(corpus.rows)
        start = time.monotonic()
        next_sample = start
        end = start + args.minutes * 60
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                sample(now - start)
                next_sample += args.sample_seconds
            rec = dict(records[rows % len(records)])
            rec["created_at_epoch"] = int(time.time() * 1000)
            rec.pop("created_at", None)
            corpus.add(rec)
            if args.constant:
                corpus.delete_oldest()
            rows += 1
            time.sleep(max(0.0, start + rows / args.rate - time.monotonic()))
        try:
            wait(lambda: worker_status(s.data_dir).get("pending_rows", 1) == 0, 600, "the worker to catch up")
            partial = False
        except SystemExit as exc:  # a worker that fell behind on shared cores: the figures still count
            print(exc)
        sample(time.monotonic() - start)
    except (_Stopped, KeyboardInterrupt):
        print("stopped: writing the figures measured so far")
    finally:
        stop_worker(s, proc)
        if corpus is not None:
            corpus.close()
    result = summarize(args, samples, rows, corpus.deleted if corpus else 0, partial)
    if not samples:
        return 1
    lines = [
        ("mode / duration / rows written / deleted", f"{result['mode']} / {samples[-1]['s'] / 60:.1f} min / {rows} / "
                                                     f"{result['rows_deleted']}"),
        ("RSS first (after warm-up) / last / max", f"{result['rss_first_mb']:.0f} / {result['rss_last_mb']:.0f} / "
                                                   f"{result['rss_max_mb']:.0f} MB"),
        ("RSS trend (whole run)", f"{result['growth_mb_per_hour']:+.1f} MB per hour"),
        ("RSS at minute 10 / end / ratio", f"{result['rss_minute10_mb']:.0f} / {result['rss_last_mb']:.0f} MB / "
                                           f"{result['ratio_end_to_minute10']:.3f}"),
        ("RSS trend after minute 10", f"{result['trend_after_minute10_mb_per_hour']:+.1f} MB per hour"),
        ("documents at the end (added after minute 10)", f"{samples[-1]['documents']} "
                                                         f"({result['documents_added_after_minute10']:+d})"),
    ]
    if "ratio_of_medians" in result:
        lines.append(("RSS median, minutes 5-15 / last 10 minutes / ratio",
                      f"{result['rss_median_minutes_5_15_mb']:.0f} / "
                      f"{result['rss_median_last_10_minutes_mb']:.0f} MB / {result['ratio_of_medians']:.3f}"))
    if "bytes_per_document" in result:
        lines.append(("RSS growth per document added (endpoints / fit)",
                      f"{result['bytes_per_document']:.0f} / {result['bytes_per_document_fit']:.0f} bytes"))
    report(lines, result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
