"""The package's shape as a redesign measures it: functions with more than N parameters, and the
longest functions.

    .venv/bin/python -m scripts.code_shape [--over 6] [--longest 12]

Reads the installed folders (``scripts.pkgmap``) with ``ast``. A parameter is any named argument
but ``self``/``cls`` (``*args`` and ``**kwargs`` count one each); a function's length is its
lines from ``def`` to its last statement.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path

from scripts.pkgmap import ROOT, package_folders


@dataclass(frozen=True)
class Function:
    """One function or method: where it is, how many parameters it takes, how long it is."""

    where: str
    parameters: int
    lines: int


def functions(root: Path = ROOT) -> list[Function]:
    """Every function and method in the package's folders."""
    out: list[Function] = []
    for folder in package_folders(root):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = node.args
                    named = [x for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
                    count = len(named) + (a.vararg is not None) + (a.kwarg is not None)
                    end = node.end_lineno or node.lineno
                    out.append(Function(f"{path.relative_to(root)}:{node.lineno} {node.name}", count,
                                        end - node.lineno + 1))
    return out


def too_long(found: list[Function], limit: int, folders: tuple[str, ...]) -> list[Function]:
    """The functions of ``found`` in ``folders`` (top-level folder names) longer than ``limit`` lines,
    longest first."""
    held = [f for f in found if f.where.split("/", 1)[0] in folders and f.lines > limit]
    return sorted(held, key=lambda f: (-f.lines, f.where))


def main(argv: list[str] | None = None) -> int:
    """Print the two lists."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--over", type=int, default=6, help="list functions with more parameters than this")
    parser.add_argument("--longest", type=int, default=12, help="how many of the longest functions to list")
    args = parser.parse_args(argv)
    found = functions()
    over = sorted((f for f in found if f.parameters > args.over), key=lambda f: (-f.parameters, f.where))
    print(f"functions over {args.over} parameters: {len(over)}")
    for f in over:
        print(f"  {f.parameters:3d}  {f.where}")
    print(f"longest {args.longest} functions:")
    for f in sorted(found, key=lambda f: (-f.lines, f.where))[:args.longest]:
        print(f"  {f.lines:3d} lines  {f.where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
