"""What every benchmark script does at the end: print an aligned table and write its JSON."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from memsync.config.formats.worker_status import read_worker_status
from memsync.config.settings import ENV_PREFIX, Settings
from memsync.embedding import Embedder
from memsync.worker.pipeline.resync import resync
from memsync.worker.rows.documents import payload_hash
from memsync.worker.seed.demo import generate
from memsync.worker.seed.importer import import_records, init_db

ROOT = Path(__file__).resolve().parent.parent


def worker_status(data_dir: Path) -> dict[str, Any]:
    """What the worker of ``data_dir`` last wrote in ``worker.json`` ({} before it wrote anything)."""
    return read_worker_status(data_dir) or {}


BUILT_FROM = "built-from.sha256"  # in a reused build's folder: the records it was built from
BUILD_DB = "claude-mem.db"  # what every build folder holds: its database (beside its stores)


def records_fingerprint(records: Sequence[Mapping[str, Any]]) -> str:
    """What a build is made of, as one hash: its records as the sync hashes a payload (canonical
    JSON; generated without the clock: a build's dates are the one part allowed to differ)."""
    return payload_hash(list(records))


def reusable(root: Path, fingerprint: str) -> bool:
    """Whether ``root`` holds a build of the records ``fingerprint`` names (see :func:`built`) and
    its database. Otherwise a build folder there is removed, with a line saying why, and the caller
    builds it again: a build of other records (the generator or the data changed since), or one
    made before builds were fingerprinted, would be measured as if it were current. A folder that
    holds neither a database nor the mark (nor is empty) is no build: the benchmark stops rather
    than remove it."""
    mark = root / BUILT_FROM
    if mark.is_file() and mark.read_text(encoding="utf-8").strip() == fingerprint and (root / BUILD_DB).is_file():
        return True
    if not root.exists():
        return False
    ours = root.is_dir() and ((root / BUILD_DB).is_file() or mark.is_file() or not any(root.iterdir()))
    if not ours:
        raise SystemExit(f"{root} is in the way of a benchmark's build and holds no {BUILD_DB}: move it, or give "
                         "another --work")
    why = "from other records" if mark.is_file() else "before its records were fingerprinted"
    print(f"{root} was built {why}: building it again", file=sys.stderr)
    shutil.rmtree(root)
    return False


def built(root: Path, fingerprint: str) -> None:
    """Mark ``root`` as a build of the records ``fingerprint`` names (after the build succeeded)."""
    (root / BUILT_FROM).write_text(fingerprint + "\n", encoding="utf-8")


def size_mb(path: Path) -> float:
    """Bytes under ``path`` (a file or a directory; 0 when missing), in MB."""
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6 if path.exists() else 0.0


# Ports a benchmark or test names for a server it starts later are taken below the kernel's
# ephemeral range, each pytest-xdist worker (and the processes it starts) in a slice of its own,
# in turn from a random start. Why: a port the kernel chose (bind to 0) is free only until the
# next bind to 0, and everything else binds to 0 (managed Chroma servers, helpers, every outgoing
# connection): once, a port a test had chosen minutes before for claude-mem's worker was taken
# by another process's server in between, and the test failed. The soak restarts its Chroma
# server on the port it chose, after each fault.
TEST_PORTS_LOW = 10_000
_XDIST_SLICES = 8


def _port_slice() -> tuple[int, int]:
    """[first, end) of this process's slice of the ports below the ephemeral range; (0, 0) when the
    machine's ephemeral range leaves too little below it (then the kernel chooses)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0, 0
    size = (low - TEST_PORTS_LOW) // _XDIST_SLICES
    if size < 500:
        return 0, 0
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) % _XDIST_SLICES if worker[2:].isdigit() else 0
    return TEST_PORTS_LOW + index * size, TEST_PORTS_LOW + (index + 1) * size


PORT_SLICE = _port_slice()
# The slice's ports in turn, from a random start (two runs at once on one machine seldom meet).
_start = random.randrange(*PORT_SLICE) if PORT_SLICE[1] else 0
_candidates = itertools.cycle([*range(_start, PORT_SLICE[1]), *range(PORT_SLICE[0], _start)])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to right now, from this process's slice below
    the kernel's ephemeral range (see :data:`TEST_PORTS_LOW`), so no later bind to port 0 by any
    process hands it out again; each call gives the next port of the slice that can be bound."""
    for port in itertools.islice(_candidates, PORT_SLICE[1] - PORT_SLICE[0]):
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port
    with socket.socket() as sock:  # no slice, or every port of it taken: the kernel's choice
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a memsync subprocess for ``settings``: this one's, without any MEMSYNC_*
    variable of the caller, plus the database, data directory, Chroma mode and port, and every
    other setting the caller set explicitly (e.g. compaction thresholds for a soak)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    names = {"db", "data_dir", "chroma_mode", "chroma_port"} | set(settings.model_fields_set)
    for name in sorted(names):
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        env[ENV_PREFIX + name.upper()] = str(value.value if isinstance(value, Enum) else value)
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def start_worker(prefix: str, sessions: int = 25, seed_embedder: Embedder | None = None,
                 **env_extra: str) -> tuple[Settings, subprocess.Popen[bytes]]:
    """A fresh demo database (``sessions`` sessions, about 8 rows each) in a temporary directory and
    `memsync worker` on it (managed Chroma on a free port, ``env_extra`` in its environment) as its
    own process. With ``seed_embedder``, the database is synced with it first (a large corpus in
    seconds, not the model's minutes; the worker finds it synced). The caller terminates the process."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    s = Settings(db=tmp / "claude-mem.db", data_dir=tmp / "data", chroma_mode="managed", chroma_port=free_port())
    init_db(s.db)
    import_records(s.db, generate(n_sessions=sessions, seed=5))
    if seed_embedder is not None:
        resync(s, embedder=seed_embedder)
    env = {**os.environ, "MEMSYNC_DB": str(s.db), "MEMSYNC_DATA_DIR": str(s.data_dir),
           "MEMSYNC_CHROMA_PORT": str(s.chroma_port), "PYTHONPATH": str(ROOT), **env_extra}
    proc = subprocess.Popen([sys.executable, "-m", "memsync", "worker"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return s, proc


def reconciled_worker(settings: Settings, **env_extra: str) -> tuple[subprocess.Popen[bytes], float]:
    """`memsync worker` on ``settings``' synced data (``env_extra`` in its environment) and the
    seconds until its first full reconcile ended. The caller terminates the process."""
    env = settings_env(settings, **env_extra)
    (settings.data_dir / "worker.json").unlink(missing_ok=True)  # a status left by an earlier run
    t = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "memsync", "worker"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not worker_status(settings.data_dir).get("reconciles"):
        if proc.poll() is not None or time.monotonic() - t > 3600:
            proc.terminate()
            raise SystemExit("the worker did not finish its first reconcile")
        time.sleep(0.5)
    return proc, time.monotonic() - t


def stop_worker(settings: Settings, proc: subprocess.Popen[bytes]) -> None:
    """Stop a worker from :func:`start_worker` (SIGTERM: it stops its Chroma server too) and remove
    its temporary directory (a two-hour memory run leaves ~0.5 GB there)."""
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=60)
    shutil.rmtree(settings.db.parent, ignore_errors=True)


def report(rows: list[tuple[str, str]], result: dict[str, Any], out: Path) -> None:
    """Print ``rows`` as a two-column table and write ``result`` to ``out`` as JSON."""
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


def print_table(rows: list[dict[str, Any]]) -> None:
    """Print dict rows as an aligned table (columns in first-seen order, blanks for missing)."""
    cols: list[str] = []
    for r in rows:
        cols.extend(k for k in r if k not in cols)
    width = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    print("  ".join(f"{c:<{width[c]}}" for c in cols))
    for r in rows:
        print("  ".join(f"{str(r.get(c, '')):<{width[c]}}" for c in cols))


def write_json(result: dict[str, Any], out: Path) -> None:
    """Write a benchmark's JSON result."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
