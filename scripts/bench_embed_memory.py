"""Memory, rate and query latency of the bundled embedder per sub-batch token budget and purpose.

    .venv/bin/python -m scripts.bench_embed_memory [--tokens-per-text 32 64 128 256]
        [--purposes documents queries] [--rounds 2]

For each budget (batch_size x tokens-per-text padded tokens per sub-batch) and each session
profile ("documents": the worker's, lean in memory; "queries": the search server's) a fresh child
process loads the model, embeds 1,500 mixed demo texts (rate), then 256 long texts truncated at 256
tokens (rate), then 60 single queries one at a time (p50/p95 latency, what a search pays), and
reports its peak RSS and its RSS at the end: onnxruntime's memory arena keeps the largest batch
shape it has seen unless it is shrunk, so the end RSS is what a long-running process keeps. Prints
a table and writes JSON (default ``.bench/bench_embed_memory.json``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts.benchlib import ROOT, print_table, write_json

QUERIES = ("how did we fix the flaky sqlite lock", "chroma timeout", "why is the worker slow after a resync",
           "embedding rate", "which settings did the user change for the page")


def _rss_mb() -> float:
    """This process's resident memory now (Linux), in MB."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(tokens_per_text: int, purpose: str) -> dict[str, Any]:
    """Run in the child: the measurement for one budget and purpose."""
    import memsync.embedding as embedding
    from memsync.worker.seed.demo import generate

    embedding.TOKENS_PER_TEXT = tokens_per_text
    texts = [str(r[k]) for r in generate(n_sessions=300, seed=3) for k in ("narrative", "prompt_text", "learned")
             if r.get(k)]
    longs = [" ".join([t] * 6) for t in texts[:256]]
    mixed = texts[:1500]
    e = embedding.MiniLMOnnx(purpose="queries" if purpose == "queries" else "documents")
    t = time.perf_counter()
    e.embed(mixed)
    mixed_rate = len(mixed) / (time.perf_counter() - t)
    t = time.perf_counter()
    e.embed(longs)
    long_rate = len(longs) / (time.perf_counter() - t)
    times = []
    for i in range(60):
        t = time.perf_counter()
        e.embed([QUERIES[i % len(QUERIES)]])
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens_per_text": tokens_per_text, "purpose": purpose, "peak_rss_mb": round(peak),
            "end_rss_mb": round(_rss_mb()), "mixed_texts_per_s": round(mixed_rate, 1),
            "long_texts_per_s": round(long_rate, 1), "query_p50_ms": round(times[len(times) // 2], 1),
            "query_p95_ms": round(times[int(len(times) * 0.95)], 1)}


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens-per-text", type=int, nargs="+", default=[256, 128, 64, 32])
    p.add_argument("--purposes", nargs="+", choices=["documents", "queries"], default=["documents", "queries"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-purpose", default="documents", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_embed_memory.json")
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.child_purpose)))
        return 0
    table = []
    for _ in range(args.rounds):
        for tpt in args.tokens_per_text:
            for purpose in args.purposes:
                out = subprocess.run([sys.executable, "-m", "scripts.bench_embed_memory", "--child", str(tpt),
                                      "--child-purpose", purpose],
                                     cwd=ROOT, capture_output=True, text=True, check=True).stdout
                table.append(json.loads(out.strip().splitlines()[-1]))
    print_table(table)
    write_json({"table": table}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
