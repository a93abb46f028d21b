"""Where the worker's memory goes at a given size: `memsync worker` on a synced database, and the
same worker's parts measured one at a time.

    .venv/bin/python -m scripts.bench_rss --work .bench/search-100000 [--seconds 60]

``--work`` holds ``claude-mem.db`` and ``data/`` (synced Chroma, vector copy, text index), e.g. a
copy of what ``scripts/bench_search.py`` builds. The runs WRITE to it (a worker keeps its data
directory up to date, and the run without the vector copy deletes the copy): use a copy.

1. Steps, in a fresh process: RSS after each thing a worker loads (after a trim, as the worker
   trims after work: ``worker.process.memory``), in the order it does
   (Python and memsync's modules, chromadb's client, the model with one batch embedded, the sync
   records, the vector copy writer with its key index, the text index writer after a full check:
   a rebuild when the directory was moved, since the index names its database by path).
2. `memsync worker` (managed Chroma) until its first reconcile, then sampled every second for
   ``--seconds`` while ``--rate`` rows a second are committed, and until they are synced: with
   everything on, twice (the first start in a moved directory aligns the sync records with the
   store: every id read once), without the text index, without the vector copy, with neither (in
   that order: the run without the copy drops it). The second run's memory by mapping
   (``/proc/PID/smaps``: anonymous memory, and each shared library's resident pages).
Prints tables and writes JSON (default ``.bench/bench_rss.json``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memsync.config.settings import Settings
from memsync.worker.process.memory import trim
from memsync.worker.seed.demo import generate
from memsync.worker.seed.importer import import_records
from scripts.bench_lag import rss_mb
from scripts.benchlib import ROOT, free_port, print_table, reconciled_worker, settings_env, worker_status, write_json

VARIANTS = (("everything, first start here (store check: ids aligned)", {}), ("everything", {}),
            ("no text index", {"MEMSYNC_TEXT_INDEX": "false"}),
            ("no vector copy", {"MEMSYNC_VECTOR_COPY": "false"}),
            ("neither", {"MEMSYNC_TEXT_INDEX": "false", "MEMSYNC_VECTOR_COPY": "false"}))


def by_mapping(pid: int, top: int = 12) -> list[dict[str, Any]]:
    """Resident MB per mapping of a process (anonymous memory together), largest first."""
    sizes: dict[str, int] = collections.defaultdict(int)
    name = "?"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            path = head[5] if len(head) > 5 else ""
            name = Path(path).name if path.startswith("/") else "anonymous (heaps, arenas, stacks)"
        elif line.startswith("Rss:"):
            sizes[name] += int(head[1])
    ranked = sorted(sizes.items(), key=lambda kv: -kv[1])
    rows = [{"mapping": n, "RSS MB": round(kb / 1024, 1)} for n, kb in ranked[:top]]
    rows.append({"mapping": f"the other {max(0, len(ranked) - top)}",
                 "RSS MB": round(sum(kb for _, kb in ranked[top:]) / 1024, 1)})
    return rows


def steps(settings: Settings) -> list[dict[str, Any]]:
    """RSS after each thing a worker loads (this process; call it in a fresh one)."""
    out: list[dict[str, Any]] = []
    last = 0.0

    def note(what: str, **extra: Any) -> None:
        nonlocal last
        trim()  # as the worker does after a step that did work (worker.process.memory)
        now = rss_mb(os.getpid())
        out.append({"step": what, "RSS MB": round(now, 1), "added MB": round(now - last, 1), **extra})
        last = now

    note("Python, numpy, memsync settings")
    import chromadb  # noqa: F401 - what the import costs is the measurement

    note("chromadb client libraries")
    from memsync.embedding import make_embedder
    from memsync.worker.loop import daemon  # noqa: F401 - every worker module
    from memsync.worker.seed.demo import generate

    note("memsync worker modules")
    embedder = make_embedder(settings)
    texts = [str(r.get("narrative") or r.get("prompt_text") or r.get("learned") or "")
             for r in generate(n_sessions=40, seed=3)][:256]
    embedder.embed(texts)
    note("model (onnxruntime) + one batch of 256 texts")
    from memsync.worker.rows.source import SourceReader
    from memsync.worker.rows.state import ACTIVE_COLLECTION, SyncState

    state = SyncState(settings.state_path)
    collection = state.get_meta(ACTIVE_COLLECTION)
    with SourceReader.open(settings) as reader:
        max_ids = reader.max_ids()
    note("sync records and the source database opened")
    from memsync.worker.stores.vectorcopy import open_writer

    writer = None
    if collection:
        writer = open_writer(settings, state, collection, embedder.model_id, embedder.dimension)
    note("vector copy writer (key index loaded)", documents=len(writer._keys) if writer else 0,
         key_index_MB=round(writer._keys.nbytes / 2**20, 1) if writer else 0)
    from memsync.worker.stores.textsync import TextIndexWriter

    text = TextIndexWriter(settings)
    with SourceReader.open(settings) as reader:
        text.refresh(reader, full=True)
    note("text index writer after a full check", rows=sum(max_ids.values()))
    text.close()
    if writer is not None:
        writer.close()
    state.close()
    return out


def run_worker(settings: Settings, env_extra: dict[str, str], seconds: float, rate: float) -> dict[str, Any]:
    """`memsync worker` until its first reconcile, then RSS sampled every second for ``seconds``
    while ``rate`` rows a second are committed (one transaction each), and until they are synced."""
    proc, reconciled = reconciled_worker(settings, **env_extra)
    records = list(generate(n_sessions=max(1, int(seconds * rate) // 8 + 1), seed=9))
    try:
        samples = [rss_mb(proc.pid)]
        start, rows = time.monotonic(), 0
        while time.monotonic() - start < seconds or worker_status(settings.data_dir).get("pending_rows", 1):
            if time.monotonic() - start > seconds + 600:
                raise SystemExit("the worker did not catch up within 10 minutes")
            if rows < seconds * rate and rows < (time.monotonic() - start) * rate:
                import_records(settings.db, [{**records[rows % len(records)],
                                              "created_at_epoch": int(time.time() * 1000), "created_at": None}])
                rows += 1
                continue
            samples.append(rss_mb(proc.pid))
            time.sleep(min(1.0, 1 / rate) if rate else 1.0)
        return {"first reconcile s": round(reconciled, 1), "RSS after it MB": round(samples[0]),
                "rows written": rows, "RSS max MB": round(max(samples)), "RSS last MB": round(samples[-1]),
                "mappings": by_mapping(proc.pid)}
    finally:
        proc.terminate()
        proc.wait(120)


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=5.0, help="rows committed per second while sampling")
    p.add_argument("--variants", default=",".join(str(i) for i in range(len(VARIANTS))),
                   help="which worker runs, by number (0: first start, 1: everything, ...)")
    p.add_argument("--no-steps", action="store_true", help="skip part 1")
    p.add_argument("--steps-only", action="store_true", help=argparse.SUPPRESS)  # the child of part 1
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_rss.json")
    args = p.parse_args(argv)
    work = args.work.resolve()
    settings = Settings(db=work / "claude-mem.db", data_dir=work / "data", chroma_mode="managed",
                        chroma_port=free_port())
    if args.steps_only:
        print(json.dumps(steps(settings)))
        return 0
    step_rows: list[dict[str, Any]] = []
    if not args.no_steps:
        child = subprocess.run([sys.executable, "-m", "scripts.bench_rss", "--work", str(work), "--steps-only"],
                               cwd=ROOT, env=settings_env(settings), capture_output=True, text=True, check=True)
        step_rows = json.loads(child.stdout.strip().splitlines()[-1])
        print_table(step_rows)
    runs = []
    mappings: list[dict[str, Any]] = []
    for name, extra in (VARIANTS[int(i)] for i in args.variants.split(",")):
        result = run_worker(settings, extra, args.seconds, args.rate)
        runs.append({"worker": name, **{k: v for k, v in result.items() if k != "mappings"}})
        print_table(runs[-1:])
        if name == "everything":  # the second run: the steady state
            mappings = result["mappings"]
            print_table(mappings)
    print_table(runs)
    write_json({"work": str(work), "steps": step_rows, "workers": runs, "mappings": mappings}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
