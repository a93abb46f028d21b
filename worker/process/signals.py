"""Signal handling that cannot deadlock the main thread.

A Python signal handler runs on the main thread between two bytecodes, which may be inside
``threading.Event.wait`` while that thread holds the event's (non-reentrant) condition lock. A
handler that then calls ``Event.set()`` on the same event waits for a lock its own thread holds,
forever; one that logs can likewise re-enter a half-written stream. (CI caught the worker in
exactly this state: main thread in ``stop.wait(0.05)``, handler in ``stop.set()``.)

So the handler here does one thing that takes no Python lock: it writes the signal number to a
pipe. A relay thread reads the pipe and runs the real handlers in ordinary context, where setting
events and logging are safe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType, TracebackType
from typing import Any

Handler = Callable[[int], None]


class SignalRelay:
    """Install with ``with SignalRelay({SIGTERM: fn}):`` (or ``install()``/``close()``); ``fn(signum)``
    runs on the relay thread. With ``interrupt_on_repeat``, a second signal of any of them raises
    ``KeyboardInterrupt`` on the main thread at once (raising takes no lock either), for commands
    whose second Ctrl-C must stop now and still run their ``finally`` blocks."""

    def __init__(self, handlers: Mapping[int, Handler], *, interrupt_on_repeat: bool = False) -> None:
        self.handlers = dict(handlers)
        self.interrupt_on_repeat = interrupt_on_repeat
        self.received = 0  # a plain int: the only state the raw handler touches
        self._previous: dict[int, Any] = {}
        self._read_fd = self._write_fd = -1
        self._thread: threading.Thread | None = None

    def install(self) -> SignalRelay:
        """Start the relay thread and install the handlers (main thread only, like ``signal.signal``)."""
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # a full pipe drops a signal rather than block
        self._thread = threading.Thread(target=self._relay, name="signal-relay", daemon=True)
        self._thread.start()
        self._previous = {s: signal.signal(s, self._on_signal) for s in self.handlers}
        return self

    def close(self) -> None:
        """Restore the previous handlers and stop the relay thread."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        if self._write_fd >= 0:
            os.close(self._write_fd)  # the relay reads end-of-file and returns
            self._write_fd = -1
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1

    def __enter__(self) -> SignalRelay:
        return self.install()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.interrupt_on_repeat and self.received > 1:
            raise KeyboardInterrupt
        with contextlib.suppress(OSError):  # a full or closed pipe: the signal is dropped
            os.write(self._write_fd, bytes([signum]))

    def _relay(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                self.handlers[signum](signum)
