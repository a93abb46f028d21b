"""Static checks are part of the suite: ruff on everything, mypy strict on the libraries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("command", [
    [str(BIN / "ruff"), "check", "config", "worker", "search", "servers", "scripts", "tests"],
    [str(BIN / "mypy")],
], ids=["ruff", "mypy"])
def test_static_checks_pass(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def test_readme_settings_table_lists_every_setting() -> None:
    """The README's settings table is the user's reference: a setting missing there is invisible."""
    from config.settings import Settings

    readme = (ROOT / "README.md").read_text()
    missing = [n for n in Settings.model_fields if f"| `{n}` | `MEMSYNC_{n.upper()}` |" not in readme]
    assert not missing, f"README settings table lacks: {missing}"
