"""``DATA_DIR/inject.json``: what the worker's injection listener served, for ``memsync status``.

Counts only, never prompt text: per hour (epoch hour), the prompts asked, the prompts that got a
memory, and the tokens injected. The listener keeps the last 24 hours in memory and rewrites the
file atomically (temp file + rename) after each prompt; a write that fails (a full disk) is logged
by the listener and retried on the next prompt. A worker restart starts from what the file holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATS_FILE = "inject.json"
HOUR_MS = 3_600_000
WINDOW_HOURS = 24


@dataclass(frozen=True, slots=True)
class Served:
    """Injection over the last day: prompts asked, prompts injected, their mean tokens."""

    prompts: int
    injected: int
    mean_tokens: float

    def as_dict(self) -> dict[str, Any]:
        """For ``status --json``."""
        return {"prompts_last_day": self.prompts, "injected_last_day": self.injected,
                "mean_tokens": round(self.mean_tokens, 1)}


class InjectStats:
    """The listener's counters by hour (thread-safe), loaded from and saved to ``DATA_DIR/inject.json``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STATS_FILE
        self._lock = threading.Lock()
        self._hours: dict[int, list[int]] = _read(self.path)

    def record(self, now_ms: int, tokens: int | None) -> None:
        """One prompt answered; ``tokens`` is None when nothing was injected."""
        hour = now_ms // HOUR_MS
        with self._lock:
            bucket = self._hours.setdefault(hour, [0, 0, 0])
            bucket[0] += 1
            if tokens is not None:
                bucket[1] += 1
                bucket[2] += tokens
            for old in [h for h in self._hours if h <= hour - WINDOW_HOURS]:
                del self._hours[old]

    def save(self) -> None:
        """Write the counters (OSError when the file cannot be written)."""
        with self._lock:
            body = json.dumps({"hours": {str(h): b for h, b in sorted(self._hours.items())}})
        tmp = self.path.with_name(f"{STATS_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(body)
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()


def served(data_dir: Path, now_ms: int) -> Served:
    """What ``DATA_DIR/inject.json`` says was served in the 24 hours before ``now_ms`` (zeros when
    there is no readable file)."""
    hours = _read(data_dir / STATS_FILE)
    current = now_ms // HOUR_MS
    buckets = [b for h, b in hours.items() if current - WINDOW_HOURS < h <= current]
    prompts, injected, tokens = (sum(b[i] for b in buckets) for i in range(3))
    return Served(prompts, injected, tokens / injected if injected else 0.0)


def _read(path: Path) -> dict[int, list[int]]:
    try:
        data = json.loads(path.read_text())
        return {int(h): [int(x) for x in b][:3] for h, b in data["hours"].items() if len(b) == 3}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
