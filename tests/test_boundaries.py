"""Import direction: config ← worker, config ← search; worker and search never import each other;
nothing imports scripts; only the adapters import chromadb."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMA_ADAPTERS = {"config/stores.py", "worker/sink.py"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(("package", "forbidden"), [
    ("config", {"worker", "search", "scripts"}),
    ("worker", {"search", "scripts"}),
    ("search", {"worker", "scripts"}),
])
def test_dependencies_point_one_way(package: str, forbidden: set[str]) -> None:
    for path in files(package):
        assert not imports(path) & forbidden, f"{path.relative_to(ROOT)} imports {imports(path) & forbidden}"


def test_only_adapters_import_chromadb() -> None:
    for package in ("config", "worker", "search"):
        for path in files(package):
            rel = str(path.relative_to(ROOT))
            if "chromadb" in imports(path):
                assert rel in CHROMA_ADAPTERS, rel


def test_search_exports() -> None:
    import search

    assert {"Searcher", "Filters", "Response", "Result", "Mode", "Order", "Format"} <= set(search.__all__)
