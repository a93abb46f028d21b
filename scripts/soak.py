"""Soak and fault harness: nothing may be lost while rows arrive and things break.

    .venv/bin/python -m scripts.soak [--minutes 30] [--rate 5] [--fault-every 40] [--seed 1]

For the given duration, in one run:
- a writer (thread) appends observations, summaries and prompts to a claude-mem database at
  ``--rate`` rows/s with a burst of 10x that every minute, edits and deletes some rows; every row
  carries a unique word so it can be searched for exactly;
- ``memsync worker`` (managed Chroma) as its own process;
- a search client (thread) that asks, continuously, for the unique word of a row committed more
  than ``--findable-after`` seconds ago and counts a miss when the row is not in the answer;
- a lag probe (thread) that times commit → the prompt's document in Chroma;
- a fault injector that, at random times drawn from ``--seed``: SIGKILLs the worker and starts it
  again; kills the Chroma server (the worker restarts it); holds a write lock on the database for a
  few seconds; writes a batch of hostile rows (2 MB text, invalid JSON, bytes that are not UTF-8);
  wipes the store (worker and Chroma killed, the Chroma directory deleted, the worker started
  again: it must find the empty store and re-drive every document, as after a lost volume);
  damages the vector copy (``vectors.i8`` or ``entries.bin`` replaced by a third of it, or ``entries.bin``
  overwritten with garbage) or the text index (tantivy's ``meta.json`` garbled, a segment file
  deleted or garbled) under the running worker: searches must go on, the worker must rebuild both.
At the end the writer stops, the worker catches up and reconciles (SIGUSR1), the vector copy is
complete and the text index readable again (``memsync status``), the worker stops (SIGTERM), and:
``memsync verify`` must report 0 missing / orphan / stale, no duplicates, and a vector copy that
matches Chroma; no process of the run may be left; the Chroma directory is compared with a fresh
rebuild of the same database. Prints a
summary table and writes JSON (``--out``); exit 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsync.chroma import collections as stores
from memsync.chroma.server import ServerInfo, pid_alive
from memsync.config.formats.text_index import INDEX_DIR as TEXT_INDEX_DIR
from memsync.config.formats.vector_copy import DIR as COPY_DIR
from memsync.config.formats.vector_copy import ENTRIES_FILE, VECTORS_FILE
from memsync.config.settings import Settings
from memsync.search import Searcher, SearchRequest
from memsync.worker.seed.importer import import_records, init_db
from scripts.benchlib import ROOT, free_port, print_table, settings_env, size_mb, worker_status, write_json

MEMSYNC = [sys.executable, "-m", "memsync"]
FAULTS = ("kill_worker", "kill_chroma", "write_lock", "hostile_rows", "wipe_store", "damage_copy",
          "damage_text_index")


@dataclass
class Run:
    """Shared state of one soak run (threads append; the main thread reads at the end)."""

    settings: Settings
    rng: random.Random
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    rows: dict[tuple[str, int], tuple[str, float]] = field(default_factory=dict)  # key -> (word, commit time)
    deleted: set[tuple[str, int]] = field(default_factory=set)
    written: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    queries: int = 0
    misses: list[str] = field(default_factory=list)
    modes: Counter[str] = field(default_factory=Counter)
    fallback_reasons: Counter[str] = field(default_factory=Counter)
    lags_ms: list[float] = field(default_factory=list)
    probe_queue: list[tuple[int, float]] = field(default_factory=list)  # (prompt id, commit time)
    hostile: Counter[str] = field(default_factory=Counter)
    damages: Counter[str] = field(default_factory=Counter)  # how the derived files were damaged
    errors: list[str] = field(default_factory=list)


def word(n: int) -> str:
    """A unique, searchable word for row ``n`` (letters only, so no tokenizer splits it)."""
    letters = "bcdfghjklmnpqrstvwxz"
    out = ""
    n += 20 ** 4
    while n:
        n, r = divmod(n, 20)
        out += letters[r]
    return "soak" + out


def record(kind: str, n: int, now_ms: int) -> dict[str, Any]:
    """One import record of ``kind`` carrying word(n)."""
    w = word(n)
    project = ("alpha", "beta", "gamma")[n % 3]
    session = f"{project}-soak-{n // 12}"
    if kind == "observation":
        return {"kind": kind, "project": project, "session": session, "type": "discovery", "title": f"Note {w}",
                "narrative": f"While testing the soak harness we saw {w} in the logs of the retry queue.",
                "facts": [f"{w} appears once", "the queue recovered"], "concepts": ["how-it-works"],
                "files_read": ["src/queue.py"], "files_modified": [], "prompt_number": n % 5 + 1,
                "created_at_epoch": now_ms}
    if kind == "summary":
        return {"kind": kind, "project": project, "session": session, "request": f"Investigate {w}",
                "learned": f"The {w} case is handled by the retry budget.", "created_at_epoch": now_ms}
    return {"kind": "prompt", "project": project, "session": session, "prompt_number": n % 5 + 1,
            "prompt_text": f"Why does {w} show up after a deploy?", "created_at_epoch": now_ms}


def last_ids(db: Path) -> dict[str, int]:
    """max(id) per table (the writer is the only inserter, so these are the rows just written)."""
    conn = sqlite3.connect(db, timeout=60)
    try:
        return {kind: int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0])
                for kind, table in (("observation", "observations"), ("summary", "session_summaries"),
                                    ("prompt", "user_prompts"))}
    finally:
        conn.close()


def writer(run: Run, rate: float, hostile_requests: list[str], quiet_every: float = 0, quiet_s: float = 0) -> None:
    """Append rows at ``rate``/s (a 10x burst for 5 s each minute), edit and delete some, and write
    hostile batches when the fault injector asks. Every ``quiet_every`` seconds it pauses for
    ``quiet_s`` (an agent between sessions: the off-peak time the worker compacts in)."""
    db, n, started = run.settings.db, 0, time.monotonic()
    kinds = ("prompt", "observation", "prompt", "summary", "prompt", "observation")
    while not run.stop.is_set():
        elapsed = time.monotonic() - started
        if quiet_every > 0 and elapsed % quiet_every > quiet_every - quiet_s:
            run.stop.wait(quiet_every - elapsed % quiet_every)
            continue
        burst = elapsed % 60 < 5
        batch = max(1, int(rate * (10 if burst else 1) / 5))  # five commits a second
        t = time.monotonic()
        try:
            recs = [record(kinds[(n + i) % len(kinds)], n + i, int(time.time() * 1000)) for i in range(batch)]
            for rec in recs:  # one row per commit: ids are then known exactly
                import_records(db, [rec])
                kind = rec["kind"]
                new_id = last_ids(db)[kind]
                committed = time.monotonic()
                with run.lock:
                    run.rows[(kind, new_id)] = (word(n), committed)
                    run.written[kind] += 1
                    if kind == "prompt":
                        run.probe_queue.append((new_id, committed))
                n += 1
            if run.rng.random() < 0.05:
                edit_or_delete(run)
            while hostile_requests:
                hostile_requests.pop()
                write_hostile(run)
        except sqlite3.Error as exc:  # a held lock past the busy timeout: note it and go on
            run.errors.append(f"writer: {exc}")
        time.sleep(max(0.0, 0.2 - (time.monotonic() - t)))


def log_events(log: Path, names: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """The worker's JSON log lines whose event is one of ``names``, by event."""
    out: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") in out:
            out[entry["event"]].append(entry)
    return out


def edit_or_delete(run: Run) -> None:
    """Edit an observation (its word stays) or delete a prompt (it leaves the findable set)."""
    with run.lock:
        keys = [k for k in run.rows if k not in run.deleted]
    if not keys:
        return
    kind, row_id = run.rng.choice(keys)
    conn = sqlite3.connect(run.settings.db, timeout=60)
    try:
        if kind == "observation":
            conn.execute("UPDATE observations SET narrative = narrative || ' Edited later.' WHERE id = ?", (row_id,))
            run.written["edit"] += 1
        elif kind == "prompt":
            conn.execute("DELETE FROM user_prompts WHERE id = ?", (row_id,))
            with run.lock:
                run.deleted.add((kind, row_id))
            run.written["delete"] += 1
        conn.commit()
    finally:
        conn.close()


def write_hostile(run: Run) -> None:
    """A batch of rows built to break a naive sync: huge, invalid JSON, bytes that are not UTF-8."""
    now = int(time.time() * 1000)
    base = {"kind": "observation", "project": "hostile", "session": "hostile-1", "type": "bugfix",
            "prompt_number": 1, "created_at_epoch": now, "concepts": [], "files_read": [], "files_modified": []}
    import_records(run.settings.db, [
        {**base, "title": "huge", "narrative": "word " * 400_000, "facts": ["x" * 100_000] * 5},
        {**base, "title": "empty"},
    ])
    conn = sqlite3.connect(run.settings.db, timeout=60)
    try:
        ids = [r[0] for r in conn.execute("SELECT id FROM observations WHERE project='hostile' "
                                          "ORDER BY id DESC LIMIT 2")]
        conn.execute("UPDATE observations SET facts = '{not json', concepts = '[\"unclosed' WHERE id = ?", (ids[0],))
        conn.execute("UPDATE observations SET narrative = CAST(x'fffe00c3286a756e6b' AS TEXT), "
                     "title = CAST(x'80818283' AS TEXT) WHERE id = ?", (ids[1],))
        conn.commit()
    finally:
        conn.close()
    run.hostile["rows"] += 2


def hold_write_lock(db: Path, seconds: float) -> None:
    """Hold the database's write lock (BEGIN IMMEDIATE) for ``seconds``."""
    conn = sqlite3.connect(db, timeout=60, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


def damage_copy(settings: Settings, rng: random.Random) -> str:
    """Damage every vector copy on disk as a bad disk or a stray process would; returns what was done."""
    how = rng.choice(("truncate_vectors", "truncate_entries", "garbage_entries"))
    for directory in (settings.data_dir / COPY_DIR).glob("*"):
        target = directory / (VECTORS_FILE if how == "truncate_vectors" else ENTRIES_FILE)
        try:
            size = target.stat().st_size
            if how == "garbage_entries":
                with open(target, "r+b") as fh:  # in place: readers that mapped the file see it too
                    fh.write(rng.randbytes(size))
            else:
                # Replaced by a shorter file, not truncated in place: a page of a mapping past the
                # end of a file truncated under it kills the reader with SIGBUS (any memory-mapped
                # reader, tantivy's too, and this process searches), and memsync never truncates
                # its files in place; what is checked is that a shorter file is found and rebuilt.
                tmp = target.with_name(target.name + ".damage")
                with open(target, "rb") as src:
                    tmp.write_bytes(src.read(size // 3))  # mapped-file write reviewed: a new file, then os.replace
                os.replace(tmp, target)
        except OSError:
            continue  # a copy being replaced (a compaction, a rewrite): the next one is damaged instead
    return how


def damage_text_index(settings: Settings, rng: random.Random) -> str:
    """Damage the text index (tantivy's meta.json, or one segment file deleted or garbled)."""
    path = settings.data_dir / TEXT_INDEX_DIR
    segments = sorted(p for p in path.glob("*.*") if p.suffix in (".idx", ".term", ".store", ".fast", ".pos"))
    how = rng.choice(("meta_json", "delete_segment", "garble_segment")) if segments else "meta_json"
    try:
        if how == "meta_json":
            (path / "meta.json").write_text("{damaged")
        elif how == "delete_segment":
            rng.choice(segments).unlink()
        else:
            victim = rng.choice(segments)
            with open(victim, "r+b") as fh:  # in place at the same size (write_bytes truncates first: SIGBUS)
                fh.write(rng.randbytes(victim.stat().st_size))
    except OSError:
        pass  # a segment merged away meanwhile
    return how


def derived_repaired(settings: Settings) -> bool:
    """The vector copy is complete and undamaged and the text index answers lexical searches."""
    st = memsync_json(settings, "status")
    copy, text = st.get("vector_copy", {}), st.get("text_index", {})
    return bool(copy.get("complete")) and not copy.get("damaged") and text.get("answers") == "text index"


def searcher_loop(run: Run, findable_after: float) -> None:
    """Ask for the word of a row committed more than ``findable_after`` s ago; count misses."""
    searcher = Searcher(run.settings)
    try:
        while not run.stop.is_set():
            now = time.monotonic()
            with run.lock:
                candidates = [(k, v) for k, v in run.rows.items() if now - v[1] > findable_after
                              and k not in run.deleted]
            if not candidates:
                time.sleep(0.2)
                continue
            (kind, row_id), (w, _) = run.rng.choice(candidates)
            try:
                resp = searcher.search(SearchRequest(query=w, limit=5, window_days=0))
            except Exception as exc:  # noqa: BLE001 - a search that raises is a finding, not a crash
                run.errors.append(f"search {w}: {exc!r}")
                continue
            run.queries += 1
            run.modes[resp.mode.value] += 1
            if resp.reason:
                run.fallback_reasons[resp.reason.split(":")[0][:80]] += 1
            with run.lock:
                still_there = (kind, row_id) not in run.deleted
            if still_there and not any(r.kind.value == kind and r.id == row_id for r in resp.results):
                run.misses.append(f"{kind} {row_id} ({w}): {[(r.kind.value, r.id) for r in resp.results]}")
            time.sleep(0.05)
    finally:
        searcher.close()


def lag_probe(run: Run) -> None:
    """Commit → visible in Chroma, for every prompt written (polled every 0.1 s)."""
    collection = None
    while not run.stop.is_set():
        try:
            if collection is None:
                handle = stores.connect_reader(run.settings)
                collection = stores.open_active(handle.client, run.settings, "all-MiniLM-L6-v2-int8", 384)
            with run.lock:
                pending = list(run.probe_queue[:500])
            if pending:
                got = set(collection.get(ids=[f"prompt_{i}" for i, _ in pending], include=[])["ids"])
                now = time.monotonic()
                done = {i for i, _ in pending if f"prompt_{i}" in got}
                with run.lock:
                    run.lags_ms.extend((now - t) * 1000 for i, t in pending if i in done)
                    run.probe_queue = [p for p in run.probe_queue if p[0] not in done]
        except Exception:  # noqa: BLE001 - Chroma down or restarting: probe again later
            collection = None
        time.sleep(0.1)


class WorkerProcess:
    """`memsync worker` as a child process, restartable."""

    def __init__(self, settings: Settings, log: Path) -> None:
        self.env = settings_env(settings)
        self.log = log.open("a")
        self.pids: list[int] = []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([*MEMSYNC, "worker", "--poll-interval", "0.5", "--reconcile-interval", "60"],
                                     env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.log)
        self.pids.append(self.proc.pid)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        code = self.proc.wait(120)
        self.log.close()
        return code


def wait_for(predicate: Any, seconds: float) -> bool:
    """Poll ``predicate`` every 0.2 s until it holds or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def memsync_json(settings: Settings, *args: str, port: int | None = None) -> dict[str, Any]:
    env = settings_env(settings, MEMSYNC_CHROMA_PORT=str(port or settings.chroma_port))
    r = subprocess.run([*MEMSYNC, *args, "--json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    try:
        return dict(json.loads(r.stdout))
    except ValueError:
        return {"error": r.stderr[-2000:], "exit": r.returncode}


def chroma_processes(path: Path) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"chroma run --path {path}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main(argv: list[str] | None = None) -> int:
    """Run the soak; returns 0 when every check passed."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=5.0, help="rows per second (bursts 10x for 5 s a minute)")
    p.add_argument("--fault-every", type=float, default=40.0, help="mean seconds between faults")
    p.add_argument("--findable-after", type=float, default=3.0, help="seconds after commit a row must be found")
    p.add_argument("--disk-margin", type=float, default=2.0, help="allowed Chroma size / fresh rebuild size")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--work", type=Path, default=None,
                   help="directory to keep (default: a temporary one, removed when every check passed)")
    p.add_argument("--out", type=Path, default=Path(".bench/soak.json"))
    p.add_argument("--quiet-every", type=float, default=5.0,
                   help="minutes between the writer's quiet periods (0: never quiet)")
    p.add_argument("--quiet-seconds", type=float, default=45.0, help="length of a quiet period")
    p.add_argument("--compact-fraction", type=float, default=0.01,
                   help="the worker's MEMSYNC_COMPACT_CHURN_FRACTION (default low, so that a soak compacts)")
    p.add_argument("--compact-min-churn", type=int, default=100, help="the worker's MEMSYNC_COMPACT_MIN_CHURN")
    p.add_argument("--compact-idle", type=float, default=15.0, help="the worker's MEMSYNC_COMPACT_IDLE_S")
    args = p.parse_args(argv)
    faulthandler.enable()  # a fatal signal in a native library still leaves its stack on stderr

    if args.work is not None and (args.work / "claude-mem.db").exists():
        p.error(f"{args.work} already holds a soak's database; give a new --work directory")
    work = args.work or Path(tempfile.mkdtemp(prefix="memsync-soak-"))
    settings = Settings(db=work / "claude-mem.db", data_dir=work / "data", chroma_mode="managed",
                        chroma_port=free_port(), compact_churn_fraction=args.compact_fraction,
                        compact_min_churn=args.compact_min_churn, compact_idle_s=args.compact_idle)
    init_db(settings.db)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    run = Run(settings, random.Random(args.seed))
    worker = WorkerProcess(settings, settings.data_dir / "worker.log")
    worker.start()
    if not wait_for(lambda: worker_status(settings.data_dir).get("chroma_reachable"), 180):
        print("the worker did not come up", file=sys.stderr)
        worker.stop()
        return 1
    hostile_requests: list[str] = []
    threads = [threading.Thread(target=writer, args=(run, args.rate, hostile_requests, args.quiet_every * 60,
                                                     args.quiet_seconds), daemon=True),
               threading.Thread(target=searcher_loop, args=(run, args.findable_after), daemon=True),
               threading.Thread(target=lag_probe, args=(run,), daemon=True)]
    for t in threads:
        t.start()
    started = time.monotonic()
    end = started + args.minutes * 60
    # The injector has its own generator: the writer and searcher threads draw from run.rng at
    # timing-dependent moments, so sharing it made the fault schedule differ between runs of one seed.
    fault_rng = random.Random(f"faults-{args.seed}")
    schedule = list(FAULTS)  # every kind once first, then at random
    fault_rng.shuffle(schedule)
    while time.monotonic() < end:
        gap = fault_rng.expovariate(1 / args.fault_every)
        if schedule:
            # Every kind must happen at least once however short the run and however long the
            # earlier faults took (a worker restart on a slow machine): the kinds still owed share
            # the first two thirds of what is left.
            gap = min(gap, 0.66 * (end - time.monotonic()) / len(schedule))
        time.sleep(min(gap, max(0.0, end - time.monotonic())))
        if time.monotonic() >= end:
            break
        fault = schedule.pop() if schedule else fault_rng.choice(FAULTS)
        run.faults[fault] += 1
        if fault == "kill_worker":
            worker.kill()
            worker.start()
        elif fault == "kill_chroma":
            info = ServerInfo.read(settings.data_dir)
            if info and pid_alive(info.pid):
                os.kill(info.pid, signal.SIGKILL)
        elif fault == "wipe_store":
            worker.kill()
            info = ServerInfo.read(settings.data_dir)
            if info and pid_alive(info.pid):
                os.kill(info.pid, signal.SIGKILL)
                wait_for(lambda pid=info.pid: not pid_alive(pid), 30)
            shutil.rmtree(settings.chroma_dir, ignore_errors=True)
            worker.start()
        elif fault == "write_lock":
            hold_write_lock(settings.db, fault_rng.uniform(2, 6))
        elif fault == "damage_copy":
            run.damages[damage_copy(settings, fault_rng)] += 1
        elif fault == "damage_text_index":
            run.damages[damage_text_index(settings, fault_rng)] += 1
        else:
            hostile_requests.append("batch")

    # Wind down: stop writing, let the worker catch up and reconcile, stop it.
    run.stop.set()
    for t in threads:
        t.join(60)
    # The status must be the running worker's: after a late kill_worker fault, worker.json is still
    # the killed one's until its successor writes it.
    caught_up = wait_for(lambda: (w := worker_status(settings.data_dir)).get("pid") == worker.proc.pid  # type: ignore[union-attr]
                         and w.get("pending_rows") == 0 and w.get("chroma_reachable"), 300)
    before = int(worker_status(settings.data_dir).get("reconciles", 0))
    os.kill(worker.proc.pid, signal.SIGUSR1)  # type: ignore[union-attr]
    reconciled = wait_for(lambda: int(worker_status(settings.data_dir).get("reconciles", 0)) > before, 600)
    # A copy damaged late is found by the check after that reconcile and filled at the idle steps
    # after it; a text index by the reconcile's full refresh.
    repaired = wait_for(lambda: derived_repaired(settings), 300)
    worker_exit = worker.stop()
    report = memsync_json(settings, "verify")
    status = memsync_json(settings, "status")
    leaked = [pid for pid in worker.pids if pid_alive(pid)] + chroma_processes(settings.chroma_dir)

    fresh = settings.model_copy(update={"data_dir": work / "fresh", "chroma_port": free_port()})
    rebuilt = memsync_json(fresh, "resync", port=fresh.chroma_port)
    size, fresh_size = size_mb(settings.chroma_dir), size_mb(fresh.chroma_dir)
    leaked += chroma_processes(fresh.chroma_dir)

    compactions = log_events(settings.data_dir / "worker.log", ("compacted", "space_reclaimed"))
    rebuilds = log_events(settings.data_dir / "worker.log", ("vector_copy_damaged", "text_index_rebuilding"))
    lags = sorted(run.lags_ms)
    pct = (lambda q: round(lags[min(len(lags) - 1, int(q * len(lags)))], 1)) if lags else (lambda q: None)
    failed_rows = sum(v.get("failed", 0) for v in status.get("totals", {}).values()) if "totals" in status else None
    checks = {
        "verify clean": report.get("missing") == 0 and report.get("orphan") == 0 and report.get("stale") == 0,
        "no duplicate vectors": report.get("duplicates") == 0,
        "vector copy matches Chroma": report.get("copy_drift") == 0,
        "every row findable": not run.misses,
        "no search raised": not [e for e in run.errors if e.startswith("search")],
        "caught up and reconciled": caught_up and reconciled,
        "vector copy and text index rebuilt": repaired,
        "worker exit 0": worker_exit == 0,
        "no leaked process": not leaked,
        f"chroma dir <= {args.disk_margin}x a fresh rebuild": fresh_size > 0 and size <= args.disk_margin * fresh_size,
        "every fault kind injected": all(run.faults[f] for f in FAULTS),
    }
    summary = {
        "minutes": args.minutes, "seed": args.seed, "rate": args.rate,
        "rows_written": dict(run.written), "hostile_rows": run.hostile["rows"], "faults": dict(run.faults),
        "lag_ms": {"n": len(lags), "p50": pct(0.5), "p95": pct(0.95), "max": lags[-1] if lags else None},
        "queries": run.queries, "misses": run.misses[:20], "modes": dict(run.modes),
        "fallback_reasons": dict(run.fallback_reasons), "errors": run.errors[:20],
        "verify": {k: report.get(k) for k in ("expected", "in_chroma", "missing", "orphan", "stale", "duplicates",
                                               "copy_drift", "unusable_rows", "error")},
        "failed_rows": failed_rows, "worker_exit": worker_exit, "leaked_pids": leaked,
        "compactions": len(compactions["compacted"]),
        "compacted": [{k: e.get(k) for k in ("copied", "churn", "seconds")} for e in compactions["compacted"]],
        "reclaimed_mb": round(sum(float(e.get("freed_mb") or 0) for e in compactions["space_reclaimed"]), 1),
        "damages": dict(run.damages), "rebuilds": {k: len(v) for k, v in rebuilds.items()},
        "chroma_mb": round(size, 1), "fresh_rebuild_mb": round(fresh_size, 1), "fresh_rebuild": rebuilt,
        "checks": checks, "passed": all(checks.values()), "work": str(work),
    }
    rows = [{"figure": "rows written", "value": sum(v for k, v in run.written.items() if k not in ("edit", "delete"))},
            {"figure": "edits / deletes", "value": f"{run.written['edit']} / {run.written['delete']}"},
            {"figure": "hostile rows", "value": run.hostile["rows"]},
            {"figure": "derived files damaged (rebuilds logged)",
             "value": ", ".join(f"{k} {v}" for k, v in sorted(run.damages.items()))
             + f" ({', '.join(f'{k} {len(v)}' for k, v in rebuilds.items())})"},
            {"figure": "faults", "value": ", ".join(f"{k} {v}" for k, v in sorted(run.faults.items()))},
            {"figure": "lag p50 / p95 / max ms", "value": f"{pct(0.5)} / {pct(0.95)} / {pct(1.0)}"},
            {"figure": "queries (misses)", "value": f"{run.queries} ({len(run.misses)})"},
            {"figure": "answers by mode", "value": ", ".join(f"{k} {v}" for k, v in sorted(run.modes.items()))},
            {"figure": "fallback reasons", "value": "; ".join(f"{k} ({v})" for k, v in run.fallback_reasons.items())},
            {"figure": "verify", "value": json.dumps(summary["verify"])},
            {"figure": "failed rows (poison)", "value": failed_rows},
            {"figure": "compactions (MB reclaimed)",
             "value": f"{summary['compactions']} ({summary['reclaimed_mb']})"},
            {"figure": "chroma MB (fresh rebuild)", "value": f"{size:.1f} ({fresh_size:.1f})"},
            *({"figure": f"check: {k}", "value": "ok" if v else "FAILED"} for k, v in checks.items())]
    print_table(rows)
    write_json(summary, args.out)
    if args.work is None and summary["passed"]:  # a failed run keeps its directory to look into
        shutil.rmtree(work, ignore_errors=True)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
