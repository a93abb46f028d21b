"""docs/development.md's statements about the test loop hold: the `make` commands it names exist in
the Makefile, the test counts it states are those of the suite (within 15%), its worker count is
the Makefile's."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs/development.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


@cache
def collected() -> tuple[int, int]:
    """(all tests, the tests `make test-fast` runs) from one collection: `-m slow` selects the slow
    ones and pytest's last line counts the rest as deselected."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:xdist",
                          "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    last = out.stdout.strip().splitlines()[-1]
    found = re.match(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", last)
    assert found, out.stdout[-2000:] + out.stderr[-2000:]
    return int(found[2]), int(found[3])


def stated(pattern: str) -> int:
    found = re.search(pattern, " ".join(DOC.split()))
    assert found, f"docs/development.md no longer states {pattern!r}"
    return int(found[1])


def test_the_make_commands_it_names_exist() -> None:
    targets = set(re.findall(r"^([\w-]+):", MAKEFILE, re.M))
    named = set(re.findall(r"`make ([\w-]+)`", DOC))
    assert {"test", "test-fast", "lint"} <= named
    assert named <= targets, named - targets


@pytest.mark.slow  # a collection of the whole suite: 15-20 s
def test_the_counts_it_states_are_the_suites() -> None:
    total, fast = collected()
    for what, count, real in (("whole suite", stated(r"whole suite \(about (\d+) tests"), total),
                              ("test-fast", stated(r"runs the unit tests \(about (\d+)\)"), fast)):
        assert abs(count - real) <= 0.15 * real, f"docs/development.md: {what} about {count} tests, collected {real}"


def test_the_workers_it_states_are_the_makefiles() -> None:
    workers = re.search(r"^TEST_WORKERS \?= (\d+)", MAKEFILE, re.M)
    assert workers and stated(r"on (\d+) xdist workers") == int(workers[1])
