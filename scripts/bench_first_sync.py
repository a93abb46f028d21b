"""Time to useful: how soon a new user's year of memory answers by meaning, with the real model.

    .venv/bin/python -m scripts.bench_first_sync [--rows 20000] [--unique-texts] [--code DIR] [--out FILE]

1. Generates a claude-mem database of ``--rows`` rows spread over the last 365 days (the demo
   generator, ending now; ``--unique-texts``: every text made distinct, see :func:`unique_texts`),
   and counts which share of its documents the default window (the newest ``window_days``, 90) holds.
2. Starts ``memsync worker`` on it (managed Chroma, the bundled model, a fresh data directory) and,
   every ``--poll`` seconds until its first pass is through, asks:
   - the ground truth, from the worker's own records (read only): is every row of the window, and
     every row at all, synced?
   - this tree's search library (real model, real store): a default-window search and an all-time
     search. The first answer in ``hybrid`` with no ``coverage`` (nothing missing) is the time to a
     hybrid answer over that scope. Every such answer is checked against the ground truth read
     right after it: a search that calls a partial semantic side complete is counted (must be 0).
     A scope answered complete (and so agreed) is not asked again: nothing is inserted during the
     run, so a later answer cannot be false, and its searches would take the cores the first
     sync's rate is measured on (at 20,000 rows this process took 3.9 % of one core over the
     first sync when it asked both scopes to the end, 2.6 % without).
3. The raw embedding rate of the same distinct texts (a sample of ``--raw-sample``, sorted by
   length, in chunks of ``batch_size``: an upper bound, as ``bench_sync``'s (a') row), half before
   the worker and half after it, against the first pass's rate: embedded texts over the pass's time.
4. Goals: the window answers by meaning within 1.2 × (its share of documents × the full first sync)
   + 60 s; the first sync embeds at least 0.9 × the raw rate.

``--code DIR`` runs the worker of another checkout (for example the commit before the first sync
went newest first) for a before/after: its searches are not asked (an older search has no
``coverage``), the ground truth times it. Prints a table and writes JSON
(default ``.bench/bench_first_sync.json``); exit 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memsync.config.claude_mem.schema import KINDS, SUMMARY_FIELDS, TABLES
from memsync.config.settings import Settings
from memsync.worker.rows.documents import RowError, build_documents
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import ACTIVE_COLLECTION, now_ms
from memsync.worker.seed.demo import generate
from memsync.worker.seed.importer import import_records, init_db
from scripts.bench_sync import raw_embedding_seconds
from scripts.benchlib import ROOT, free_port, print_table, settings_env, worker_status, write_json
from scripts.pkgmap import package_dir

DAY_MS = 86_400_000


# The demo records' texts that become documents (facts, a list, apart); the summary's are the schema's.
TEXT_FIELDS = ("title", "subtitle", "narrative", "text", "prompt_text", *SUMMARY_FIELDS)


def unique_texts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with every non-empty text (facts included) ending in a reference of its own, as
    a real memory's texts carry commit hashes, line numbers and ticket ids: the demo generator
    draws its texts from small pools, so its documents repeat texts (about 3.9 per distinct text
    at 20,000 rows), and each repeat is a Chroma insert that embeds nothing."""
    n = 0

    def ref(text: str) -> str:
        nonlocal n
        n += 1
        return f"{text} (ref {n * 2654435761 % 2**32:08x})"

    out = []
    for record in records:
        record = dict(record)
        for key in TEXT_FIELDS:
            if record.get(key):
                record[key] = ref(record[key])
        if record.get("facts"):
            record["facts"] = [ref(f) for f in record["facts"]]
        out.append(record)
    return out


def make_database(path: Path, rows: int, seed: int, unique: bool = False) -> None:
    """Exactly ``rows`` rows of the demo generator over the last 365 days: the newest of a generous
    run (sessions hold about 8 rows; the generator goes oldest first); ``unique``: every text made
    distinct (:func:`unique_texts`)."""
    init_db(path)
    end = now_ms()
    sessions = rows // 4 + 10
    per_session = len(list(generate(n_sessions=sessions, seed=seed, end_ms=end, span_days=365))) / sessions
    sessions = int(rows / per_session * 1.02) + 2  # a year's worth, a few rows over: the oldest are cut
    records = list(generate(n_sessions=sessions, seed=seed, end_ms=end, span_days=365))[-rows:]
    import_records(path, unique_texts(records) if unique else records)


def documents(settings: Settings, since_ms: int) -> tuple[list[str], int]:
    """Every document text of the database, and how many belong to rows created since ``since_ms``."""
    texts: list[str] = []
    recent = 0
    with SourceReader(settings.db) as reader:
        for kind in KINDS:
            for batch in reader.iter_rows(kind, settings.read_batch_rows):
                for row in batch:
                    try:
                        docs = [d.text for d in build_documents(row)]
                    except RowError:
                        continue
                    texts += docs
                    if int(row.values.get("created_at_epoch") or 0) >= since_ms:
                        recent += len(docs)
    return texts, recent


def unsynced(settings: Settings, since_ms: int | None) -> int | None:
    """Rows (created since ``since_ms``; None: all) without a synced record in the worker's active
    generation: the ground truth, read only. None before the worker has records."""
    if not settings.state_path.exists():
        return None
    conn = sqlite3.connect(f"file:{settings.db}?mode=ro", uri=True, timeout=10)
    try:
        conn.execute("ATTACH DATABASE ? AS st", (f"file:{settings.state_path}?mode=ro",))
        found = conn.execute("SELECT value FROM st.meta WHERE key = ?", (ACTIVE_COLLECTION,)).fetchone()
        if found is None:
            return None
        missing = 0
        for kind in KINDS:
            where = "" if since_ms is None else " AND t.created_at_epoch >= :since"
            missing += int(conn.execute(
                f"SELECT COUNT(*) FROM {TABLES[kind]} t WHERE NOT EXISTS (SELECT 1 FROM st.rows r WHERE "
                f"r.collection = :c AND r.kind = :k AND r.source_id = t.id AND r.status = 'synced'){where}",
                {"c": found[0], "k": kind.value, "since": since_ms}).fetchone()[0])
        return missing
    except sqlite3.OperationalError:  # the worker has not created its tables yet
        return None
    finally:
        conn.close()


def package_tree(code: Path, into: Path) -> Path:
    """A directory that imports ``memsync`` from checkout ``code`` (its package map), for PYTHONPATH."""
    for name, folder in package_dir(code).items():
        target = into.joinpath(*name.split("."))
        if name == "memsync":
            target.mkdir(parents=True)
            for entry in (code / folder).iterdir():
                (target / entry.name).symlink_to(entry)
        else:
            target.symlink_to(code / folder)
    return into


class Searches:
    """This tree's search library on the worker's data: a default-window and an all-time search."""

    def __init__(self, settings: Settings) -> None:
        from memsync.search import Searcher

        self.engine = Searcher(settings)

    def covered(self, window_days: int | None) -> tuple[bool, dict[str, Any] | None]:
        """Whether the search answered hybrid with nothing missing, and its coverage."""
        from memsync.search import Mode, SearchRequest

        resp = self.engine.search(SearchRequest(query="why did the build fail after the refactor",
                                                window_days=window_days))
        cov = resp.to_json()["coverage"]
        return resp.mode is Mode.HYBRID and cov is None, cov

    def close(self) -> None:
        """Release the engine."""
        self.engine.close()


def watch(settings: Settings, proc: subprocess.Popen[bytes], t0: float, window_from: int, poll: float,
          ask_search: bool) -> dict[str, Any]:
    """Poll until the worker's first pass is through and both scopes are covered; the times (s
    from the worker's start) of each first, and the searches that called a partial side complete."""
    times: dict[str, float | None] = {"pass_started": None, "window_truth": None, "all_truth": None,
                                      "window_search": None, "all_search": None, "first_pass_done": None}
    false_complete = 0
    searches: Searches | None = None
    coverage_seen: list[dict[str, Any]] = []
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"bench_first_sync: the worker exited with {proc.returncode}")
            now = time.monotonic() - t0
            if now > 4 * 3600:
                raise SystemExit("bench_first_sync: the first sync took over 4 hours")
            status = worker_status(settings.data_dir)
            if times["pass_started"] is None and status.get("phase") in ("first pass", "following"):
                times["pass_started"] = now
            if ask_search and searches is None and status.get("phase") in ("first pass", "following"):
                searches = Searches(settings)
            if searches is not None:
                for scope, days in (("window", None), ("all", 0)):
                    if times[f"{scope}_search"] is not None:
                        # Rows only get synced here (nothing is inserted), so once a scope answered
                        # complete and the truth agreed, every later answer is true as well; asking
                        # on would only take the cores the rate is measured on.
                        continue
                    ok, cov = searches.covered(days)
                    if cov is not None and len(coverage_seen) < 400:
                        coverage_seen.append({"t": round(now, 1), "scope": scope, **cov})
                    if ok:
                        # The truth read after the answer can only have grown since: it must agree.
                        if unsynced(settings, window_from if days is None else None) != 0:
                            false_complete += 1
                        elif times[f"{scope}_search"] is None:
                            times[f"{scope}_search"] = time.monotonic() - t0
            for scope, since in (("window", window_from), ("all", None)):
                if times[f"{scope}_truth"] is None and unsynced(settings, since) == 0:
                    times[f"{scope}_truth"] = time.monotonic() - t0
            if times["first_pass_done"] is None and status.get("reconciles"):
                times["first_pass_done"] = time.monotonic() - t0
            done = times["first_pass_done"] is not None and times["all_truth"] is not None
            if done and (not ask_search or times["all_search"] is not None):
                break
            time.sleep(poll)
    finally:
        if searches is not None:
            searches.close()
    return {"times_s": {k: None if v is None else round(v, 1) for k, v in times.items()},
            "false_complete": false_complete, "coverage_samples": coverage_seen[::max(1, len(coverage_seen) // 40)]}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000, help="rows in the generated database")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--raw-sample", type=int, default=4000, help="distinct texts timed for the raw rate")
    parser.add_argument("--unique-texts", action="store_true",
                        help="end every text with a reference of its own, so that no two documents share a text "
                             "(the demo generator's texts repeat)")
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between looks")
    parser.add_argument("--code", type=Path, default=None, help="run the worker of this checkout (before/after)")
    parser.add_argument("--out", type=Path, default=Path(".bench/bench_first_sync.json"))
    args = parser.parse_args(argv)

    from memsync.worker.process import logs

    logs.configure(level="warning")
    with tempfile.TemporaryDirectory(prefix="memsync-first-sync-") as tmp:
        settings = Settings(db=Path(tmp) / "claude-mem.db", data_dir=Path(tmp) / "data", chroma_mode="managed",
                            chroma_port=free_port())
        make_database(settings.db, args.rows, args.seed, args.unique_texts)
        window_from = now_ms() - settings.window_days * DAY_MS
        texts, window_docs = documents(settings, window_from)
        distinct = sorted(set(texts))
        sample = distinct[::max(1, len(distinct) // args.raw_sample)]
        raw_s = raw_embedding_seconds(settings, sample, 0, 2)

        env = settings_env(settings)
        if args.code is not None:
            env["PYTHONPATH"] = str(package_tree(args.code.resolve(), Path(tmp) / "code"))
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "memsync", "worker"], env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            seen = watch(settings, proc, t0, window_from, args.poll, ask_search=args.code is None)
            totals = dict(worker_status(settings.data_dir).get("totals") or {})
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        raw_s += raw_embedding_seconds(settings, sample, 1, 2)

    times = seen["times_s"]
    share = window_docs / len(texts)
    full = times["first_pass_done"]
    pass_s = full - times["pass_started"]
    embedded = int(totals.get("embedded", 0))
    sync_rate, raw_rate = embedded / pass_s, len(sample) / raw_s
    window_at = times["window_search"] if args.code is None else times["window_truth"]
    all_at = times["all_search"] if args.code is None else times["all_truth"]
    window_goal = 1.2 * share * full + 60
    goals = {"window_within_goal": window_at is not None and window_at <= window_goal,
             "rate_at_least_0.9_raw": sync_rate >= 0.9 * raw_rate, "no_false_complete": seen["false_complete"] == 0}
    rows = [
        {"measure": "rows / documents / distinct texts", "value": f"{args.rows} / {len(texts)} / {len(distinct)}"},
        {"measure": f"default window ({settings.window_days} days): share of documents", "value": f"{share:.3f}"},
        {"measure": "worker start -> first pass started (s)", "value": times["pass_started"]},
        {"measure": "-> first hybrid answer, default window (s)", "value": window_at,
         "goal": f"<= {window_goal:.0f}"},
        {"measure": "-> first hybrid answer, all time (s)", "value": all_at},
        {"measure": "-> first pass through (s)", "value": full},
        {"measure": "ground truth: window / all synced at (s)",
         "value": f"{times['window_truth']} / {times['all_truth']}"},
        {"measure": "first pass: texts embedded per s", "value": f"{sync_rate:.1f}",
         "goal": f">= {0.9 * raw_rate:.1f}"},
        {"measure": f"raw rate, {len(sample)} of the same distinct texts", "value": f"{raw_rate:.1f}"},
        {"measure": "searches that called a partial side complete", "value": seen["false_complete"], "goal": "0"},
    ]
    print_table(rows)
    write_json({"rows": args.rows, "unique_texts": args.unique_texts,
                "code": str(args.code) if args.code else "this tree", "documents": len(texts),
                "distinct_texts": len(distinct), "window_days": settings.window_days, "window_share": round(share, 4),
                "embedded": embedded, "sync_rate": round(sync_rate, 2), "raw_rate": round(raw_rate, 2),
                "raw_sample": len(sample), "window_goal_s": round(window_goal, 1), **seen, "goals": goals,
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}, args.out)
    return 0 if all(goals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
