"""One-line error text from what another process printed (``config.errors.one_line``): no escape
sequences, carriage returns or drawings; and a managed `chroma run` that fails to start, played by a
stand-in executable printing all of them, is reported in one printable line."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from memsync.chroma import server as chroma_server
from memsync.config.errors import StoreUnavailable, one_line
from memsync.config.settings import Settings
from memsync.worker.loop.health import Health
from tests.conftest import free_port

# What `chroma run` prints before it fails: its logo in ( and #, coloured log lines, a progress bar
# redrawn with carriage returns, then the reason.
NOISY = (
    "\n                (((((((((    (((((####\n             ((((((((((((((((((((((#########\n"
    "\x1b[2m2026-11-28T10:00:00Z\x1b[0m \x1b[32m INFO\x1b[0m chroma: starting\r\n"
    "Loading  10%|#         | 1/10\rLoading 100%|##########| 10/10\n"
    "\x1b]0;chroma\x07Error: No space left on device (os error 28)\n"
)


def printable_line(text: str) -> bool:
    return text.isprintable() and "\n" not in text


class TestOneLine:
    def test_drops_escapes_drawings_and_redrawn_states(self) -> None:
        line = one_line(NOISY)
        assert line == ("2026-11-28T10:00:00Z  INFO chroma: starting | Loading 100%|##########| 10/10 | "
                        "Error: No space left on device (os error 28)")
        assert printable_line(line) and "((((" not in line

    def test_keeps_the_end_within_the_limit_and_reads_bytes(self) -> None:
        line = one_line(NOISY.encode() + b"\xff tail", 40)
        assert line.endswith("(os error 28) | \ufffd tail") and len(line) == 43 and line.startswith("...")

    def test_printable_one_line_text_is_unchanged(self) -> None:
        text = "managed Chroma server did not become healthy on port 8000: Error: boom (x=1)"
        assert one_line(text) == text

    def test_the_worker_keeps_one_printable_line_and_forgets_it_on_recovery(self, settings: Settings) -> None:
        health = Health(settings, _Quiet())
        health.degraded(StoreUnavailable(NOISY))
        assert health.status.last_error == one_line(NOISY)
        health.recovered()
        assert health.status.last_error is None


class _Quiet:
    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: None


@pytest.mark.slow
def test_a_failed_managed_start_is_one_printable_line(settings: Settings, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in `chroma` (given as the managed server's command) that prints the noise
    and exits 1: the error names the port and the reason, in printable text."""
    standin = tmp_path / "chroma"
    standin.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({NOISY!r})\nsys.exit(1)\n")
    standin.chmod(standin.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(chroma_server, "chroma_cli", lambda *args: [str(standin), *args])
    s = settings.model_copy(update={"chroma_mode": "managed", "chroma_port": free_port()})
    s.data_dir.mkdir(parents=True)
    with pytest.raises(StoreUnavailable) as failed:
        chroma_server.ManagedServer(s).ensure()
    message = str(failed.value)
    assert printable_line(message) and "\x1b" not in message and "((((" not in message, message
    assert message.endswith("Error: No space left on device (os error 28)"), message
    assert "Loading  10%" not in message and "Loading 100%" in message
    assert not os.path.exists(s.data_dir / chroma_server.INFO_FILE)
