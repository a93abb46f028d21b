"""Per-prompt injection latency: the hook's wall time as Claude Code pays it, and the worker's extra
memory for answering it.

Each hook run is a new process of the installed executable (``.venv/bin/memsync claude-code
inject --data-dir D``, the command `claude-code swap` installs), timed from spawn to exit, the
payload on stdin. Conditions, in this order:

1. nothing listening (no socket in the data directory);
2. ``MEMSYNC_INJECT=false`` in the hook's environment (exits before reading);
3. a slow worker: a stand-in socket in this process that accepts and never answers (the client
   gives up at 1 s);
4. the worker running (demo database, managed Chroma, warm): prompts one after another, half
   that the memory answers and half that it does not;
5. four hooks at once (4 prompts started together, each timed);
6. while the worker embeds a 1,000-row burst committed by another process.

Memory: the worker's RSS (``/proc/PID/status`` VmRSS; the Chroma server is its own process) with
``inject`` off, and with it on after the warm-up and after the prompts of condition 4; the
difference is the listener's extra memory (its Searcher, the query model, the token counter).

    .venv/bin/python -m scripts.bench_inject_latency [--n 60] [--out .bench/bench_inject_latency.json]

Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from memsync.config.inject_channel import socket_path
from memsync.config.settings import Settings
from memsync.worker.demo import generate
from memsync.worker.importer import import_records, init_db
from scripts.benchlib import ROOT, free_port, print_table, settings_env, worker_status, write_json

HOOK = str(Path(sys.executable).parent / "memsync")
ANSWERED = ("why did the refund endpoint get duplicate events from the message broker?",
            "what was the root cause of the race condition in the idempotency keys?",
            "how did we fix the connection pool timeout in payments-api?",
            "what did we decide about the currency rounding in invoices?")
SILENT = ("yes, continue", "run the tests and tell me what fails",
          "rename this function to parse_config and update the callers",
          "/compact")


def payload(prompt: str, cwd: Path, session: str) -> bytes:
    """A UserPromptSubmit hook payload as Claude Code sends it."""
    return json.dumps({"session_id": session, "transcript_path": str(cwd / "t.jsonl"), "cwd": str(cwd),
                       "permission_mode": "default", "hook_event_name": "UserPromptSubmit",
                       "prompt": prompt}).encode()


def hook(data_dir: Path, stdin: bytes, env: dict[str, str] | None = None) -> tuple[float, bool]:
    """One hook process: its wall time (s) and whether it printed a context."""
    started = time.perf_counter()
    done = subprocess.run([HOOK, "claude-code", "inject", "--data-dir", str(data_dir)], input=stdin,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=30)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the hook exited {done.returncode}: {done.stderr.decode()}")
    return wall, bool(done.stdout)


def summary(name: str, walls: list[float], injected: int | None = None) -> dict[str, Any]:
    """p50 / p95 / max in ms of ``walls``."""
    ordered = sorted(walls)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    row: dict[str, Any] = {"condition": name, "runs": len(walls), "p50 ms": round(statistics.median(walls) * 1000),
                           "p95 ms": round(p95 * 1000), "max ms": round(max(walls) * 1000)}
    if injected is not None:
        row["injected"] = injected
    return row


def rss_mb(pid: int) -> float:
    """A process's resident set (VmRSS), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


class SlowListener:
    """A socket that accepts and never answers: a worker stuck in a search."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(16)
        self.held: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                self.held.append(self.sock.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return  # closed

    def close(self) -> None:
        self.stop.set()
        for c in self.held:
            c.close()
        self.sock.close()


class WorkerRun:
    """`memsync worker` as its own process, its JSON log lines in a file."""

    def __init__(self, settings: Settings, log: Path, **env: str) -> None:
        (settings.data_dir / "worker.json").unlink(missing_ok=True)
        self.settings, self.log = settings, log
        self._fh = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "memsync", "worker"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=self._fh, env=settings_env(settings, **env))

    def wait(self, what: str, ready: Any, timeout: float = 900) -> None:
        t = time.monotonic()
        while not ready():
            if self.proc.poll() is not None or time.monotonic() - t > timeout:
                self.stop()
                raise SystemExit(f"the worker did not get to {what}; see {self.log}")
            time.sleep(0.2)

    def logged(self, event: str) -> bool:
        return f'"event": "{event}"' in self.log.read_text()

    def caught_up(self) -> bool:
        w = worker_status(self.settings.data_dir)
        return w.get("pid") == self.proc.pid and bool(w.get("reconciles")) and w.get("phase") == "following"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=120)
        self._fh.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=60, help="hook runs per condition (the slow one: n / 6)")
    p.add_argument("--sessions", type=int, default=60, help="demo sessions in the database (about 8 rows each)")
    p.add_argument("--out", type=Path, default=Path(".bench/bench_inject_latency.json"))
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-inject-"))
    s = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", chroma_mode="managed", chroma_port=free_port())
    init_db(s.db)
    import_records(s.db, generate(n_sessions=args.sessions, seed=7))
    cwd = tmp / "payments-api"  # outside git: the folder's name is the project
    cwd.mkdir()
    prompts = [payload(q, cwd, f"bench-{i}") for i, q in enumerate((ANSWERED + SILENT) * (args.n // 8 + 1))][:args.n]
    rows: list[dict[str, Any]] = []

    rows.append(summary("nothing listening", [hook(tmp / "nothing", prompts[i])[0] for i in range(args.n)]))
    rows.append(summary("inject off (MEMSYNC_INJECT=false)",
                        [hook(s.data_dir, prompts[i], {"MEMSYNC_INJECT": "false"})[0] for i in range(args.n)]))
    slow = SlowListener(socket_path(s.data_dir))
    try:
        rows.append(summary("worker slow (never answers)",
                            [hook(s.data_dir, prompts[i])[0] for i in range(max(3, args.n // 6))]))
    finally:
        slow.close()
        socket_path(s.data_dir).unlink(missing_ok=True)

    off = WorkerRun(s, tmp / "worker-off.log", MEMSYNC_INJECT="false")
    off.wait("its first pass", off.caught_up)
    time.sleep(2)  # settle: the pass's last batch returns its memory (nothing observable to wait on)
    rss_off = rss_mb(off.proc.pid)
    off.stop()

    on = WorkerRun(s, tmp / "worker-on.log")
    try:
        on.wait("its first pass", on.caught_up)
        on.wait("a warm searcher", lambda: on.logged("inject_warm"))
        time.sleep(2)
        rss_warm = rss_mb(on.proc.pid)
        results = [hook(s.data_dir, b) for b in prompts]
        rows.append(summary("worker running", [w for w, _ in results], sum(1 for _, i in results if i)))
        rss_served = rss_mb(on.proc.pid)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            walls: list[float] = []
            for start in range(0, args.n, 4):
                walls += [w for w, _ in pool.map(lambda b: hook(s.data_dir, b), prompts[start:start + 4])]
        rows.append(summary("worker running, 4 hooks at once", walls))
        writer = subprocess.Popen(
            [sys.executable, "-c", "import sys; from pathlib import Path; from memsync.worker.demo import generate; "
             "from memsync.worker.importer import import_records; "
             "import_records(Path(sys.argv[1]), generate(n_sessions=125, seed=11, end_ms=1_800_000_000_000))",
             str(s.db)], cwd=ROOT, env=settings_env(s))
        writer.wait(timeout=300)
        burst = [hook(s.data_dir, b) for b in prompts]
        rows.append(summary("worker embedding a 1,000-row burst", [w for w, _ in burst],
                            sum(1 for _, i in burst if i)))
        rss_end = rss_mb(on.proc.pid)
    finally:
        on.stop()
    print_table(rows)
    memory = {"worker RSS, inject off, MB": round(rss_off, 1), "inject on, warm, MB": round(rss_warm, 1),
              f"inject on, after {args.n} prompts, MB": round(rss_served, 1),
              "inject on, after all conditions, MB": round(rss_end, 1),
              "extra for injection (after the prompts - off), MB": round(rss_served - rss_off, 1)}
    print_table([memory])
    write_json({"latency": rows, "memory": memory, "sessions": args.sessions, "n": args.n,
                "cpus": os.cpu_count(), "load_avg": os.getloadavg()}, args.out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
