"""How the costs grow with size: 10k, 100k and 1M documents.

    .venv/bin/python -m scripts.bench_scale [--sizes 10000,100000,1000000] [--out FILE]

For each size: a deterministic demo database (a year of three projects) grown until its rows make
that many documents, synced into a managed Chroma server with the real sync code, then:
- resync throughput (documents/s). Document vectors come from the pool embedder of
  ``bench_search`` (2,000 real MiniLM vectors, mixed per text): what is measured is memsync + Chroma,
  not the model. The real model's rate is measured in the same run as the baseline, and bounds a
  real resync (``embed docs/s``);
- hybrid search p50/p95 over the query list (queries embedded by the real model), all time and the
  90-day window;
- memory: RSS of the Chroma server after the searches, and of ``memsync worker`` after its first
  full reconcile of that database (with the time the reconcile took);
- disk per document: the Chroma directory, memsync's sync records, and the source database.
Writes JSON (default ``.bench/bench_scale.json``); the data of each size is kept in
``.bench/scale-N`` and reused.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from memsync.config.chroma.server import ManagedServer, ServerInfo
from memsync.config.embedding import get_embedder
from memsync.config.settings import Settings
from memsync.search import Mode, Searcher
from memsync.worker.demo import PROJECTS, generate
from memsync.worker.importer import import_records, init_db
from memsync.worker.resync import resync
from scripts.bench_lag import rss_mb
from scripts.bench_search import QUERIES, PoolEmbedder, pct
from scripts.benchlib import ROOT, free_port, print_table, reconciled_worker, write_json


def size_mb(path: Path) -> float:
    """Bytes under ``path`` (a file or a directory), in MB."""
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6 if path.exists() else 0.0


def build(work: Path, documents: int, pool_embedder: PoolEmbedder) -> tuple[Settings, int, int, float]:
    """A database of about ``documents`` documents, synced in one resync: a first chunk measures
    documents per row, then the rest of the rows are imported and everything is synced once (a
    resync per chunk would compare every earlier row again). Returns (settings, rows, documents,
    resync seconds)."""
    settings = Settings(db=work / "claude-mem.db", data_dir=work / "data", chroma_mode="managed",
                        chroma_port=free_port())
    init_db(settings.db)
    records = iter(generate(n_sessions=documents // 4 + 10, seed=13, end_ms=int(time.time() * 1000),
                            span_days=365, projects=len(PROJECTS)))
    first = [rec for _, rec in zip(range(1000), records, strict=False)]
    import_records(settings.db, first)
    t = time.perf_counter()
    docs = resync(settings, embedder=pool_embedder).added
    seconds = time.perf_counter() - t
    rows = len(first)
    wanted_rows = int(documents / (docs / rows))
    while rows < wanted_rows:
        chunk = [rec for _, rec in zip(range(min(20_000, wanted_rows - rows)), records, strict=False)]
        if not chunk:
            break
        import_records(settings.db, chunk)
        rows += len(chunk)
    t = time.perf_counter()
    docs += resync(settings, embedder=pool_embedder).added
    seconds += time.perf_counter() - t
    return settings, rows, docs, seconds


def worker_reconcile(settings: Settings) -> tuple[float, float]:
    """Start `memsync worker` on the synced data; (RSS MB, seconds) at the end of its first reconcile."""
    proc, seconds = reconciled_worker(settings)
    try:
        return rss_mb(proc.pid), seconds
    finally:
        proc.terminate()
        proc.wait(120)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000,1000000", help="document counts, comma-separated")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_scale.json")
    args = p.parse_args(argv)

    real = get_embedder("all-MiniLM-L6-v2-int8", 32, 256, 0)
    sample = [str(r.get("narrative") or r.get("prompt_text") or r.get("learned") or "")
              for r in generate(n_sessions=300, seed=3)][:1000]
    t = time.perf_counter()
    pool = real.embed(sample)
    embed_rate = len(sample) / (time.perf_counter() - t)
    pool_embedder = PoolEmbedder(pool)
    table = []
    for size in (int(s) for s in args.sizes.split(",")):
        work = ROOT / ".bench" / f"scale-{size}"
        if (work / "claude-mem.db").exists():
            import shutil

            shutil.rmtree(work)  # a partial build cannot be trusted; rebuild from scratch
        settings, rows, docs, seconds = build(work, size, pool_embedder)
        server = ManagedServer(settings)
        server.ensure()
        searcher = Searcher(settings)
        try:
            deadline = time.monotonic() + 600
            while searcher.search("warm up").mode is not Mode.HYBRID:  # the server loads the index
                if time.monotonic() > deadline:
                    raise SystemExit("Chroma did not answer within 600 s")
                time.sleep(1)
            timings: dict[str, list[float]] = {"all time": [], "90 days": []}
            for _ in range(3):
                for q in QUERIES:
                    for name, wd in (("all time", 0), ("90 days", None)):
                        t = time.perf_counter()
                        searcher.search(q, window_days=wd)
                        timings[name].append((time.perf_counter() - t) * 1000)
            info = ServerInfo.read(settings.data_dir)
            chroma_rss = rss_mb(info.pid) if info else 0.0
        finally:
            searcher.close()
        worker_rss, reconcile_s = worker_reconcile(settings)
        server.stop()
        table.append({
            "documents": docs, "rows": rows,
            "resync docs/s": round(docs / seconds), "embed docs/s (real model)": round(embed_rate),
            "hybrid p50/p95 ms (all time)": f"{statistics.median(timings['all time']):.0f} / "
                                            f"{pct(timings['all time'], 0.95):.0f}",
            "hybrid p50/p95 ms (90 d)": f"{statistics.median(timings['90 days']):.0f} / "
                                        f"{pct(timings['90 days'], 0.95):.0f}",
            "chroma RSS MB": round(chroma_rss), "worker RSS MB": round(worker_rss),
            "first reconcile s": round(reconcile_s, 1),
            "chroma B/doc": round(size_mb(settings.chroma_dir) * 1e6 / docs),
            "state B/doc": round(size_mb(settings.state_path) * 1e6 / docs),
            "source B/doc": round(size_mb(settings.db) * 1e6 / docs),
        })
        print_table(table[-1:])
    print_table(table)
    write_json({"embed_docs_per_s": embed_rate, "table": table}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
