"""The servers' layout stays one a newcomer can extend: every tool and endpoint family module is
in its registration table, and no function of servers/ grows back into a factory of everything."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.servers import endpoints, tools

SERVERS = Path(__file__).resolve().parents[2] / "servers"
MAX_FUNCTION_LINES = 80  # def to the end of its body


@pytest.mark.parametrize(("package", "families", "helpers"), [
    ("tools", tools.FAMILIES, {"args", "kit"}),
    ("endpoints", endpoints.FAMILIES, {"kit"}),
])
def test_every_family_module_is_registered(package: str, families: tuple[Callable[..., None], ...],
                                           helpers: set[str]) -> None:
    """A module of tools/ or endpoints/ (but the shared helpers) is a family whose ``register`` is in FAMILIES."""
    names = {p.stem for p in (SERVERS / package).glob("*.py")} - {"__init__"} - helpers
    modules = {name: importlib.import_module(f"memsync.servers.{package}.{name}") for name in names}
    assert {name for name, module in modules.items() if module.register in families} == names
    assert len(families) == len(names)


def test_no_function_of_servers_is_longer_than_80_lines() -> None:
    long = [f"{path.relative_to(SERVERS)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(SERVERS.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long
