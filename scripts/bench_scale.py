"""How the costs grow with size: 10k, 100k and 1M documents.

    .venv/bin/python -m scripts.bench_scale [--sizes 10000,100000,1000000] [--out FILE]

For each size: a deterministic demo database (a year of three projects) grown until its rows make
that many documents, synced into a managed Chroma server with the real sync code, then:
- resync throughput (documents/s). Document vectors come from the pool embedder of
  ``bench_search`` (2,000 real MiniLM vectors, mixed per text): what is measured is memsync + Chroma,
  not the model. The real model's rate is measured in the same run as the baseline, and bounds a
  real resync (``embed docs/s``);
- how long after the server starts a search without a window first gets Chroma's answer (the
  server loads the index on its first query; searches fall back to lexical until then);
- search p50/p95 over the query list (queries embedded by the real model): hybrid all time, the
  90-day window (the default; the newest 90/365 of the data's span, see ``newest_window``),
  window + project;
  lexical only and the fallback (Chroma down) at the
  default window;
- memory: RSS of the Chroma server after the searches, and of ``memsync worker`` after its first
  full reconcile of that database (with the time the reconcile took);
- disk per document: the Chroma directory, memsync's sync records, vector copy, text index and
  embedding store, and the source database.
Everything is on, as by default: text index, vector copy (in date order), embedding store.
Writes JSON (default ``.bench/bench_scale.json``); the data of each size is kept in
``.bench/scale-N`` and reused when its build finished from the same records (``benchlib.reusable``;
``built.json`` holds its figures; ``--rebuild`` to redo it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from memsync.chroma.server import ManagedServer, ServerInfo
from memsync.config.claude_mem.schema import KINDS, TABLES
from memsync.config.settings import Settings
from memsync.embedding import get_embedder
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.worker.pipeline.resync import resync
from memsync.worker.seed.demo import PROJECTS, generate
from memsync.worker.seed.importer import import_records, init_db
from scripts.bench_lag import rss_mb
from scripts.bench_search import QUERIES, PoolEmbedder, pct
from scripts.benchlib import (
    ROOT,
    built,
    free_port,
    print_table,
    reconciled_worker,
    records_fingerprint,
    reusable,
    size_mb,
    write_json,
)

BUILT = "built.json"
DOCS_PER_ROW = 3.6  # documents a demo row makes (3.59 at 1M), to size a build's sessions


def build(work: Path, documents: int, pool_embedder: PoolEmbedder, rebuild: bool) -> tuple[Settings, int, int, float]:
    """A database of about ``documents`` documents, synced in one resync: a first chunk measures
    documents per row, then the rest of the rows are imported and everything is synced once (a
    resync per chunk would compare every earlier row again). Returns (settings, rows, documents,
    resync seconds). A finished build in ``work`` of the same records is reused; a partial one, or
    one of other records (the generator changed), is started again."""
    settings = Settings(db=work / "claude-mem.db", data_dir=work / "data", chroma_mode="managed",
                        chroma_port=free_port())
    marker = work / BUILT
    # As many sessions as the size needs, so that its rows span the whole year up to now (the
    # build takes records oldest first until it has its documents; about 3.6 documents a row).
    rows_per_session = len(list(generate(n_sessions=200, seed=13, span_days=365))) / 200
    sessions = int(documents / (DOCS_PER_ROW * rows_per_session) * 1.03) + 10
    # What the build is made of: the generator's first records without the clock, and how many sessions
    # (hashing all of a million-document build's records would take longer than it saves).
    head = generate(n_sessions=sessions, seed=13, end_ms=0, span_days=365, projects=len(PROJECTS))
    fingerprint = f"{records_fingerprint([r for _, r in zip(range(1000), head, strict=False)])}:{sessions}"
    if not rebuild and reusable(work, fingerprint) and marker.exists():
        done = json.loads(marker.read_text())
        return settings, int(done["rows"]), int(done["documents"]), float(done["seconds"])
    shutil.rmtree(work, ignore_errors=True)  # a partial build, or one of other records, cannot be trusted
    work.mkdir(parents=True)
    init_db(settings.db)
    records = iter(generate(n_sessions=sessions, seed=13, end_ms=int(time.time() * 1000), span_days=365,
                            projects=len(PROJECTS)))
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
    marker.write_text(json.dumps({"rows": rows, "documents": docs, "seconds": seconds}))
    built(work, fingerprint)
    return settings, rows, docs, seconds


def worker_reconcile(settings: Settings) -> tuple[float, float]:
    """Start `memsync worker` on the synced data; (RSS MB, seconds) at the end of its first reconcile."""
    proc, seconds = reconciled_worker(settings)
    try:
        return rss_mb(proc.pid), seconds
    finally:
        proc.terminate()
        proc.wait(120)


def timed(fn: Callable[[str], object]) -> tuple[float, float]:
    """p50 and p95 ms of ``fn`` over the query list, three rounds (after one untimed round)."""
    for q in QUERIES:
        fn(q)
    ms = []
    for _ in range(3):
        for q in QUERIES:
            t = time.perf_counter()
            fn(q)
            ms.append((time.perf_counter() - t) * 1000)
    return statistics.median(ms), pct(ms, 0.95)


def newest_window(settings: Settings, days: int = 90) -> datetime:
    """The start of the default window in the data: its newest ``days`` of a year, scaled to the
    time the rows span (a year for a build that spans it: exactly the last 90 days). Builds made
    before ``build`` sized its sessions stop months ago and span 59 days (the generator's oldest
    sessions): a window measured from now would hold none of their rows, and one of 90 days from
    the newest row all of them; scaled, it holds the quarter of the documents that 90 days of a
    year of memory hold."""
    conn = sqlite3.connect(f"file:{settings.db}?mode=ro", uri=True)
    try:
        ends = [conn.execute(f"SELECT min(created_at_epoch), max(created_at_epoch) FROM {TABLES[k]}").fetchone()
                for k in KINDS]
    finally:
        conn.close()
    oldest = min(int(lo) for lo, _ in ends if lo is not None)
    newest = max(int(hi) for _, hi in ends if hi is not None)
    return datetime.fromtimestamp((newest - (newest - oldest) * min(1.0, days / 365)) / 1000, tz=UTC)


def measure(settings: Settings) -> dict[str, object]:
    """Search latencies, the index load after the server started and Chroma's RSS, on a built size
    whose server was just started. The 90-day window is the last 90 days of the data
    (``newest_window``)."""
    searcher = Searcher(settings)
    down = Searcher(settings.model_copy(update={"chroma_mode": "http", "chroma_port": free_port()}))
    project = PROJECTS[0].name
    window = Filters(date_from=newest_window(settings))
    window_project = Filters(project=project, date_from=window.date_from)
    try:
        t = time.monotonic()
        while searcher.search(SearchRequest(
            query="warm up", window_days=0)).mode is not Mode.HYBRID:  # the server loads the index
            if time.monotonic() - t > 1800:
                raise SystemExit("Chroma did not answer within 1800 s")
            time.sleep(0.2)
        load_s = time.monotonic() - t
        out: dict[str, object] = {"index load after start s": round(load_s, 1)}
        variants: dict[str, Callable[[str], object]] = {
            "hybrid all time": lambda q: searcher.search(SearchRequest(query=q, window_days=0)),
            "hybrid 90 d": lambda q: searcher.search(SearchRequest(query=q, filters=window)),
            "hybrid 90 d + project": lambda q: searcher.search(SearchRequest(query=q, filters=window_project)),
            "lexical 90 d": lambda q: searcher.search(SearchRequest(query=q, filters=window, mode=Mode.LEXICAL)),
            "fallback 90 d": lambda q: down.search(SearchRequest(query=q, filters=window)),
        }
        for name, fn in variants.items():
            p50, p95 = timed(fn)
            out[f"{name} p50/p95 ms"] = f"{p50:.0f} / {p95:.0f}"
        info = ServerInfo.read(settings.data_dir)
        out["chroma RSS MB"] = round(rss_mb(info.pid)) if info else 0
        return out
    finally:
        searcher.close()
        down.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000,1000000", help="document counts, comma-separated")
    p.add_argument("--rebuild", action="store_true", help="build every size again even when a finished build is there")
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
        settings, rows, docs, seconds = build(work, size, pool_embedder, args.rebuild)
        row: dict[str, object] = {"documents": docs, "rows": rows, "resync docs/s": round(docs / seconds),
                                  "embed docs/s (real model)": round(embed_rate)}
        server = ManagedServer(settings)
        server.ensure()
        try:
            row.update(measure(settings))
            worker_rss, reconcile_s = worker_reconcile(settings)  # the worker adopts the running server
        finally:
            server.stop()
        row["worker RSS MB"] = round(worker_rss)
        row["first reconcile s"] = round(reconcile_s, 1)
        data = settings.data_dir
        for name, path in (("chroma", settings.chroma_dir), ("state", settings.state_path),
                           ("vector copy", data / "vectors"), ("text index", data / "text-index"),
                           ("embedding store", data / "embeddings.db"), ("source", settings.db)):
            row[f"{name} B/doc"] = round(size_mb(path) * 1e6 / docs)
        table.append(row)
        print_table(table[-1:])
    print_table(table)
    write_json({"embed_docs_per_s": embed_rate, "table": table}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
