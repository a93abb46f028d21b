"""The wheel a user installs: built without warnings, one top-level package, and working on its own.

Built from a copy of the project outside the checkout, installed into a fresh virtual environment
(its dependencies come from pip's cache after ``make``; about a minute), and run from a directory
that holds a user's own ``config.py`` and ``search/`` package, which must not shadow memsync's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.pkgmap import package_dir

ROOT = Path(__file__).resolve().parents[2]
# Folder at the repository root -> its place in the wheel (cli -> memsync, config -> memsync/config, ...).
PACKAGE_DIRS = {folder: name.replace(".", "/") for name, folder in package_dir().items()}
# "SetuptoolsDeprecationWarning:", "BuildBackendWarning:" ... (distutils' lowercase "warning: ... byte-compiling
# is disabled" lines are information, not warnings about the project).
WARNING = re.compile(r"\b\w*Warning:")

pytestmark = pytest.mark.slow


def run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel built from a copy of the project's files, and the build's whole output."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    listed = run(["git", "ls-files", "-co", "--exclude-standard"], ROOT).stdout.split("\n")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file() and not rel.startswith(("build/", ".venv/")):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(work / "dist"), str(src)], work)
    (path,) = (work / "dist").glob("memsync-*.whl")
    return path, built.stdout + built.stderr


def test_build_prints_no_warning(wheel: tuple[Path, str]) -> None:
    _, output = wheel
    assert "Successfully built memsync" in output
    warnings = [line.strip() for line in output.splitlines() if WARNING.search(line)]
    assert not warnings, warnings


def test_the_wheel_holds_the_memsync_package_only(wheel: tuple[Path, str]) -> None:
    names = zipfile.ZipFile(wheel[0]).namelist()
    assert {n.split("/")[0] for n in names} == {"memsync", "memsync-0.1.0.dist-info"}
    # Every module of the package folders is in it (setup.py derives the sub-packages from the
    # package map: a new sub-folder cannot be left out), and nothing of scripts/ or tests/.
    expected = {f"{PACKAGE_DIRS[p.relative_to(ROOT).parts[0]]}/{'/'.join(p.relative_to(ROOT).parts[1:])}"
                for folder in PACKAGE_DIRS for p in (ROOT / folder).rglob("*.py")}
    assert expected <= set(names), sorted(expected - set(names))
    assert {"memsync/config/data/minilm-tokenizer.json", "memsync/servers/page/index.html",
            "memsync/py.typed"} <= set(names)
    assert not [n for n in names if "bench" in n or "soak" in n or "/tests/" in n]
    entry_points = zipfile.ZipFile(wheel[0]).read("memsync-0.1.0.dist-info/entry_points.txt").decode()
    assert "memsync = memsync.entry:main" in entry_points


def test_installed_wheel_runs_beside_a_users_own_config_and_search(wheel: tuple[Path, str]) -> None:
    work = wheel[0].parent.parent
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], work)
    # --no-compile: byte-compiling every dependency is a third of the install's CPU (13 of 37 s),
    # and what runs here compiles what it imports anyway.
    run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-compile", str(wheel[0])], work, timeout=900)
    user = work / "user-project"  # a program of the user's, with modules named like our folders
    (user / "search").mkdir(parents=True)
    (user / "config.py").write_text("USER = 'config'\n")
    (user / "search" / "__init__.py").write_text("USER = 'search'\n")
    help_text = run([str(venv / "bin" / "memsync"), "--help"], user).stdout
    assert "resync" in help_text and "search" in help_text
    probe = ("import config, search\n"
             "from memsync.search import Searcher\n"
             "import memsync.config.settings, memsync.worker.loop.daemon, memsync.servers.http_api, memsync.main\n"
             "assert config.USER == 'config' and search.USER == 'search'\n"
             "print(Searcher.__module__, memsync.config.settings.__file__)\n")
    out = run([str(venv / "bin" / "python"), "-c", probe], user).stdout
    assert out.startswith("memsync.search.") and str(venv) in out
    module = run([str(venv / "bin" / "python"), "-m", "memsync", "--help"], user).stdout
    assert module == help_text
