"""Import direction inside the ``memsync`` package, checked on the source with ``ast``.

The shared kernel (config, embedding, chroma) ← worker, the kernel ← search; worker and search
never import each other; servers sit on the libraries; the command (``cli/``: ``memsync.main``,
``memsync.commands``) sits on top and nothing below imports it; nothing imports ``scripts``; only
the adapters import chromadb; and no module imports one of our folders by its bare name (``import
config``), which would shadow or be shadowed by a user's own ``config`` module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.pkgmap import NOT_INSTALLED, package_dir

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = package_dir()  # import name -> folder: a module's layer is the folder it lives in
FOLDERS = list(PACKAGE_DIR.values())
CHROMA_ADAPTERS = {"chroma/collections.py", "worker/pipeline/sink.py"}


def absolute_imports(path: Path) -> Iterator[tuple[ast.Import | ast.ImportFrom, list[str]]]:
    """Each absolute import statement of a file, with the modules it may name: ``import a, b``
    names ``a`` and ``b``; ``from a.b import c`` names ``a.b``, then ``a.b.c`` (``c`` may be a module)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield node, [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node, [node.module, *(f"{node.module}.{a.name}" for a in node.names)]


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name a file imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    return {module for _, modules in absolute_imports(path) for module in modules}


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


# The worker's rooms, bottom to top: a room imports only rooms of a lower layer, never one of its own
# layer or above. ``process`` (logs, freed memory, signals) and ``seed`` stand alone; ``checks`` and
# ``loop`` both sit on the pass and never import each other.
WORKER_LAYERS = (("process", "seed"), ("rows",), ("stores",), ("pipeline",), ("checks", "loop"))
LAYER_OF_ROOM = {room: n for n, layer in enumerate(WORKER_LAYERS) for room in layer}


def room_of(module: str) -> str | None:
    """The worker room of a ``memsync.worker.<room>...`` module (the room's package included)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["memsync", "worker"] and len(parts) > 2 and parts[2] in LAYER_OF_ROOM else None


def own_room(path: Path) -> str:
    return path.relative_to(ROOT / "worker").parts[0]


def rooms_imported(path: Path, own: str) -> dict[str, int]:
    """Every room other than ``own`` a module imports, with the line of its first import."""
    found: dict[str, int] = {}
    for node, modules in absolute_imports(path):
        for room in {r for m in modules if (r := room_of(m)) is not None and r != own}:
            found.setdefault(room, node.lineno)
    return found


def room_files() -> list[Path]:
    return [p for p in files("worker") if p.parent != ROOT / "worker"]


class TestWorkerRooms:
    """The worker's rooms import one way (``WORKER_LAYERS``), checked on every import statement of a
    module: at the top, inside a function, and under ``TYPE_CHECKING`` alike. A deferred import is
    still the lower room needing the higher one to run, and a type-only one still makes the lower
    room's reader and its type checker read the higher room; either turns into a cycle the day the
    name is needed at run time. Relative imports are not used (the bare-name test above keeps imports
    absolute)."""

    def test_every_room_is_in_the_order(self) -> None:
        rooms = {p.name for p in (ROOT / "worker").iterdir() if (p / "__init__.py").exists()}
        assert rooms == set(LAYER_OF_ROOM), "a worker room missing from WORKER_LAYERS, or one that is gone"

    def test_no_room_imports_one_above_or_beside_it(self) -> None:
        bad = []
        for path in room_files():
            own = own_room(path)
            bad += [f"{path.relative_to(ROOT)}:{line} (worker/{own}/) imports worker/{room}/, not below it"
                    for room, line in rooms_imported(path, own).items() if LAYER_OF_ROOM[room] >= LAYER_OF_ROOM[own]]
        assert not bad, "\n".join(bad)

    def test_no_import_cycle_between_rooms(self) -> None:
        """Read from the imports alone, whatever the order above says: no room reaches itself."""
        graph: dict[str, set[str]] = {room: set() for room in LAYER_OF_ROOM}
        for path in room_files():
            graph[own_room(path)] |= set(rooms_imported(path, own_room(path)))

        def reaches(start: str) -> set[str]:
            seen, todo = set[str](), [start]
            while todo:
                for room in graph[todo.pop()] - seen:
                    seen.add(room)
                    todo.append(room)
            return seen

        looping = sorted(room for room in graph if room in reaches(room))
        assert not looping, f"rooms that import themselves back: {looping} ({graph})"
        assert {"rows", "stores", "process"} <= graph["pipeline"]  # not a vacuous pass

    def test_the_checker_sees_every_kind_of_import(self, tmp_path: Path) -> None:
        """Guard against a vacuous pass: a top-level, a deferred and a type-only import all count."""
        module = tmp_path / "probe.py"
        module.write_text(
            "from typing import TYPE_CHECKING\n"
            "import memsync.worker.loop.daemon\n"
            "if TYPE_CHECKING:\n    from memsync.worker.checks import verdict\n"
            "def f() -> None:\n    from memsync.worker.stores.vectorcopy import open_writer\n"
            "from memsync.worker.rows import state\n",
        )
        assert set(rooms_imported(module, "rows")) == {"loop", "checks", "stores"}


class TestRoomExports:
    """Each room's ``__init__`` exports, in ``__all__``, what other rooms and packages use, and imports
    none of its modules until a name is used: the command imports a room, and ``memsync --help`` (and
    the hook client) must not load numpy, tantivy or pydantic through it."""

    @staticmethod
    def declared(room: str) -> dict[str, str]:
        """Name -> module of the room, from the ``TYPE_CHECKING`` imports type checkers read."""
        tree = ast.parse((ROOT / "worker" / room / "__init__.py").read_text())
        block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
        prefix = f"memsync.worker.{room}."
        return {a.asname or a.name: node.module.removeprefix(prefix) for node in block.body
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix)
                for a in node.names}

    @pytest.mark.parametrize("room", sorted(LAYER_OF_ROOM))
    def test_all_is_what_type_checkers_read_and_what_runs(self, room: str) -> None:
        import importlib

        package = importlib.import_module(f"memsync.worker.{room}")
        declared = self.declared(room)
        assert sorted(package.__all__) == sorted(declared)
        for name, module in declared.items():
            assert getattr(package, name) is getattr(importlib.import_module(f"memsync.worker.{room}.{module}"), name)

    @pytest.mark.parametrize("room", sorted(LAYER_OF_ROOM))
    def test_no_export_shares_a_module_name(self, room: str) -> None:
        """Importing a module sets it on its package under its name, which would hide the export."""
        modules = {p.stem for p in (ROOT / "worker" / room).glob("*.py")}
        assert not set(self.declared(room)) & modules

    @pytest.mark.parametrize("room", sorted(LAYER_OF_ROOM))
    def test_importing_a_room_imports_none_of_its_modules(self, room: str) -> None:
        tree = ast.parse((ROOT / "worker" / room / "__init__.py").read_text())
        run_time = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        assert {ast.unparse(n) for n in run_time} <= {"from typing import TYPE_CHECKING",
                                                       "from memsync.worker import lazy_exports"}
