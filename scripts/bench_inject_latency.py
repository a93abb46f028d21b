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

Then (alone with ``--only openai``) the ``openai`` embedding provider: a second worker on a fresh
demo database, configured for an OpenAI-compatible endpoint: the tests' stand-in
(tests/openai_server.py, the bundled model as ``minilm-test``, run as its own process as the tests
run it), so that each prompt's query embedding is an HTTP request:

7. the first prompt after the worker's start (its warm-up sends the endpoint nothing);
8. the endpoint answering at once, then adding a delay to every request: 150 ms (a remote API),
   1.2 s (past the client's 1 s, within the search's 1.5 s deadline), 3 s (past both), the last
   both back to back and with a prompt every 5 s (a request fails 1.5 s after it was sent, and then
   the worker does not ask the endpoint for ``RETRY_AFTER_S``, 3 s: back-to-back prompts are
   answered lexically meanwhile; a user's next prompt usually comes later and waits again);
9. the endpoint down (its process killed: connections refused), then back on the same port.

Each condition has its own session ids (a session gets a memory once) and the worker keeps no
query cache (``embedding_query_cache=0``: the benchmark's prompts repeat, real ones rarely do), so
every prompt that is searched is one request; the stand-in counts them. After each condition one
``memsync search`` with the same settings shows the search's mode and reason there.

Memory: the worker's RSS (``/proc/PID/status`` VmRSS; the Chroma server is its own process) with
``inject`` off, and with it on after the warm-up and after the prompts of condition 4; the
difference is the listener's extra memory (its Searcher, the query model, the token counter).

    .venv/bin/python -m scripts.bench_inject_latency [--n 60] [--only local|openai]
        [--out .bench/bench_inject_latency.json]

Prints the tables and writes JSON (``--only`` keeps the other part's results already in ``--out``).
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
from typing import Any, NamedTuple

import httpx

from memsync.config.inject_channel import CLIENT_TIMEOUT_S, socket_path
from memsync.config.settings import Settings
from memsync.search.vectorstore import RETRY_AFTER_S
from memsync.worker.seed.demo import generate
from memsync.worker.seed.importer import import_records, init_db
from scripts.benchlib import ROOT, free_port, print_table, settings_env, worker_status, write_json

HOOK = str(Path(sys.executable).parent / "memsync")
ANSWERED = ("why did the refund endpoint get duplicate events from the message broker?",
            "what was the root cause of the race condition in the idempotency keys?",
            "how did we fix the connection pool timeout in payments-api?",
            "what did we decide about the currency rounding in invoices?")
SILENT = ("yes, continue", "run the tests and tell me what fails",
          "rename this function to parse_config and update the callers",
          "/compact")
CAP_S = 1.5  # the hook's wall time must never exceed this, whatever the worker or its endpoint does
ENDPOINT_MODEL = "minilm-test"  # the name the stand-in serves the bundled model under
# (name, delay added to each request in s, spacing of the prompts in s; 0: back to back). 150 ms: a
# remote API's round trip; 1.2 s: past the client's 1 s but within search_timeout_ms (1.5 s: the
# worker's search still gets its vector and finishes after the hook left); 3 s: past both (the
# search gives up and remembers it for RETRY_AFTER_S).
DELAYS = (("endpoint answering at once", 0.0, 0.0), ("endpoint +150 ms a request", 0.15, 0.0),
          ("endpoint +1.2 s a request", 1.2, 0.0), ("endpoint +3 s a request, back to back", 3.0, 0.0),
          ("endpoint +3 s a request, a prompt every 5 s", 3.0, 5.0))


class Run(NamedTuple):
    """One hook process as Claude Code saw it."""

    wall: float  # s, spawn to exit
    injected: bool  # it printed a context
    said: str  # its stderr (a silent hook says nothing)


def payload(prompt: str, cwd: Path, session: str) -> bytes:
    """A UserPromptSubmit hook payload as Claude Code sends it."""
    return json.dumps({"session_id": session, "transcript_path": str(cwd / "t.jsonl"), "cwd": str(cwd),
                       "permission_mode": "default", "hook_event_name": "UserPromptSubmit",
                       "prompt": prompt}).encode()


def prompts_for(tag: str, n: int, cwd: Path) -> list[bytes]:
    """``n`` payloads, half that the memory answers and half that it does not, in sessions of their own."""
    return [payload(q, cwd, f"{tag}-{i}") for i, q in enumerate((ANSWERED + SILENT) * (n // 8 + 1))][:n]


def hook(data_dir: Path, stdin: bytes, env: dict[str, str] | None = None) -> Run:
    """One hook process (exit 0 or the benchmark stops)."""
    started = time.perf_counter()
    done = subprocess.run([HOOK, "claude-code", "inject", "--data-dir", str(data_dir)], input=stdin,
                          capture_output=True, env={**os.environ, **(env or {})}, timeout=30)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the hook exited {done.returncode}: {done.stderr.decode()}")
    return Run(wall, bool(done.stdout), done.stderr.decode())


def summary(name: str, walls: list[float], injected: int | None = None, **extra: Any) -> dict[str, Any]:
    """p50 / p95 / max in ms of ``walls``, then ``extra``'s columns."""
    ordered = sorted(walls)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    row: dict[str, Any] = {"condition": name, "runs": len(walls), "p50 ms": round(statistics.median(walls) * 1000),
                           "p95 ms": round(p95 * 1000), "max ms": round(max(walls) * 1000)}
    if injected is not None:
        row["injected"] = injected
    return {**row, **extra}


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


class Endpoint:
    """The tests' OpenAI-compatible stand-in (tests/openai_server.py) as its own process, started as
    the tests start it (scripts import nothing from tests): its URL, fault control and counters."""

    def __init__(self, log: Path, port: int = 0) -> None:
        # Its stderr to a file: each request the worker gave up on ends in a broken pipe's traceback.
        with log.open("a") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.openai_server", "--port", str(port),
                                          "--model", ENDPOINT_MODEL], cwd=ROOT, stdout=subprocess.PIPE,
                                         stderr=err, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # printed once it listens
        if not line.startswith("listening "):
            self.stop()
            raise SystemExit(f"the stand-in endpoint did not start: {line!r}; see {log}")
        self.port = int(line.split()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def delay(self, seconds: float) -> None:
        """Every request from now on answered after ``seconds`` (0: at once), and counted on arrival."""
        httpx.post(f"{self.url[:-3]}/_faults", json={"delay_s": seconds, "count": -1}, timeout=10).raise_for_status()

    def requests(self) -> int:
        """The requests that arrived since a delay was set (answered or not yet)."""
        return int(httpx.get(f"{self.url[:-3]}/_stats", timeout=10).json()["faults"])

    def stop(self) -> None:
        """Kill it: an endpoint that went away (its port refuses)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def searched(s: Settings) -> dict[str, Any]:
    """The mode and reason of one `memsync search` with ``s`` (the listener's Searcher, in a process
    of its own): how the worker's search fares against the endpoint as it is now."""
    done = subprocess.run([sys.executable, "-m", "memsync", "search", "refund duplicate events", "--json",
                           "--window-days", "0", "--limit", "3"], cwd=ROOT, env=settings_env(s),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    got = json.loads(done.stdout)
    return {"mode": got["mode"], "reason": got.get("reason")}


def local_conditions(tmp: Path, n: int, sessions: int) -> dict[str, Any]:
    """Conditions 1-6 and the worker's memory with the bundled model."""
    s = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", chroma_mode="managed", chroma_port=free_port())
    init_db(s.db)
    import_records(s.db, generate(n_sessions=sessions, seed=7))
    cwd = tmp / "payments-api"  # outside git: the folder's name is the project
    cwd.mkdir(exist_ok=True)
    prompts = prompts_for("bench", n, cwd)
    rows: list[dict[str, Any]] = []

    rows.append(summary("nothing listening", [hook(tmp / "nothing", prompts[i]).wall for i in range(n)]))
    rows.append(summary("inject off (MEMSYNC_INJECT=false)",
                        [hook(s.data_dir, prompts[i], {"MEMSYNC_INJECT": "false"}).wall for i in range(n)]))
    slow = SlowListener(socket_path(s.data_dir))
    try:
        rows.append(summary("worker slow (never answers)",
                            [hook(s.data_dir, prompts[i]).wall for i in range(max(3, n // 6))]))
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
        rows.append(summary("worker running", [r.wall for r in results], sum(r.injected for r in results)))
        rss_served = rss_mb(on.proc.pid)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            walls: list[float] = []
            for start in range(0, n, 4):
                walls += [r.wall for r in pool.map(lambda b: hook(s.data_dir, b), prompts[start:start + 4])]
        rows.append(summary("worker running, 4 hooks at once", walls))
        writer = subprocess.Popen(
            [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from memsync.worker.seed.demo import generate; from memsync.worker.seed.importer import import_records; "
             "import_records(Path(sys.argv[1]), generate(n_sessions=125, seed=11, end_ms=1_800_000_000_000))",
             str(s.db)], cwd=ROOT, env=settings_env(s))
        writer.wait(timeout=300)
        burst = [hook(s.data_dir, b) for b in prompts]
        rows.append(summary("worker embedding a 1,000-row burst", [r.wall for r in burst],
                            sum(r.injected for r in burst)))
        rss_end = rss_mb(on.proc.pid)
    finally:
        on.stop()
    print_table(rows)
    memory = {"worker RSS, inject off, MB": round(rss_off, 1), "inject on, warm, MB": round(rss_warm, 1),
              f"inject on, after {n} prompts, MB": round(rss_served, 1),
              "inject on, after all conditions, MB": round(rss_end, 1),
              "extra for injection (after the prompts - off), MB": round(rss_served - rss_off, 1)}
    print_table([memory])
    return {"latency": rows, "memory": memory}


def endpoint_row(name: str, runs: list[Run], requests: int, search: dict[str, Any]) -> dict[str, Any]:
    """A condition of the openai provider: latency, what the hook printed, what the endpoint saw."""
    return summary(name, [r.wall for r in runs], sum(r.injected for r in runs),
                   **{"gave up": sum(r.wall >= CLIENT_TIMEOUT_S for r in runs),
                      "stderr": sum(1 for r in runs if r.said), f"over {CAP_S:g} s": sum(r.wall > CAP_S for r in runs),
                      "endpoint requests": requests, "search": search.get("mode", search.get("error", "")),
                      "reason": search.get("reason") or ""})


def spaced(data_dir: Path, prompts: list[bytes], gap_s: float) -> list[Run]:
    """The hook for each prompt, one starting every ``gap_s`` (0: each as soon as the last exits)."""
    runs: list[Run] = []
    for stdin in prompts:
        runs.append(hook(data_dir, stdin))
        time.sleep(max(0.0, gap_s - runs[-1].wall))
    return runs


def openai_conditions(tmp: Path, n: int, sessions: int) -> dict[str, Any]:
    """Conditions 7-9: the worker's query embedding is a request to the stand-in endpoint."""
    root = tmp / "openai"
    root.mkdir()
    cwd = tmp / "payments-api"
    cwd.mkdir(exist_ok=True)
    endpoint = Endpoint(root / "endpoint.log")
    s = Settings(db=root / "claude-mem.db", data_dir=root / "data", chroma_mode="managed", chroma_port=free_port(),
                 embedding_provider="openai", embedding_base_url=endpoint.url, embedding_model=ENDPOINT_MODEL,
                 embedding_query_cache=0)
    init_db(s.db)
    import_records(s.db, generate(n_sessions=sessions, seed=7))
    rows: list[dict[str, Any]] = []
    worker = WorkerRun(s, root / "worker.log")
    try:
        worker.wait("its first pass (embedded by the endpoint)", worker.caught_up)
        worker.wait("a warm searcher", lambda: worker.logged("inject_warm"))
        time.sleep(2)
        endpoint.delay(0)
        first = hook(s.data_dir, prompts_for("first", 1, cwd)[0])
        rows.append(endpoint_row("first prompt after the start", [first], endpoint.requests(), {}))
        for i, (name, delay, gap) in enumerate(DELAYS):
            endpoint.delay(delay)
            before = endpoint.requests()
            count = n if delay < CLIENT_TIMEOUT_S else max(3, n // 6)
            runs = spaced(s.data_dir, prompts_for(f"delay{i}", count, cwd), gap)
            # The worker's last search ends after the hook left, and a failure is remembered for
            # RETRY_AFTER_S: let both pass before counting and before the next condition.
            time.sleep(delay + RETRY_AFTER_S)
            requests = endpoint.requests() - before
            rows.append(endpoint_row(name, runs, requests, searched(s)))
            time.sleep(delay)  # the search's own request, still held by the stand-in
        endpoint.stop()  # connections refused from now on
        runs = [hook(s.data_dir, b) for b in prompts_for("down", n, cwd)]
        rows.append(endpoint_row("endpoint down (connection refused)", runs, 0, searched(s)))
        endpoint = Endpoint(root / "endpoint.log", endpoint.port)
        endpoint.delay(0)
        time.sleep(RETRY_AFTER_S)  # the worker asks a failed endpoint again after this
        runs = [hook(s.data_dir, b) for b in prompts_for("back", max(8, n // 6), cwd)]
        rows.append(endpoint_row("endpoint back (same port)", runs, endpoint.requests(), searched(s)))
    finally:
        worker.stop()
        endpoint.stop()
    print_table(rows)
    return {"openai": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=60, help="hook runs per condition (the slow ones: n / 6)")
    p.add_argument("--sessions", type=int, default=60, help="demo sessions in the database (about 8 rows each)")
    p.add_argument("--only", choices=("local", "openai"), default=None,
                   help="only the bundled model's conditions (1-6) or only the openai provider's (7-9)")
    p.add_argument("--out", type=Path, default=Path(".bench/bench_inject_latency.json"))
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-inject-"))  # kept when a condition fails: its logs are there
    result: dict[str, Any] = json.loads(args.out.read_text()) if args.only and args.out.exists() else {}
    result.update({"sessions": args.sessions, "n": args.n, "cpus": os.cpu_count()})
    if args.only != "openai":
        started = time.monotonic()
        result.update(local_conditions(tmp, args.n, args.sessions))
        result.update({"load_avg": os.getloadavg(), "seconds": round(time.monotonic() - started)})
    if args.only != "local":
        started = time.monotonic()
        result.update(openai_conditions(tmp, args.n, args.sessions))
        result.update({"openai_load_avg": os.getloadavg(), "openai_seconds": round(time.monotonic() - started)})
    write_json(result, args.out)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
