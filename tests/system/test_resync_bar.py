"""`memsync resync` on a terminal: its bar says how far back search by meaning reaches as the pass
goes newest first, and when the default window is done (a real pseudo-terminal, the real model)."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

import pytest

from memsync.config.settings import Settings
from tests.conftest import make_db, mixed_records
from tests.system.test_e2e import MEMSYNC, ROOT, env_for

pytestmark = pytest.mark.slow


def test_the_bar_shows_how_far_back_search_by_meaning_reaches(tmp_path: Path) -> None:
    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="embedded",
                        read_batch_rows=10)
    make_db(settings.db, mixed_records(40))
    main, terminal = pty.openpty()
    try:
        proc = subprocess.Popen([*MEMSYNC, "resync"], env={**env_for(settings), "COLUMNS": "160"}, cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal, text=True)
        os.close(terminal)
        drawn = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal's other end closed: the command is done
                break
            if not chunk:
                break
            drawn += chunk
        out = proc.communicate(timeout=300)[0]
    finally:
        os.close(main)
    assert proc.returncode == 0, drawn[-2000:]
    bar = drawn.decode(errors="replace")
    # The first look: the newest rows' date (2026-05-28: the test rows' base), the window's ETA.
    assert "searchable=2026-05-28, window in" in bar, bar[-2000:]
    assert "embedded=" in bar
    assert " added, 0 updated, 0 deleted" in out
