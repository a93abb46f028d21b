"""Lexical search latency for Chinese, Japanese and Korean queries at 100,000 CJK rows.

    .venv/bin/python -m scripts.bench_cjk_search [--rows 100000] [--out FILE]

Builds a claude-mem database whose rows are the parallel set's memories (``tests/data/multilingual``)
in Chinese, Japanese and Korean, drawn at random, each with a row number, over a year; indexes it
with the worker's text index; then appends 20 rows, so every search also has a tail for memsync's
own FTS index (as in the seconds after the agent writes). Times the set's 384 CJK queries through
the library, lexical mode: all time and the 90-day window; against the baseline of the app's own
FTS5 tables (``unicode61``) asked the same words OR-ed in the same run, which is what a CJK query
cost before (and found nothing inside a run). The semantic side runs beside the lexical one in a
hybrid search: its cost at 100,000 rows is ``bench_search``'s (``--query-model``). Writes JSON
(default ``.bench/bench_cjk_search.json``); the built data is kept in ``.bench/cjk-ROWS``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

from memsync.config.settings import Settings
from memsync.search import Mode, Searcher, SearchRequest
from memsync.worker.seed.importer import import_records, init_db
from memsync.worker.stores.textsync import TextSync
from scripts.bench_search import pct
from scripts.benchlib import ROOT, built, print_table, records_fingerprint, reusable, write_json
from scripts.multilingual import DAY_MS, fts5, load, records

CJK = ("zh", "ja", "ko")
TAIL_ROWS = 20


def build(work: Path, rows: int) -> Settings:
    """The database and the text index over all but the tail (reused when made from the same
    records: ``benchlib.reusable``)."""
    db = work / "claude-mem.db"
    settings = Settings(db=db, data_dir=work / "data", chroma_mode="http", chroma_port=9)  # lexical only
    fingerprint = records_fingerprint(generated(rows, 0))
    if reusable(work, fingerprint):
        return settings
    work.mkdir(parents=True, exist_ok=True)
    recs = generated(rows, int(time.time() * 1000))
    init_db(db)
    import_records(db, recs[:-TAIL_ROWS])
    text = TextSync(settings)
    try:
        text.step(force_full=True)
    finally:
        text.close()
    import_records(db, recs[-TAIL_ROWS:])  # committed after the index's last refresh: its tail
    built(work, fingerprint)
    return settings


def generated(rows: int, now: int) -> list[dict[str, Any]]:
    """The build's ``rows`` records, dated back from ``now`` (0: without the clock, to fingerprint)."""
    memories, _ = load()
    rng = random.Random(7)
    recs: list[dict[str, Any]] = []
    for n in range(rows):
        memory = rng.choice(memories)
        rec = records([{**memory, "days_ago": rng.randrange(365)}], rng.choice(CJK), now)[0]
        key = "title" if "title" in rec else next(k for k in ("request", "prompt_text") if k in rec)
        rec[key] = f"{rec[key]} #{n}"
        rec["created_at_epoch"] -= rng.randrange(DAY_MS)
        recs.append(rec)
    return recs


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_cjk_search.json")
    args = p.parse_args(argv)
    t = time.monotonic()
    settings = build(ROOT / ".bench" / f"cjk-{args.rows}", args.rows)
    print(f"built in {time.monotonic() - t:.0f} s")
    _, queries = load()
    texts = [q.text[lang] for lang in CJK for q in queries]
    searcher = Searcher(settings)
    variants = {
        "app FTS5 unicode61, all time (baseline)": lambda q: fts5(settings.db, q, 10),
        "memsync lexical, all time": lambda q: searcher.search(SearchRequest(query=q, mode=Mode.LEXICAL,
                                                                             window_days=0)),
        "memsync lexical, 90-day window": lambda q: searcher.search(SearchRequest(query=q, mode=Mode.LEXICAL)),
    }
    table = []
    try:
        t = time.monotonic()
        first = searcher.search(SearchRequest(query=texts[0], mode=Mode.LEXICAL, window_days=0))
        print(f"first CJK search (builds memsync's own FTS index): {time.monotonic() - t:.1f} s; {first.reason}")
        for name, fn in variants.items():
            ms = []
            for q in texts:
                t0 = time.perf_counter()
                fn(q)
                ms.append((time.perf_counter() - t0) * 1000)
            table.append({"variant": name, "n": len(ms), "p50_ms": round(statistics.median(ms), 1),
                          "p95_ms": round(pct(ms, 0.95), 1), "max_ms": round(max(ms), 1)})
    finally:
        searcher.close()
    print_table(table)
    write_json({"rows": args.rows, "tail_rows": TAIL_ROWS, "table": table}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
