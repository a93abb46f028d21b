"""Search latency at 100,000 rows: hybrid, lexical-only and the fallback path, against the raw
Chroma top-100 query measured in the same run.

    .venv/bin/python -m scripts.bench_search [--rows 100000] [--queries 60] [--out FILE]

Builds a deterministic synthetic claude-mem database (the demo generator, spread over a year, so
the 90-day window holds about a quarter of it) and syncs it into a managed Chroma server with the
real sync code. To keep the build within minutes, document vectors come from a pool: 2,000 real
MiniLM embeddings of demo texts; each document mixes two pool vectors chosen by a hash of its text,
plus noise, so vectors spread like real ones (one pool vector plus a little noise made clusters
of near-duplicates that Chroma's HNSW search could not leave: it returned at most 177 neighbours).
Meaningless for quality, which bench_quality measures. Queries are embedded by the real model inside every timed search.
Variants: no window, the 90-day window, window + project filter; hybrid, lexical only, and the
fallback (Chroma unreachable); lexical only also without memsync's text index (FTS5 alone), to
show what the index buys in the same run. ``--query-model local-multilingual`` embeds the timed
queries with the multilingual model instead (latency only, see ``QueryTiming``). Writes JSON
(default ``.bench/bench_search.json``). The built data is kept in ``--work`` and reused while it was
made from the records the generator makes now (``benchlib.reusable``).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memsync.chroma import collections as stores
from memsync.chroma.server import ManagedServer
from memsync.config.settings import LOCAL_MODEL, Settings
from memsync.embedding import get_embedder
from memsync.search import Filters, Mode, Searcher, SearchRequest
from memsync.worker.pipeline.resync import resync
from memsync.worker.rows.state import SyncState
from memsync.worker.seed.demo import PROJECTS, generate
from memsync.worker.seed.importer import import_records, init_db
from memsync.worker.stores.textsync import TextSync
from memsync.worker.stores.vectorcopy import fill_from_store, open_writer
from scripts.benchlib import ROOT, built, free_port, print_table, records_fingerprint, reusable, write_json

QUERIES = (
    "connection pool exhausted under load", "refund endpoint returns 500", "flaky test timing",
    "dark mode colors", "webhook signature validation", "retry queue backoff", "JWT expiry bug",
    "migration failed on deploy", "slow dashboard render", "invoice PDF export fonts", "memory leak in worker",
    "why was the cache invalidated", "currency rounding error", "idempotency key collision",
    "vite build config", "react state update loop", "database index missing", "rate limiting strategy",
)


class PoolEmbedder:
    """Vectors mixed from a pool of real ones by text hash (see module docstring)."""

    def __init__(self, pool: npt.NDArray[np.float32]) -> None:
        self.pool = pool
        self.model_id = "all-MiniLM-L6-v2-int8"
        self.dimension = pool.shape[1]

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            h = int.from_bytes(hashlib.blake2b(t.encode("utf-8", "replace"), digest_size=8).digest(), "little")
            rng = np.random.default_rng(h)
            n = len(self.pool)
            v = (self.pool[h % n] + 0.7 * self.pool[(h >> 24) % n]
                 + rng.standard_normal(self.dimension).astype(np.float32) * 0.03)
            out[i] = v / np.linalg.norm(v)
        return out


def generated(rows: int, end_ms: int) -> list[dict[str, object]]:
    """The build's ``rows`` records, the newest at ``end_ms`` (0: without the clock, to fingerprint)."""
    records = []
    for rec in generate(n_sessions=rows // 8 + 1, seed=11, end_ms=end_ms, span_days=365, projects=len(PROJECTS)):
        records.append(rec)
        if len(records) >= rows:
            break
    return records


def build(work: Path, rows: int) -> Settings:
    """Database + synced managed Chroma in ``work`` (reused when made from the same records:
    ``benchlib.reusable``)."""
    settings = Settings(db=work / "claude-mem.db", data_dir=work / "data", chroma_mode="managed",
                        chroma_port=free_port())
    fingerprint = records_fingerprint(generated(rows, 0))
    if not reusable(work, fingerprint):
        work.mkdir(parents=True, exist_ok=True)
        init_db(settings.db)
        records = generated(rows, int(time.time() * 1000))
        import_records(settings.db, records)
        real = get_embedder(settings.embedding_model, 32, 256, 0)
        texts = [str(r.get("narrative") or r.get("prompt_text") or r.get("learned") or "") for r in records[:2000]]
        pool = real.embed(texts)
        t = time.monotonic()
        result = resync(settings, embedder=PoolEmbedder(pool))
        print(f"built: {rows} rows, {result.written} documents in {time.monotonic() - t:.0f} s")
        built(work, fingerprint)
    return settings


def ensure_vector_copy(settings: Settings, server: ManagedServer) -> float | None:
    """Fill the worker's vector copy from Chroma when the work dir was built without one (as a worker
    does for such a data directory); returns the seconds it took, None when it was there."""
    model, dim = "all-MiniLM-L6-v2-int8", 384
    with SyncState(settings.state_path) as state, stores.connect(settings, server=server) as handle:
        collection = stores.open_collection(handle.client, settings, model, dim)
        writer = open_writer(settings, state, str(collection.name), model, dim)
        assert writer is not None
        try:
            if writer.complete:
                if writer.needs_reorder():  # built before the copy was kept in date order: as a worker's idle step does
                    t = time.monotonic()
                    writer.reorder()
                    print(f"vector copy put in date order in {time.monotonic() - t:.1f} s")
                return None
            t = time.monotonic()
            fill_from_store(writer, collection, state.acknowledged_ids(str(collection.name)))
            writer.reorder()
            print(f"vector copy filled from Chroma in {time.monotonic() - t:.1f} s")
            return round(time.monotonic() - t, 1)
        finally:
            writer.close()


class QueryTiming:
    """Queries embedded by the multilingual model (``search_embedding_threads``, as a search server
    does) under the pool's model id, so the same store answers them: what a search with
    ``local-multilingual`` costs at this size, not what it finds (a 100k-row build with that model
    would take hours on two cores)."""

    def __init__(self, settings: Settings) -> None:
        from memsync.embedding.multilingual import get_multilingual

        self.inner = get_multilingual(settings.search_embedding_threads, "queries")
        self.model_id = LOCAL_MODEL  # the pool's, which the store recorded
        self.dimension = self.inner.dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The multilingual model's query vectors."""
        return self.inner.embed(texts)


def timed(fn: Callable[[], object], n: int) -> tuple[list[float], dict[str, float]]:
    """Milliseconds of n calls, and the median of each stage the responses report."""
    out = []
    stages: dict[str, list[float]] = {}
    for _ in range(n):
        t = time.perf_counter()
        resp = fn()
        out.append((time.perf_counter() - t) * 1000)
        for stage, ms in getattr(resp, "timings_ms", {}).items():
            stages.setdefault(stage, []).append(ms)
    return out, {k: round(statistics.median(v), 1) for k, v in stages.items() if k != "total"}


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=3, help="rounds over the query list")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_search.json")
    p.add_argument("--query-model", choices=("local", "local-multilingual"), default="local",
                   help="the model that embeds each timed query; local-multilingual times multilingual-e5 "
                   "queries against the same store (its vectors stay the pool's: latency only)")
    args = p.parse_args(argv)
    work = args.work or ROOT / ".bench" / f"search-{args.rows}"
    settings = build(work, args.rows)
    text = TextSync(settings)  # the worker's text index (a work dir built before it existed gets one)
    text.step(force_full=True)
    text.close()
    server = ManagedServer(settings)
    server.ensure()
    fill_s = ensure_vector_copy(settings, server)
    query_model = QueryTiming(settings) if args.query_model == "local-multilingual" else None
    searcher = Searcher(settings, embedder=query_model)
    no_copy = Searcher(settings.model_copy(update={"vector_copy": False}), embedder=query_model)  # Chroma only
    down = Searcher(settings.model_copy(update={"chroma_mode": "http", "chroma_port": free_port()}),
                    embedder=query_model)
    fts5 = Searcher(settings.model_copy(update={"text_index": False}))  # the lexical side without it
    project = PROJECTS[0].name
    try:
        deadline = time.monotonic() + 300
        # The server loads the index on the first query (seconds at this size; searches meanwhile
        # answer lexical_fallback): wait until a hybrid answer comes from Chroma itself (all time:
        # a windowed search is answered by the vector copy and would not wait for the server).
        while searcher.search(SearchRequest(query="warm up", window_days=0)).mode is not Mode.HYBRID:
            if time.monotonic() > deadline:
                raise SystemExit("Chroma did not answer within 300 s")
            time.sleep(1)
        vectors = {q: searcher.vector.embed(q) for q in QUERIES}
        queries = list(QUERIES) * args.queries
        it = iter(range(10**9))

        def nxt() -> str:
            return queries[next(it) % len(queries)]

        variants: dict[str, Callable[[], object]] = {
            "raw Chroma top-100 (baseline)": lambda: searcher.vector.nearest(vectors[nxt()], 100),
            "hybrid, all time": lambda: searcher.search(SearchRequest(query=nxt(), window_days=0)),
            "hybrid, 90-day window": lambda: searcher.search(SearchRequest(query=nxt())),
            "hybrid, window + project": lambda: searcher.search(SearchRequest(
                query=nxt(), filters=Filters(project=project))),
            "without the vector copy: hybrid, window + project": lambda: no_copy.search(
                SearchRequest(query=nxt(), filters=Filters(project=project))),
            "lexical only, all time": lambda: searcher.search(SearchRequest(
                query=nxt(), window_days=0, mode=Mode.LEXICAL)),
            "lexical only, window + project": lambda: searcher.search(SearchRequest(
                query=nxt(), filters=Filters(project=project), mode=Mode.LEXICAL)),
            "lexical only, FTS5 alone, all time": lambda: fts5.search(SearchRequest(
                query=nxt(), window_days=0, mode=Mode.LEXICAL)),
            "lexical only, FTS5 alone, window + project": lambda: fts5.search(
                SearchRequest(query=nxt(), filters=Filters(project=project), mode=Mode.LEXICAL)),
            "fallback (Chroma down), all time": lambda: down.search(SearchRequest(query=nxt(), window_days=0)),
            "fallback (Chroma down), 90-day window": lambda: down.search(SearchRequest(query=nxt())),
            "fallback, window + project": lambda: down.search(SearchRequest(
                query=nxt(), filters=Filters(project=project))),
        }
        assert down.search(SearchRequest(query="x")).mode is Mode.LEXICAL_FALLBACK
        table = []
        for name, fn in variants.items():
            fn()
            ms, stages = timed(fn, len(queries))
            table.append({"variant": name, "n": len(ms), "p50_ms": round(statistics.median(ms), 1),
                          "p95_ms": round(pct(ms, 0.95), 1), "max_ms": round(max(ms), 1),
                          "stages_p50": " ".join(f"{k}={v}" for k, v in stages.items())})
        base = table[0]["p50_ms"]
        for row in table:
            row["p50_vs_raw"] = round(float(row["p50_ms"]) / float(base), 1)  # type: ignore[arg-type]
    finally:
        searcher.close()
        no_copy.close()
        down.close()
        fts5.close()
        server.stop()
    print_table(table)
    hybrid_p95 = max(float(r["p95_ms"]) for r in table if str(r["variant"]).startswith("hybrid"))  # type: ignore[arg-type]
    fallback_p95 = max(float(r["p95_ms"]) for r in table if str(r["variant"]).startswith("fallback"))  # type: ignore[arg-type]
    print(f"targets: hybrid p95 {hybrid_p95:.1f} ms (<= 60), fallback p95 {fallback_p95:.1f} ms (<= 15)")
    write_json({"rows": args.rows, "table": table, "hybrid_p95_ms": hybrid_p95, "fallback_p95_ms": fallback_p95,
                "vector_copy_fill_s": fill_s}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
