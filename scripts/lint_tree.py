"""Build ``build/lint/memsync/``: the installed package's layout as symlinks, for mypy.

The package's folders sit at the repository root (``memsync`` = ``cli/``, ``memsync.config`` =
``config/``, ...) and setuptools maps them at install time; mypy does not follow an editable
install's import hook, so ``make lint`` gives it this tree (``mypy_path = build/lint``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "lint"
SUBPACKAGES = ("config", "worker", "search", "servers")


def build(root: Path = ROOT) -> Path:
    """(Re)create the symlink tree and return its root (the directory that holds ``memsync/``)."""
    tree = root / "build" / "lint"
    pkg = tree / "memsync"
    if tree.exists():
        shutil.rmtree(tree)
    pkg.mkdir(parents=True)
    for entry in sorted((root / "cli").iterdir()):
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        (pkg / name).symlink_to(root / name, target_is_directory=True)
    return tree


if __name__ == "__main__":
    print(build(), file=sys.stderr)
