"""Worker latency benchmark: commit-to-searchable lag, burst drain rate, idle CPU and memory.

    .venv/bin/python -m scripts.bench_lag [--rate 5] [--steady-seconds 30] [--burst 500] [--idle-seconds 60]

With `memsync worker` running (managed mode) as its own process:
1. steady: this process commits single prompts at ``--rate`` per second; a poller asks Chroma for
   each row's document until it is there: p50/p95/max lag from commit to present;
2. burst: ``--burst`` rows in one transaction; documents drained per second, against the raw
   embedding rate of the same texts measured in this run before the worker started;
3. idle: the worker's CPU% (user+system from /proc) over ``--idle-seconds`` with no writes, and
   its RSS. Prints a table and writes JSON (default ``.bench/bench_lag.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from memsync.embedding import get_embedder
from memsync.worker.seed.demo import generate
from memsync.worker.seed.importer import import_records
from scripts.benchlib import report, start_worker, stop_worker, worker_status

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def prompt_record(i: int, now_ms: int, text: str) -> dict[str, Any]:
    return {"kind": "prompt", "project": "bench", "session": f"bench-{i // 20}", "prompt_number": i % 20 + 1,
            "prompt_text": text, "created_at_epoch": now_ms}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=5.0, help="steady commits per second")
    p.add_argument("--steady-seconds", type=float, default=30.0)
    p.add_argument("--burst", type=int, default=500)
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument("--out", type=Path, default=Path(".bench/bench_lag.json"))
    args = p.parse_args(argv)

    texts = [r["prompt_text"] for r in generate(n_sessions=400, seed=3) if r["kind"] == "prompt"]
    burst_texts = [texts[i % len(texts)] + f" (burst {i})" for i in range(args.burst)]
    embedder = get_embedder("all-MiniLM-L6-v2-int8")
    embedder.embed(burst_texts[:32])
    t = time.perf_counter()
    for start in range(0, len(burst_texts), 256):
        embedder.embed(burst_texts[start : start + 256])
    raw_rate = len(burst_texts) / (time.perf_counter() - t)

    s, proc = start_worker("memsync-lag-")
    try:
        wait(lambda: worker_status(s.data_dir).get("reconciles", 0) >= 1, 180, "the worker's first reconcile")
        import chromadb

        client = chromadb.HttpClient(host="127.0.0.1", port=s.chroma_port)
        pointer = client.get_collection("memsync").metadata["memsync:active"]
        col = client.get_collection(pointer)

        # 1. steady rate: poll Chroma for every outstanding row's document.
        outstanding: dict[str, float] = {}
        lags: list[float] = []
        lock = threading.Lock()
        done = threading.Event()

        def poller() -> None:
            while not done.is_set() or outstanding:
                with lock:
                    ids = list(outstanding)
                if ids:
                    found = col.get(ids=ids, include=[])["ids"]
                    now = time.monotonic()
                    with lock:
                        for doc_id in found:
                            lags.append(now - outstanding.pop(doc_id))
                time.sleep(0.01)

        thread = threading.Thread(target=poller, daemon=True)
        thread.start()
        conn_ids = 10_000
        n = int(args.rate * args.steady_seconds)
        start = time.monotonic()
        for i in range(n):
            target = start + i / args.rate
            time.sleep(max(0.0, target - time.monotonic()))
            conn_ids += 1
            import_records(s.db, [prompt_record(conn_ids, int(time.time() * 1000), texts[i % len(texts)])])
            with lock:
                outstanding[f"prompt_{_last_prompt_id(s.db)}"] = time.monotonic()
        done.set()
        thread.join(timeout=60)
        lags.sort()

        # 2. burst: one transaction, then until every document is present.
        # Wait on count() (cheap for the server), not on get() of 500 ids, which would load the
        # same two cores the worker embeds on and slow down what is measured.
        target = col.count() + args.burst
        now_ms = int(time.time() * 1000)
        t0 = time.monotonic()
        import_records(s.db, [prompt_record(20_000 + i, now_ms, burst_texts[i]) for i in range(args.burst)])
        wait(lambda: col.count() >= target, 600, "the burst")
        burst_s = time.monotonic() - t0
        drain_rate = args.burst / burst_s

        # 3. idle.
        wait(lambda: worker_status(s.data_dir).get("pending_rows", 1) == 0, 60, "idle")
        c0, w0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(args.idle_seconds)  # measuring an interval of wall time is the point here
        idle_cpu = 100 * (cpu_seconds(proc.pid) - c0) / (time.monotonic() - w0)
        rss = rss_mb(proc.pid)
    finally:
        stop_worker(s, proc)

    result = {
        "steady_rate_per_s": args.rate, "steady_rows": n, "lag_p50_s": statistics.median(lags),
        "lag_p95_s": lags[int(0.95 * (len(lags) - 1))], "lag_max_s": lags[-1], "burst_rows": args.burst,
        "burst_seconds": burst_s, "burst_docs_per_s": drain_rate, "raw_embed_docs_per_s": raw_rate,
        "burst_ratio": drain_rate / raw_rate, "idle_seconds": args.idle_seconds, "idle_cpu_percent": idle_cpu,
        "worker_rss_mb": rss,
    }
    rows = [
        ("steady lag p50 / p95 / max",
         f"{result['lag_p50_s']:.3f} / {result['lag_p95_s']:.3f} / {result['lag_max_s']:.3f} s  "
         f"({n} rows at {args.rate:g}/s; target p95 <= 1.0 s)"),
        ("burst drain", f"{args.burst} rows in {burst_s:.1f} s = {drain_rate:.1f} docs/s"),
        ("raw embedding rate (same texts)", f"{raw_rate:.1f} docs/s"),
        ("burst / raw", f"{drain_rate / raw_rate:.3f}  (target >= 0.9)"),
        ("idle CPU of the worker", f"{idle_cpu:.2f} %  over {args.idle_seconds:g} s (target < 1 %)"),
        ("worker RSS", f"{rss:.0f} MB"),
    ]
    report(rows, result, args.out)
    return 0


def _last_prompt_id(db: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT MAX(id) FROM user_prompts").fetchone()[0])
    finally:
        conn.close()


if __name__ == "__main__":
    raise SystemExit(main())
