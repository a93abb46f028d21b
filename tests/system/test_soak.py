"""The short soak: scripts/soak.py for two minutes with a fault every ~15 s (worker SIGKILL, Chroma
killed, a held write lock, hostile rows, the store wiped, the vector copy and the text index
damaged), then every end check: verify clean, no duplicates, every row findable, the derived files
rebuilt, no leaked process, disk within the margin. The long run is the same script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_two_minute_soak_with_faults_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, "-m", "scripts.soak", "--minutes", "2", "--fault-every", "15", "--seed", "3",
                        "--work", str(tmp_path / "work"), "--out", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=1200)
    assert out.exists(), f"exit {r.returncode}\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    summary = json.loads(out.read_text())
    failed = [k for k, ok in summary["checks"].items() if not ok]
    assert r.returncode == 0 and not failed, (failed, summary)
    assert summary["queries"] > 100 and summary["verify"]["expected"] > 500
    assert sum(summary["faults"].values()) >= 4 and summary["hostile_rows"] >= 2
