"""The package map as tests, lint and ``make`` read it: pyproject.toml's ``[tool.setuptools.package-dir]``.

The map's one owner is that table (import name -> folder at the repository root); this module only
reads it, so no test keeps a folder list of its own. ``python3 scripts/pkgmap.py folders|files``
prints the source folders or the package's files (``make`` reinstalls when the latter change: the
strict editable install links each file when it is installed).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Source folders at the root that are not installed: they import memsync, nothing imports them.
NOT_INSTALLED = ("scripts", "tests")


def package_dir(root: Path = ROOT) -> dict[str, str]:
    """Import name -> folder, in pyproject's order (``{"memsync": "cli", "memsync.config": "config", ...}``)."""
    table: dict[str, str] = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return dict(table)


def package_folders(root: Path = ROOT) -> list[str]:
    """The installed folders: ``["cli", "config", "embedding", "chroma", "worker", "search", "servers"]``."""
    return list(package_dir(root).values())


def source_folders(root: Path = ROOT) -> list[str]:
    """Every folder of Python source: the installed ones, then scripts/ and tests/."""
    return [*package_folders(root), *NOT_INSTALLED]


def module_name(path: Path, root: Path = ROOT) -> str | None:
    """The import name of a file under a mapped folder (``search/engine.py`` -> ``memsync.search.engine``)."""
    rel = path.resolve().relative_to(root)
    names = {folder: name for name, folder in package_dir(root).items()}
    if rel.parts[0] not in names or rel.suffix != ".py":
        return None
    parts = [*rel.parent.parts[1:], *([] if rel.stem == "__init__" else [rel.stem])]
    return ".".join([names[rel.parts[0]], *parts])


def package_files(root: Path = ROOT) -> list[str]:
    """Every file the package installs from, relative to the root (caches left out)."""
    return sorted(str(p.relative_to(root)) for folder in package_folders(root) for p in (root / folder).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


if __name__ == "__main__":
    listing = {"folders": source_folders, "files": package_files}
    if len(sys.argv) != 2 or sys.argv[1] not in listing:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(listing)}")
    print("\n".join(listing[sys.argv[1]]()))
