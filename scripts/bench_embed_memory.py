"""Peak memory and rate of the embedder for a given sub-batch token budget, in a fresh process.

    .venv/bin/python -m scripts.bench_embed_memory [--tokens-per-text 32 64 128 256] [--rounds 2]

For each budget (batch_size x tokens-per-text padded tokens per sub-batch) a child process loads the
model, embeds 1,500 mixed demo texts (rate), then 256 long texts truncated at 256 tokens (rate),
and reports its peak RSS: onnxruntime's memory arena keeps the largest batch shape it has seen, so
the peak is what a long-running worker keeps. Prints a table and writes JSON (default
``.bench/bench_embed_memory.json``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from scripts.benchlib import ROOT, print_table, write_json


def child(tokens_per_text: int) -> dict[str, float]:
    """Run in the child: the measurement for one budget."""
    import memsync.config.embedding as embedding
    from memsync.worker.demo import generate

    embedding.TOKENS_PER_TEXT = tokens_per_text
    texts = [str(r[k]) for r in generate(n_sessions=300, seed=3) for k in ("narrative", "prompt_text", "learned")
             if r.get(k)]
    longs = [" ".join([t] * 6) for t in texts[:256]]
    mixed = texts[:1500]
    e = embedding.MiniLMOnnx()
    t = time.perf_counter()
    e.embed(mixed)
    mixed_rate = len(mixed) / (time.perf_counter() - t)
    t = time.perf_counter()
    e.embed(longs)
    long_rate = len(longs) / (time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens_per_text": tokens_per_text, "peak_rss_mb": round(peak), "mixed_texts_per_s": round(mixed_rate, 1),
            "long_texts_per_s": round(long_rate, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens-per-text", type=int, nargs="+", default=[256, 128, 64, 32])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_embed_memory.json")
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return 0
    table = []
    for _ in range(args.rounds):
        for tpt in args.tokens_per_text:
            out = subprocess.run([sys.executable, "-m", "scripts.bench_embed_memory", "--child", str(tpt)],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout
            table.append(json.loads(out.strip().splitlines()[-1]))
    print_table(table)
    write_json({"table": table}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
