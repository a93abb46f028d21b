"""Which running processes are ``chroma run`` servers, and on which store (a recorded pid may be anyone's now).

A pid in ``chroma-server.json`` is only a hint: after a SIGKILLed worker and a reboot it may
belong to any program. Before memsync signals or adopts a recorded server it asks the process
table what that pid is now: a ``chroma run`` whose ``--path`` is this data directory's store,
started at the time recorded with the pid (so a reused pid never matches). When the record is
damaged or missing, the same table finds the live server on the store, so no second one is started.

Linux reads ``/proc/<pid>/cmdline`` (the exact argv) and ``/proc/<pid>/stat`` (field 4 the parent,
field 22 the start time in clock ticks since boot, qualified by the boot id); elsewhere (macOS,
which docs/operations.md documents under launchd) ``ps -o ppid=,lstart=,command=``, whose command line is
argv joined by spaces, so there only memsync's own argument order is recognised.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
PS_TIMEOUT_S = 5.0
DEFAULT_HOST, DEFAULT_PORT = "localhost", 8000  # `chroma run`'s own defaults
# `<...>/chroma run --path P --host H --port N`, as memsync starts it (ManagedServer._start_on)
_PS_COMMAND = re.compile(r"(?:^|[\s/])chroma run --path (?P<path>.+?) --host (?P<host>\S+) --port (?P<port>\d+)\s*$")


@dataclass(frozen=True, slots=True)
class ChromaProcess:
    """A running ``chroma run`` as the process table shows it: its identity (pid + start time)
    and where it serves (store path, host, port from its command line)."""

    pid: int
    parent: int  # the process that started it (1, or a subreaper, once that one is gone)
    started: str  # opaque start-time token: equal only for the very same process
    path: str
    host: str
    port: int

    def serves(self, store: Path) -> bool:
        """True when its ``--path`` is ``store``."""
        return same_path(self.path, store)


def same_path(recorded: str, store: Path) -> bool:
    """True when ``recorded`` names ``store`` (normalised; relative paths against our directory)."""
    return os.path.abspath(recorded) == os.path.abspath(store)


def parse_argv(argv: Sequence[str]) -> tuple[str, str, int] | None:
    """(path, host, port) of a ``chroma run`` argv (an element named ``chroma`` followed by
    ``run``; options as ``--path X`` or ``--path=X``), or None when it is no ``chroma run
    --path``."""
    for i in range(len(argv) - 1):
        if os.path.basename(argv[i]) == "chroma" and argv[i + 1] == "run":
            options = _options(argv[i + 2:])
            if "path" not in options:
                return None
            try:
                port = int(options.get("port", DEFAULT_PORT))
            except ValueError:
                return None
            return options["path"], options.get("host", DEFAULT_HOST), port
    return None


def _options(args: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            found[name] = value
        elif arg.startswith("--") and i + 1 < len(args):
            found[arg[2:]] = args[i + 1]
            i += 1
        i += 1
    return found


def parse_command(command: str) -> tuple[str, str, int] | None:
    """(path, host, port) of a ``chroma run`` command line as ``ps`` prints it (argv joined by
    spaces: a path may hold spaces, so only memsync's ``--path --host --port`` order is read)."""
    m = _PS_COMMAND.search(command)
    return (m["path"], m["host"], int(m["port"])) if m else None


def chroma_process(pid: int) -> ChromaProcess | None:
    """What ``pid`` is now when it is a ``chroma run``; None when it is gone, a zombie, another
    program, or cannot be read."""
    if pid <= 0:
        return None
    if sys.platform.startswith("linux"):
        return _linux(pid)
    found = _ps(["-o", "pid=,ppid=,lstart=,command=", "-p", str(pid)])
    return found[0] if found else None


def chroma_processes(store: Path) -> list[ChromaProcess]:
    """Every ``chroma run`` serving ``store``, oldest first (the process table, not the record)."""
    if not os.path.isdir(store):  # a server makes its store when it starts: none, no server to find
        return []
    if sys.platform.startswith("linux"):
        found = []
        for entry in _proc_pids():
            proc = _linux(entry)
            if proc is not None and proc.serves(store):
                found.append(proc)
    else:
        found = [p for p in _ps(["-axo", "pid=,ppid=,lstart=,command="]) if p.serves(store)]
    return sorted(found, key=lambda p: p.pid)


def _proc_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []


def _boot_id() -> str:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _linux(pid: int) -> ChromaProcess | None:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
        if b"chroma" not in raw:  # cheap filter for a scan of the whole table
            return None
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    argv = [part.decode(errors="surrogateescape") for part in raw.split(b"\0")]
    served = parse_argv(argv[:-1] if argv and argv[-1] == "" else argv)
    fields = stat.rsplit(")", 1)[-1].split()  # the name in parentheses may hold spaces
    if served is None or len(fields) < 20 or fields[0] == "Z":
        return None
    # field 4 is the parent, field 22 the start time (fields[0] is field 3, the state)
    return ChromaProcess(pid, int(fields[1]), f"{_boot_id()}+{fields[19]}", *served)


def _ps(args: list[str]) -> list[ChromaProcess]:
    try:
        out = subprocess.run(["ps", *args], capture_output=True, text=True, timeout=PS_TIMEOUT_S,
                             env={**os.environ, "LC_ALL": "C"}, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [p for line in out.splitlines() if (p := parse_ps_line(line)) is not None]


def parse_ps_line(line: str) -> ChromaProcess | None:
    """A ``ps -o pid=,ppid=,lstart=,command=`` line (lstart: ``Wed Nov 25 13:02:57 2026``, five
    fields in the C locale) as a ChromaProcess, or None when it is no ``chroma run``."""
    parts = line.split(None, 7)
    if len(parts) < 8 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    served = parse_command(parts[7])
    if served is None:
        return None
    return ChromaProcess(int(parts[0]), int(parts[1]), " ".join(parts[2:7]), *served)
