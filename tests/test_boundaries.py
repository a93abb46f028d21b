"""Import direction inside the ``memsync`` package, checked on the source with ``ast``.

The shared kernel (config, embedding, chroma) ← worker, the kernel ← search; worker and search
never import each other; servers sit on the libraries; the command (``cli/``: ``memsync.main``,
``memsync.commands``) sits on top and nothing below imports it; nothing imports ``scripts``; only
the adapters import chromadb; and no module imports one of our folders by its bare name (``import
config``), which would shadow or be shadowed by a user's own ``config`` module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scripts.pkgmap import NOT_INSTALLED, package_dir

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = package_dir()  # import name -> folder: a module's layer is the folder it lives in
FOLDERS = list(PACKAGE_DIR.values())
CHROMA_ADAPTERS = {"chroma/collections.py", "worker/pipeline/sink.py"}


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name a file imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def layer_of(module: str) -> str | None:
    """The layer (folder) of a ``memsync.*`` module: its longest prefix in the package map (cli for the root)."""
    parts = module.split(".")
    prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
    return next((PACKAGE_DIR[p] for p in prefixes if p in PACKAGE_DIR), None)


def layers_imported(path: Path) -> set[str]:
    return {layer for m in imported_modules(path) if (layer := layer_of(m)) is not None}


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("config", {"worker", "search", "servers", "cli"}),
    ("embedding", {"worker", "search", "servers", "cli"}),
    ("chroma", {"worker", "search", "servers", "cli"}),
    ("worker", {"search", "servers", "cli"}),
    ("search", {"worker", "servers", "cli"}),
    ("servers", {"cli"}),
])
def test_dependencies_point_one_way(folder: str, forbidden: set[str]) -> None:
    checked = 0
    for path in files(folder):
        bad = layers_imported(path) & forbidden
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
        checked += 1
    assert checked > 3, f"no modules found in {folder}/"


def test_the_checker_sees_memsync_imports() -> None:
    """Guard against a vacuous pass: the layers are read from the package map."""
    assert layer_of("memsync.search.engine") == "search"
    assert layer_of("memsync.main") == "cli"
    assert layer_of("memsync") == "cli"
    assert layer_of("memsync.commands.search") == "cli"
    assert layer_of("memsync.chroma.process") == "chroma"
    assert layer_of("memsync.embedding.remote") == "embedding"
    assert layer_of("search.engine") is None
    assert "search" in layers_imported(ROOT / "servers" / "params.py")
    assert "config" in layers_imported(ROOT / "worker" / "pipeline" / "sync.py")


@pytest.mark.parametrize("folder", [*FOLDERS, *NOT_INSTALLED])
def test_nothing_imports_a_bare_folder_name_or_scripts(folder: str) -> None:
    bare = set(FOLDERS)
    for path in files(folder):
        roots = {m.split(".")[0] for m in imported_modules(path)}
        assert not roots & bare, f"{path.relative_to(ROOT)} imports {roots & bare} (use memsync.*)"
        if folder not in NOT_INSTALLED:
            assert "scripts" not in roots, f"{path.relative_to(ROOT)} imports scripts"


def test_only_adapters_import_chromadb() -> None:
    for folder in FOLDERS:
        for path in files(folder):
            rel = str(path.relative_to(ROOT))
            if any(m.split(".")[0] == "chromadb" for m in imported_modules(path)):
                assert rel in CHROMA_ADAPTERS, rel


def test_search_exports() -> None:
    import memsync.search

    assert {"Searcher", "Filters", "Response", "Result", "Mode", "Order", "Format"} <= set(memsync.search.__all__)


def test_no_servers_module_imports_one_that_imports_it_back() -> None:
    """Within servers/ imports point one way (deferred imports count too): what two modules share
    lives in a third both import (``mcp_boundary`` for the two MCP profiles), so a module can be
    read, and changed, without the one that imports it."""
    from scripts.pkgmap import module_name

    modules = {name: path for path in files("servers") if (name := module_name(path)) is not None}
    graph = {name: {m for m in imported_modules(path) if m in modules and m != name} for name, path in modules.items()}

    def comes_back(start: str) -> bool:
        seen, todo = set[str](), [start]
        while todo:
            for m in graph[todo.pop()] - seen:
                if m == start:
                    return True
                seen.add(m)
                todo.append(m)
        return False

    looping = sorted(name for name in graph if comes_back(name))
    assert not looping, f"modules of servers/ that import themselves back: {looping}"
    assert "memsync.servers.mcp_boundary" in graph["memsync.servers.claude_mem_tools"]  # not a vacuous pass
