"""SignalRelay: handlers run on the relay thread, so a signal that lands while the main thread holds
an event's lock cannot deadlock it (the CI failure of session 4: a worker stuck in `stop.set()`
inside its own `stop.wait()`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from memsync.worker.process.signals import SignalRelay

ROOT = Path(__file__).resolve().parents[2]

# The main thread spends nearly all its time holding stop's condition lock (wait(0) in a loop):
# the shape of the worker's loop, made as hostile as possible. A raw handler calling stop.set()
# here hangs within a few signals (measured in the session notes); the relay must never hang.
SPINNER = textwrap.dedent("""
    import signal, sys, threading
    from memsync.worker.process.signals import SignalRelay

    stop = threading.Event()
    relay = SignalRelay({signal.SIGTERM: lambda s: stop.set()}).install()
    print("ready", flush=True)
    while not stop.is_set():
        stop.wait(0)
    print("stopped", flush=True)
""")

REPEAT = textwrap.dedent("""
    import signal, sys, threading, time
    from memsync.worker.process.signals import SignalRelay

    first = threading.Event()
    try:
        with SignalRelay({signal.SIGTERM: lambda s: first.set()}, interrupt_on_repeat=True):
            print("ready", flush=True)
            first.wait(30)
            print("first", flush=True)
            time.sleep(30)  # a long batch that only a second signal cuts short
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
""")


def start(script: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def terminate(proc: subprocess.Popen[str], expect_first: bool = False) -> str:
    """SIGTERM (twice when ``expect_first``: after the child reports the first); the rest of its
    output. The child is always reaped."""
    try:
        assert proc.stdout is not None
        proc.send_signal(signal.SIGTERM)
        if expect_first:
            assert proc.stdout.readline().strip() == "first"
            proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=20)[0].strip()
    finally:
        proc.kill()
        proc.wait()


def test_a_signal_during_the_main_threads_wait_never_deadlocks() -> None:
    for _ in range(15):
        proc = start(SPINNER)
        out = terminate(proc)
        assert proc.returncode == 0 and out == "stopped"


def test_second_signal_interrupts_the_main_thread() -> None:
    proc = start(REPEAT)
    out = terminate(proc, expect_first=True)
    assert proc.returncode == 3 and out == "interrupted"


def test_handlers_run_on_the_relay_thread_and_close_restores() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    ran_on: list[str] = []
    done = threading.Event()

    def handler(signum: int) -> None:
        ran_on.append(threading.current_thread().name)
        done.set()

    relay = SignalRelay({signal.SIGUSR1: handler}).install()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert done.wait(10)
    finally:
        relay.close()
    assert ran_on == ["signal-relay"]
    assert signal.getsignal(signal.SIGUSR1) == before
    assert not any(t.name == "signal-relay" for t in threading.enumerate())
