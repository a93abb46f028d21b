"""A benchmark reuses a build (database and synced store) only when it was made from the records it
would make now: a changed generator or conversion rebuilds it instead of being measured as current."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.worker.seed.demo import generate
from scripts.benchlib import BUILT_FROM, built, records_fingerprint, reusable


def test_a_build_of_the_same_records_is_reused_and_any_other_is_removed(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "inject-demo"
    same = records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=0)))
    assert reusable(root, same) is False and not root.exists()  # nothing built yet: nothing removed
    root.mkdir()
    (root / "claude-mem.db").write_text("a build")
    assert reusable(root, same) is False and not root.exists()  # built before fingerprints: rebuilt
    assert "before its records were fingerprinted" in capsys.readouterr().err
    root.mkdir()
    (root / "claude-mem.db").write_text("a build")
    built(root, same)
    assert reusable(root, same) is True and (root / "claude-mem.db").exists()
    assert reusable(root, records_fingerprint(list(generate(n_sessions=3, seed=8, end_ms=0)))) is False
    assert not root.exists() and "from other records" in capsys.readouterr().err
    assert BUILT_FROM not in {p.name for p in tmp_path.iterdir()}


def test_the_fingerprint_is_the_records_not_the_clock() -> None:
    """The demo's dates end today; its fingerprint is taken with the clock left out (end_ms=0), so a
    build from yesterday with the same generator is still the same build."""
    assert records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=0))) == \
        records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=0)))
    assert records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=0))) != \
        records_fingerprint(list(generate(n_sessions=3, seed=7, end_ms=86_400_000)))
