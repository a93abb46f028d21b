"""A benchmark reuses a build (database and synced store) only when it was made from the records it
would make now: a changed generator or data set rebuilds it instead of being measured as current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memsync.worker.seed.demo import generate
from scripts.benchlib import BUILD_DB, ROOT, built, records_fingerprint, reusable


def a_build(root: Path) -> None:
    root.mkdir()
    (root / BUILD_DB).write_text("a build")


def test_a_build_of_the_same_records_is_reused_and_any_other_is_removed(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "inject-demo"
    same = records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=0)))
    assert reusable(root, same) is False and not root.exists()  # nothing built yet
    a_build(root)
    assert reusable(root, same) is False and not root.exists()  # built before fingerprints: rebuilt
    assert "before its records were fingerprinted" in capsys.readouterr().err
    a_build(root)
    built(root, same)
    assert reusable(root, same) is True and (root / BUILD_DB).exists()
    assert reusable(root, records_fingerprint(list(generate(n_sessions=3, seed=8, end_ms=0)))) is False
    assert not root.exists() and "from other records" in capsys.readouterr().err
    a_build(root)
    built(root, same)
    (root / BUILD_DB).unlink()  # marked, but its database gone: not a build to measure
    assert reusable(root, same) is False and not root.exists()


def test_a_folder_that_is_no_build_is_never_removed(tmp_path: Path) -> None:
    root = tmp_path / "inject-demo"
    root.mkdir()
    (root / "notes.txt").write_text("the user's")
    with pytest.raises(SystemExit, match="holds no claude-mem.db"):
        reusable(root, "0" * 64)
    assert (root / "notes.txt").read_text() == "the user's"


def test_the_fingerprint_is_the_same_in_every_process() -> None:
    """Taken in another interpreter with another hash seed, the demo's fingerprint is the same: a
    build made yesterday by another run is reused (dates are left out by the callers: end_ms=0)."""
    code = ("from memsync.worker.seed.demo import generate; from scripts.benchlib import records_fingerprint; "
            "print(records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=0))))")
    there = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={"PYTHONHASHSEED": "12345"},
                           capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert there == records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=0)))
