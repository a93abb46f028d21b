"""The managed Chroma server: exactly one ``chroma run`` per data directory.

The rule: one process owns a Chroma store, so every memsync process talks to one local
server over HTTP. The server is recorded in ``DATA_DIR/chroma-server.json`` (pid, its start time,
port, path); starting is serialised by an exclusive ``flock`` on ``DATA_DIR/chroma-server.lock``. A
healthy recorded server is adopted (on its recorded port); a dead one is replaced. Whoever started a
server stops it.

The record is a hint, checked against the process table (``process``): a recorded pid
that is no longer a ``chroma run`` on this store, started when recorded, is stale and never
signalled; a live server the record does not name (record damaged or missing) is found by its
command line and adopted, never doubled. A record that cannot be written (disk full) stops the
server just started: no unrecorded server is left behind.

Ports: an explicit ``chroma_port`` is used as given (8000, claude-mem's, when unset while the
upstream-readable store is on: ``Settings.server_port``); a running server recorded on another
port is moved there when no live memsync process is responsible for it, and a fixed port held by
another program is a ConfigError naming it. Unset (0), a server is started on a free port
(the dead recorded server's port when it is still free, so readers holding it keep working), and
readers find it in the record; so two data directories run two workers side by side.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from memsync.chroma.process import ChromaProcess, chroma_process, chroma_processes
from memsync.chroma.remote import REFUSED_STATUSES, Endpoint, refused, tls_failure
from memsync.config.diskspace import no_space, no_space_at
from memsync.config.errors import ConfigError, StoreUnavailable, one_line
from memsync.config.settings import Settings

INFO_FILE = "chroma-server.json"
LOCK_FILE = "chroma-server.lock"
LOG_FILE = "chroma-server.log"
LOG_ROTATE_BYTES = 10_000_000  # at a server start, a longer log becomes chroma-server.log.1 (one kept)
PORT_ATTEMPTS = 3  # a free port taken by someone else before the server binds it: try another


def heartbeat(host: str, port: int, timeout_s: float = 2.0, endpoint: Endpoint | None = None) -> bool:
    """True when a Chroma server answers its heartbeat at host:port (see :func:`heartbeat_failure`)."""
    return heartbeat_failure(host, port, timeout_s, endpoint) is None


def heartbeat_failure(host: str, port: int, timeout_s: float = 2.0, endpoint: Endpoint | None = None) -> str | None:
    """Why no Chroma server answers its heartbeat at host:port (``connection refused``, ``no answer
    within N s``, ...), or None when one does. A refused port answers at once; a server that
    accepts but does not answer costs ``timeout_s``. With ``endpoint`` (http mode) it asks over its
    scheme with its headers, and a server that refuses them (401/403, or a certificate that does
    not verify) raises StoreRefused: that is no reason to wait and retry."""
    try:  # a bare connect first: httpx spends ~50 ms setting up a client before it even connects
        socket.create_connection((host, port), timeout=timeout_s).close()
    except ConnectionRefusedError:
        return "connection refused"
    except TimeoutError:
        return f"no connection within {timeout_s:g} s"
    except OSError as exc:
        return f"cannot connect: {exc.strerror or exc}"
    ep = endpoint or Endpoint(host, port)
    try:
        resp = httpx.get(f"{ep.url}/api/v2/heartbeat", headers=ep.header_dict(), verify=ep.verify(),
                         timeout=timeout_s)
    except httpx.ConnectError as exc:  # its text is the socket error's: "[Errno 111] Connection refused"
        tls = tls_failure(ep, exc)
        if tls is not None:
            raise tls from exc
        return "connection refused" if "refused" in str(exc).lower() else f"cannot connect: {exc}"
    except httpx.TimeoutException:
        return f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"heartbeat failed: {exc}"
    if resp.status_code in REFUSED_STATUSES:
        raise refused(ep, resp.status_code, "the heartbeat")
    return None if resp.status_code == 200 else f"heartbeat answered HTTP {resp.status_code}"


def free_port(host: str) -> int:
    """A port on ``host`` that nobody listens on now (the kernel's choice)."""
    family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_free(host: str, port: int) -> bool:
    """True when ``port`` on ``host`` can be bound now."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds it
            sock.bind((host, port))
    except OSError:
        return False
    return True


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (and is not a zombie we can reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:  # a zombie (exited, not yet reaped by a parent that is not us) is not alive
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# The `chroma` command is a Python script that imports the whole chromadb package only to hand its
# argv to the Rust CLI in chromadb_rust_bindings. Calling that directly skips the imports: a server
# answers in 0.08 s instead of 0.85 s, with 0.06 s of CPU instead of 0.9, and stays at 38 MB of
# memory instead of 111 (chromadb 1.5.9, measured on 2 cores). The argv keeps `chroma run --path
# ...` as its own elements, which is what `process` looks for. One line, no "chroma run" in it: on
# macOS the process table is read from `ps`, a line per process, argv joined by spaces.
_RUST_CLI = "import sys, chromadb_rust_bindings as rust; rust.cli(sys.argv[1:])"


def chroma_cli(*args: str) -> list[str]:
    """The argv that runs the ``chroma`` CLI command ``args`` (``run --path P ...``, ``vacuum ...``)
    with this interpreter's chromadb, straight through its Rust CLI (the ``chroma`` script's own
    Python imports skipped); ConfigError when chromadb's Rust part is not installed."""
    if importlib.util.find_spec("chromadb_rust_bindings") is None:
        raise ConfigError("chromadb's Rust part (chromadb_rust_bindings) is not installed for "
                          f"{sys.executable}: reinstall memsync's dependencies")
    return [sys.executable, "-c", _RUST_CLI, "chroma", *args]


@contextlib.contextmanager
def _start_lock(data_dir: Path) -> Iterator[None]:
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``chroma-server.json`` records about the running server."""

    pid: int
    host: str
    port: int
    path: str
    owner: int = 0  # pid of the memsync process responsible for stopping it
    started: str = ""  # the process's start time (process.ChromaProcess.started); "" in old records

    @staticmethod
    def read(data_dir: Path) -> ServerInfo | None:
        """The recorded server, or None when there is no (readable) record."""
        try:
            raw = json.loads((data_dir / INFO_FILE).read_text())
            return ServerInfo(int(raw["pid"]), str(raw["host"]), int(raw["port"]), str(raw["path"]),
                              int(raw.get("owner", 0)), str(raw.get("started", "")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    @staticmethod
    def of(proc: ChromaProcess, owner: int) -> ServerInfo:
        """The record of a server found in the process table."""
        return ServerInfo(proc.pid, proc.host, proc.port, proc.path, owner, proc.started)

    def write(self, data_dir: Path) -> None:
        """Record atomically (temp file + rename); OSError when the disk refuses."""
        tmp = data_dir / (INFO_FILE + ".tmp")
        try:
            tmp.write_text(json.dumps({"pid": self.pid, "host": self.host, "port": self.port, "path": self.path,
                                       "owner": self.owner, "started": self.started}))
            os.replace(tmp, data_dir / INFO_FILE)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def running(self, store: Path) -> bool:
        """True when the recorded pid is still this server: a ``chroma run`` whose ``--path`` is
        ``store``, started when recorded (an old record without a start time: the command line
        only). False means a stale record: whatever runs under that pid now is never signalled."""
        proc = chroma_process(self.pid)
        return proc is not None and proc.serves(store) and (not self.started or proc.started == self.started)


def recorded_server(settings: Settings) -> ServerInfo | None:
    """The record when it names a running server on this store (see :meth:`ServerInfo.running`)."""
    info = ServerInfo.read(settings.data_dir)
    return info if info is not None and info.running(settings.chroma_dir) else None


def unrecorded_server(settings: Settings) -> ServerInfo | None:
    """A ``chroma run`` on this store found in the process table (the oldest), whatever the record
    says; its owner is the process that started it while that one lives, else 0."""
    found = chroma_processes(settings.chroma_dir)
    if not found:
        return None
    proc = found[0]
    return ServerInfo.of(proc, proc.parent if proc.parent > 1 and pid_alive(proc.parent) else 0)


def live_server(settings: Settings) -> ServerInfo | None:
    """The data directory's running server: the record when it checks out, else one found in the
    process table (the record damaged, missing or stale while a server runs); None when none runs."""
    return recorded_server(settings) or unrecorded_server(settings)


def write_failure(settings: Settings, exc: OSError, what: str) -> StoreUnavailable:
    """One line for a write the disk refused: a full disk worded as every command words it
    (``config.diskspace``: ``no space left on DATA_DIR (…): free space there … [what]``), any other
    refusal in the error's own words (``read-only file system on DATA_DIR: what``)."""
    full = no_space(exc, settings)
    if full is not None:
        return StoreUnavailable(str(no_space_at(settings.data_dir, settings, what)))
    return StoreUnavailable(f"{(exc.strerror or str(exc)).lower()} on {settings.data_dir}: {what}")


class _ServerExited(StoreUnavailable):
    """The server exited before answering (on a free port: probably taken meanwhile; try another)."""


class ManagedServer:
    """A handle on the data directory's server: adopted or started; ``stop()`` stops only what it started."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.info: ServerInfo | None = None
        self.started = False
        self._proc: subprocess.Popen[bytes] | None = None

    def ensure(self) -> ServerInfo:
        """Adopt the running healthy server (recorded, or found in the process table) or start one;
        raises StoreUnavailable/ConfigError (a disk that refuses the lock, log or record:
        StoreUnavailable, one line)."""
        s = self.settings
        try:
            with _start_lock(s.data_dir):
                return self._ensure_locked()
        except OSError as exc:  # the lock file or the log on a full or read-only disk
            raise write_failure(s, exc, f"cannot start the managed Chroma server ({exc})") from exc

    def _ensure_locked(self) -> ServerInfo:
        s = self.settings
        record = ServerInfo.read(s.data_dir)
        info = record if record is not None and record.running(s.chroma_dir) else None
        recorded = info is not None
        if info is None:
            # Trigger: no record, a damaged one, or one whose pid is no longer our server. Why: a
            # server may run on the store all the same (the record lost while a worker runs).
            # Outcome: adopt it rather than start a second `chroma run` on the same store.
            info = unrecorded_server(s)
        if info and s.server_port and info.port != s.server_port:
            self._move_to_fixed_port(info)
            info = None
        if info and (heartbeat(info.host, info.port) or self._wait_healthy(info, None)):
            return self._adopt(info, recorded)
        if info and not recorded:
            raise StoreUnavailable(
                f"a Chroma server (pid {info.pid}) runs on {s.chroma_dir} without a record in {INFO_FILE} and does "
                f"not answer on {info.host}:{info.port}; stop it (kill {info.pid}) and try again")
        if info:
            self._terminate_server(info)  # recorded, ours, but not answering within the start timeout: hung
        if s.server_port and not port_free(s.chroma_host, s.server_port):
            held = ("already has a Chroma server that memsync did not start for " + str(s.data_dir)
                    if heartbeat(s.chroma_host, s.server_port) else "is taken by another program")
            also = (", and claude-mem's CLAUDE_MEM_CHROMA_PORT to match (upstream_store is on)"
                    if s.upstream_store else ", unset it for a free port, or use chroma_mode=http")
            raise ConfigError(f"port {s.server_port} on {s.chroma_host} {held}; set another chroma_port "
                              f"(MEMSYNC_CHROMA_PORT){also}")
        self.info = self._start(record.port if record and record.host == s.chroma_host else None)
        self.started = True
        return self.info

    def _move_to_fixed_port(self, info: ServerInfo) -> None:
        """A running server recorded on another port than the fixed one (started before
        ``chroma_port`` was set or the upstream-readable store turned on, whose readers need the
        fixed port): stopped, so that a new one starts there, unless a live memsync process is
        responsible for it (then a ConfigError naming it: its searches would break)."""
        s = self.settings
        if info.owner and info.owner != os.getpid() and pid_alive(info.owner):
            raise ConfigError(
                f"the managed Chroma server of {s.data_dir} runs on port {info.port} (pid {info.pid}), started "
                f"by memsync process {info.owner}, but the port is now fixed at {s.server_port} (chroma_port, or "
                "claude-mem's 8000 while upstream_store is on): stop that process, then start again"
            )
        self._terminate_server(info)

    def _adopt(self, info: ServerInfo, recorded: bool) -> ServerInfo:
        """Use a running server. If the process that started it is gone (killed before it could stop
        it), take over the duty of stopping it, so a server never outlives every memsync process.
        One found in the process table is recorded again, for the readers."""
        orphan = (info.owner and not pid_alive(info.owner)) or (not recorded and not info.owner)
        if orphan:
            info = replace(info, owner=os.getpid())
        if orphan or not recorded:
            self._record(info)
        # Still this handle's to stop: the server it started (adopted again after a lost
        # connection) or the one it took over; never another process's server adopted later.
        self.started = bool(orphan) or (self.started and self.info is not None and self.info.pid == info.pid)
        self.info = info
        return info

    def _record(self, info: ServerInfo) -> None:
        try:
            info.write(self.settings.data_dir)
        except OSError as exc:
            raise write_failure(self.settings, exc, f"cannot record the managed Chroma server in {INFO_FILE}") from exc

    def _start(self, previous: int | None) -> ServerInfo:
        """Start on the explicit port, else on a free one (``previous``, the dead server's, first)."""
        s = self.settings
        attempt = 0
        while True:
            if s.server_port:
                port = s.server_port
            elif attempt == 0 and previous and port_free(s.chroma_host, previous):
                port = previous
            else:
                port = free_port(s.chroma_host)
            try:
                return self._start_on(port)
            except _ServerExited:
                attempt += 1
                if s.server_port or attempt >= PORT_ATTEMPTS:
                    raise

    def _start_on(self, port: int) -> ServerInfo:
        """The started server, healthy; StoreUnavailable with the log's tail when it is not."""
        s = self.settings
        s.chroma_dir.mkdir(parents=True, exist_ok=True)
        log_path = s.data_dir / LOG_FILE
        with contextlib.suppress(OSError):
            if log_path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(log_path, log_path.with_name(LOG_FILE + ".1"))
        log = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        # The server's tracing honours RUST_LOG; at its default (info) it writes ~1 KB per request,
        # about 25 MB an hour for a worker syncing 5 rows/s, forever.
        env = {**os.environ, "RUST_LOG": s.chroma_log_level}
        try:
            proc = subprocess.Popen(
                chroma_cli("run", "--path", str(s.chroma_dir), "--host", s.chroma_host, "--port", str(port)),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,  # Ctrl-C in the terminal goes to memsync, which stops it in order
            )
        finally:
            log.close()
        self._proc = proc
        info = ServerInfo(proc.pid, s.chroma_host, port, str(s.chroma_dir), owner=os.getpid())
        if not self._wait_healthy(info, proc):
            exited = proc.poll() is not None
            _terminate(proc.pid, proc)
            self._proc = None
            tail = _tail(s.data_dir / LOG_FILE)
            error = _ServerExited if exited else StoreUnavailable
            raise error(f"managed Chroma server did not become healthy on port {port}: {tail}")
        # Read once it answers: right after Popen the kernel may still be loading the program
        # (an empty command line for a moment).
        identity = chroma_process(proc.pid)
        info = replace(info, started=identity.started if identity else "")
        try:
            self._record(info)
        except StoreUnavailable:
            # Trigger: the record cannot be written (disk full). Why: nobody would find, adopt or
            # stop the server, and every retry would start another. Outcome: stop it, then report.
            _terminate(proc.pid, proc)
            self._proc = None
            raise
        return info

    def _wait_healthy(self, info: ServerInfo, proc: subprocess.Popen[bytes] | None) -> bool:
        deadline = time.monotonic() + self.settings.chroma_start_timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return False
            if heartbeat(info.host, info.port, timeout_s=1.0):
                return True
            time.sleep(0.1)  # a child process has no event to wait on; poll its port briefly
        return False

    def stop(self) -> None:
        """Stop the server if this handle started (or took over) it; adopted servers keep running."""
        if not self.started or self.info is None:
            return
        with _start_lock(self.settings.data_dir):
            self._stop_locked()

    def _stop_locked(self) -> None:
        assert self.info is not None
        self._terminate_server(self.info, self._proc)
        self._proc = None
        current = ServerInfo.read(self.settings.data_dir)
        if current and current.pid == self.info.pid:
            with contextlib.suppress(FileNotFoundError):
                (self.settings.data_dir / INFO_FILE).unlink()
        self.started = False

    def kill_now(self) -> None:
        """SIGTERM to the server this handle started (or took over), without waiting (an exit right
        now); nothing when its pid is no longer that server."""
        if self.started and self.info is not None and self.info.running(self.settings.chroma_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.info.pid, signal.SIGTERM)

    def _terminate_server(self, info: ServerInfo, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Stop ``info``'s server, only while its pid is still that server (a stale
        record's pid may belong to any program now). Our own child (``proc``) is ours while the
        Popen has not reaped it: its pid cannot be reused before that."""
        if proc is not None:
            if proc.poll() is None:
                _terminate(proc.pid, proc)
            return
        store = self.settings.chroma_dir

        def still_ours() -> bool:
            return info.running(store)

        if still_ours():
            _terminate(info.pid, None, still=still_ours)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the server this handle started and keep every memsync process from starting one
        until the block ends (maintenance of its directory). Only for a server this handle owns."""
        if not self.started or self.info is None:
            raise ConfigError("only the process that started the managed server may pause it")
        with _start_lock(self.settings.data_dir):
            self._stop_locked()
            yield


def _terminate(pid: int, proc: subprocess.Popen[bytes] | None = None, grace_s: float = 10.0,
               still: Callable[[], bool] = lambda: True) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL (a pid not our child: only if ``still()``)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        if proc is not None:  # already reaped (pid_alive reaps children): let the Popen know
            proc.poll()
        return
    if proc is not None:
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
            return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.05)
    if pid_alive(pid) and still():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _tail(path: Path, n: int = 400) -> str:
    """The end of the server's log as one printable line (its logo, colours and progress bars
    dropped: ``one_line``)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 16 * n))
            return one_line(fh.read(), n) or "(nothing in the log)"
    except OSError:
        return "(no log)"
