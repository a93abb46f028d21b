"""Static checks are part of the suite: ruff on everything, mypy strict on the whole package as installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts.pkgmap import source_folders

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FOLDERS = source_folders()  # the package's folders (cli, config, worker, search, servers), scripts, tests


def mypy(*args: str) -> subprocess.CompletedProcess[str]:
    """mypy finds memsync as installed: the strict editable install's links to the mapped folders."""
    return subprocess.run([str(BIN / "mypy"), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_passes() -> None:
    result = subprocess.run([str(BIN / "ruff"), "check"], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


# mypy takes about a minute: `make lint` runs it, `make test` runs these, `make test-fast` does not.
# One xdist group: the runs share the checkout's .mypy_cache.
@pytest.mark.slow
@pytest.mark.xdist_group("mypy")
def test_mypy_strict_passes_on_the_package() -> None:
    result = mypy()
    assert result.returncode == 0, result.stdout + result.stderr
    # The whole package was checked, not an empty tree: the CLI, servers and every library.
    assert "no issues found in" in result.stdout
    checked = int(result.stdout.split("no issues found in ")[1].split()[0])
    on_disk = sum(1 for f in FOLDERS[:5] for p in (ROOT / f).rglob("*.py"))
    assert checked >= on_disk, (checked, on_disk)  # (+ the page's data folder, which mypy counts)


@pytest.mark.slow
@pytest.mark.xdist_group("mypy")
@pytest.mark.parametrize(("annotation", "fails"), [("int", True), ("str", False)])
def test_mypy_sees_types_across_packages(tmp_path: Path, annotation: str, fails: bool) -> None:
    """A wrong type across a package boundary is an error, not a silent ``Any``."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from memsync.config.claude_mem.schema import Kind\n"
        "from memsync.config.docids import format_doc_id\n"
        f"doc_id: {annotation} = format_doc_id(Kind.OBSERVATION, 1, 'title')\n"
    )
    result = mypy(str(probe))
    assert (result.returncode != 0) == fails, result.stdout + result.stderr
    if fails:
        assert "probe.py:3: error: Incompatible types in assignment" in result.stdout, result.stdout

