"""The test loop itself: ``make test`` hands out whole files to its xdist workers.

tests/conftest.py gives each file's tests an xdist group; pytest-xdist's ``--dist loadgroup`` then
runs a group on one worker. That took two things that failed silently before: the conftest's hook
must run before xdist's own (``tryfirst``), and pytest must be one whose test ids xdist can rename
(below 9.2, pinned in pyproject.toml). Either missing, every test was handed out on its own and
nothing said so.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.benchlib import PORT_SLICE, TEST_PORTS_LOW, free_port

ROOT = Path(__file__).resolve().parent.parent
TESTS_PER_FILE = 12  # enough that xdist's load scheduling splits an ungrouped file across 2 workers


def test_each_files_tests_run_on_one_worker_in_their_order(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # The repository's grouping hook, as the suite's conftest defines it (imported, not copied).
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n")
    for name in ("first", "second"):
        body = "".join(f"def test_{n}() -> None:\n    pass\n\n\n" for n in range(TESTS_PER_FILE))
        (tmp_path / f"test_{name}.py").write_text(body)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-v",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d)\] \[\s*\d+%\] PASSED (test_\w+)\.py::test_(\d+)(@\S+)?", run.stdout, re.M)
    assert len(ran) == 2 * TESTS_PER_FILE, run.stdout[-3000:]
    for name in ("test_first", "test_second"):
        mine = [(worker, int(n), group) for worker, file, n, group in ran if file == name]
        assert {worker for worker, _, _ in mine} == {mine[0][0]}, f"{name} split across workers: {mine}"
        assert [n for _, n, _ in mine] == list(range(TESTS_PER_FILE)), f"{name} out of order: {mine}"
        assert {group for _, _, group in mine} == {f"@{name}.py"}


def test_ports_a_test_names_are_out_of_the_kernels_way() -> None:
    """free_port gives ports below the ephemeral range (no later bind to port 0, by any process,
    hands one out), in this worker's slice, never the same twice in a row, and skips a bound one."""
    first, end = PORT_SLICE
    if (first, end) == (0, 0):
        pytest.skip("no room below this machine's ephemeral range (or no /proc): the kernel chooses ports here")
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert TEST_PORTS_LOW <= first < end <= low
    a = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", a + 1 if a + 1 < end else first))
        b = free_port()
        assert first <= a < end and first <= b < end and b not in (a, held.getsockname()[1])
