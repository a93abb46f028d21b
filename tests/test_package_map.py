"""The package map has one owner, pyproject.toml's ``[tool.setuptools.package-dir]``, and the install follows it.

A folder of Python code at the root must be in the map or be one of the folders that are not
installed (scripts/, tests/); every module of a mapped folder must import, as installed, from that
very file (strict editable mode links each file when it is installed: one added since needs
``make``); and pyright, which follows imports by path as editors do, must resolve every import.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.pkgmap import NOT_INSTALLED, ROOT, module_name, package_dir, package_folders, source_folders
from tests.test_boundaries import absolute_imports

BIN = Path(sys.executable).parent


def test_every_folder_of_python_code_is_in_the_map() -> None:
    """A new top-level package folder is mapped (and so installed) or named as not installed: never dropped."""
    code = {p.parent.name for p in ROOT.glob("*/__init__.py")} | {p.parent.name for p in ROOT.glob("*/*.py")}
    code -= {p.name for p in ROOT.iterdir() if p.name.startswith(".") or p.name in ("build", "dist")}
    unmapped = sorted(code - set(package_folders()) - set(NOT_INSTALLED))
    assert not unmapped, f"folders of Python code missing from pyproject's [tool.setuptools.package-dir]: {unmapped}"


def test_import_names_follow_the_map() -> None:
    """The reader maps a file to its import name through pyproject's table (cli/ is ``memsync`` itself)."""
    assert package_dir()["memsync"] == "cli"
    assert module_name(ROOT / "search" / "engine.py") == "memsync.search.engine"
    assert module_name(ROOT / "cli" / "commands" / "__init__.py") == "memsync.commands"
    assert module_name(ROOT / "scripts" / "pkgmap.py") is None


@pytest.mark.parametrize("folder", package_folders())
def test_every_module_imports_from_its_own_file(folder: str) -> None:
    """The installed package is the checkout: each module resolves, through the install, to its mapped file."""
    paths = sorted((ROOT / folder).rglob("*.py"))
    assert paths, f"no modules in {folder}/"
    for path in paths:
        name = module_name(path)
        assert name is not None
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, f"{name} is not installed: run make (reinstalls)"
        assert Path(spec.origin).resolve() == path, (name, spec.origin)


def imported_modules() -> dict[str, str]:
    """Every module an ``import`` or absolute ``from ... import`` names in the source folders (but
    for the lines that tell pyright to ignore them: a peer's optional extra), with a file importing it."""
    names: dict[str, str] = {}
    for folder in source_folders():
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = path.read_text().splitlines()
            for node, modules in absolute_imports(path):
                if "pyright: ignore" not in lines[node.lineno - 1]:
                    # `from a.b import c`: the module is a.b (c may be any name of it)
                    for name in modules if isinstance(node, ast.Import) else modules[:1]:
                        names.setdefault(name, f"{path.relative_to(ROOT)}:{node.lineno}")
    return dict(sorted(names.items()))


@pytest.mark.slow
def test_pyright_resolves_every_import(tmp_path: Path) -> None:
    """pyright follows ``memsync.search.engine`` to search/engine.py, and every module the source
    folders import; a missing module is an error.

    A probe outside the checkout imports each of them (all imports here are absolute, so where they
    are written does not change how they resolve; a module found only beside its importer would be
    reported here), then one that does not exist: exactly that one must be reported, so the run is
    not a vacuous pass. Only the probe is checked, not the whole tree: `make lint` runs pyright over
    every folder (40 s of CPU against 5).
    """
    modules = imported_modules()
    assert "memsync.search.engine" in modules and len(modules) > 100, modules
    probe = tmp_path / "probe.py"
    probe.write_text("".join(f"import {name}  # {where}\n" for name, where in modules.items())
                     + "import memsync.search.no_such_module\n")
    # --project: this checkout's pyproject.toml, whatever config file a folder above the probe or the
    # checkout may hold (pyright looks upwards; a stray /tmp/pyrightconfig.json once took over).
    result = subprocess.run([str(BIN / "pyright"), "--project", str(ROOT / "pyproject.toml"), "--pythonpath",
                             sys.executable, str(probe)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    errors = [line.strip() for line in result.stdout.splitlines() if "- error:" in line]
    written = probe.read_text().splitlines()
    where = [written[int(e.split(":")[1]) - 1] for e in errors if e.startswith(f"{probe}:")]  # the importer
    assert errors == [f'{probe}:{len(modules) + 1}:8 - error: Import "memsync.search.no_such_module" could not be '
                      "resolved (reportMissingImports)"], "\n".join([*where, result.stdout, result.stderr])
