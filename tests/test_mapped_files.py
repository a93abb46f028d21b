"""No code truncates a memory-mapped kind of file in place. A page of a mapping past the end of a
file cut short under it is a SIGBUS in whichever process reads it (a pytest worker that searched
the copy earlier, a search server, the worker), with no Python frame that names the cause.

What memsync's processes map (``docs/operations.md``, "Memory-mapped files"): the vector copy's
``vectors*.i8`` and ``entries*.bin``, tantivy's segment files, SQLite's ``-shm`` WAL index. A
shrinking write (``truncate``, ``write_bytes``, ``write_text``, ``open`` for ``w``, ``os.open``
with ``O_TRUNC``, ``shutil.copy*`` onto a path, ``np.memmap`` ``w+``) whose target names one of
them, followed through the names it was assigned from in its function (and one level of call
sites for a parameter), fails this test unless its line says ``mapped-file write reviewed`` and
why no mapping of that inode can be read meanwhile. Damage a file in place at the same size
(``r+b``), or write a shorter copy and ``os.replace`` it (a new inode)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config.settings import Settings
from scripts.pkgmap import source_folders

ROOT = Path(__file__).resolve().parent.parent
MARKER = "mapped-file write reviewed"
# The names of the mapped kinds as code spells them: the copy's constants and builders, file
# suffixes, tantivy's segment suffixes (config.formats.text_index SEGMENT_FILES, and .del), -shm.
MAPPED = re.compile(r"VECTORS_FILE|ENTRIES_FILE|vectors_file|entries_file|\.i8\b|entries[.\w]*\.bin|SEGMENT_FILES"
                    r"|\.(?:idx|term|store|fast|fieldnorm|pos|del)\b|-shm\b")
DEPTH = 5  # names followed back through assignments


def _mode(call: ast.Call, position: int) -> str:
    """The text of a call's mode argument (positional ``position`` or ``mode=``), '' when absent."""
    node = call.args[position] if len(call.args) > position else \
        next((k.value for k in call.keywords if k.arg in ("mode", "flags")), None)
    return ast.unparse(node) if node is not None else ""


def shrinking_target(call: ast.Call) -> ast.expr | None:
    """The file a call may make shorter in place (None: the call shrinks nothing)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
    args = call.args
    if owner == "os" and name in ("truncate", "ftruncate") and args:
        return args[0]
    if owner == "os" and name == "open" and args:
        return args[0] if "O_TRUNC" in _mode(call, 1) else None
    if owner == "shutil" and name in ("copy", "copy2", "copyfile") and len(args) > 1:
        return args[1]
    if name == "memmap" and args:
        return args[0] if "w" in _mode(call, 2) else None
    if isinstance(func, ast.Attribute) and name in ("truncate", "write_bytes", "write_text"):
        return func.value
    if name == "open" and isinstance(func, ast.Name) and args:
        return args[0] if "w" in _mode(call, 1) else None
    if name == "open" and isinstance(func, ast.Attribute) and owner not in ("os", "io"):
        return func.value if "w" in _mode(call, 0) else None  # Path.open("w")
    return None


class _Scope:
    """What each name of a function (or module) was bound to: assignments, ``with ... as``,
    loop and comprehension targets; a parameter to the arguments of the module's calls."""

    def __init__(self, node: ast.AST, calls: list[ast.Call]) -> None:
        self.bound: dict[str, list[ast.expr]] = {}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    self._bind(target, sub.value)
            elif isinstance(sub, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and sub.value is not None:
                self._bind(sub.target, sub.value)
            elif isinstance(sub, ast.withitem) and sub.optional_vars is not None:
                self._bind(sub.optional_vars, sub.context_expr)
            elif isinstance(sub, ast.For | ast.comprehension):
                self._bind(sub.target, sub.iter)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
            for call in calls:
                called = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                if called != node.name:
                    continue
                for param, arg in zip(params, call.args, strict=False):
                    self.bound.setdefault(param, []).append(arg)
                for kw in call.keywords:
                    if kw.arg in params:
                        self.bound.setdefault(kw.arg, []).append(kw.value)

    def _bind(self, target: ast.AST, value: ast.expr) -> None:
        for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
            self.bound.setdefault(name, []).append(value)

    def texts(self, node: ast.expr, depth: int = DEPTH, seen: frozenset[str] = frozenset()) -> Iterator[str]:
        """The source of ``node`` and of what its names were bound to, ``depth`` steps back."""
        yield ast.unparse(node)
        if depth == 0:
            return
        for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - seen:
            for value in self.bound.get(name, []):
                yield from self.texts(value, depth - 1, seen | {name})


def violations(source: str, where: str = "<source>") -> list[str]:
    """Each shrinking write in ``source`` whose target names a mapped kind, without the marker."""
    module = ast.parse(source)
    lines = source.splitlines()
    functions = [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    calls = [c for c in ast.walk(module) if isinstance(c, ast.Call)]
    scopes: dict[ast.AST, _Scope] = {}
    found = []
    for call in calls:
        target = shrinking_target(call)
        if target is None:
            continue
        inner = [f for f in functions if f.lineno <= call.lineno <= (f.end_lineno or f.lineno)]
        node = min(inner, key=lambda f: (f.end_lineno or f.lineno) - f.lineno) if inner else module
        scope = scopes.get(node) or scopes.setdefault(node, _Scope(node, calls))
        named = next((t for t in scope.texts(target) if MAPPED.search(t)), None)
        if named is None:
            continue
        if any(MARKER in line for line in lines[call.lineno - 1:call.end_lineno or call.lineno]):
            continue
        found.append(f"{where}:{call.lineno}: {ast.unparse(call)[:90]} (target: {named[:60]})")
    return found


VIOLATIONS = {
    "truncate in place": "def f(d):\n    with open(d / ENTRIES_FILE, 'r+b') as fh:\n        fh.truncate(10)\n",
    "os.truncate": "def f(directory):\n    target = directory / VECTORS_FILE\n    os.truncate(target, 0)\n",
    "write_bytes onto a segment": "def f(p):\n    seg = next(p.glob('*.idx'))\n    seg.write_bytes(b'')\n",
    "open for w": "def f(d, layout):\n    with open(d / vectors_file(layout), 'wb') as fh:\n        fh.write(b'')\n",
    "shutil.copy onto": "def f(a, d):\n    shutil.copy(a, d / 'entries.3.bin')\n",
    "through a parameter": "def damage(path):\n    path.write_bytes(b'x')\n\ndef g(d):\n    damage(d / ENTRIES_FILE)\n",
    "memmap w+": "def f(d):\n    np.memmap(d / 'vectors.i8', np.int8, 'w+', shape=(4,))\n",
    "the WAL index": "def f(db):\n    (db.parent / (db.name + '-shm')).write_bytes(b'')\n",
}


@pytest.mark.parametrize("source", VIOLATIONS.values(), ids=VIOLATIONS.keys())
def test_the_scan_finds_a_shrinking_write_of_a_mapped_file(source: str) -> None:
    found = violations(source)
    assert len(found) == 1
    line = int(found[0].split(":")[1])
    lines = source.splitlines()
    lines[line - 1] += f"  # {MARKER}: a test of the scan"
    assert violations("\n".join(lines)) == []  # the marker on the write's line clears it


@pytest.mark.parametrize("source", [
    "def f(d):\n    with open(d / ENTRIES_FILE, 'r+b') as fh:\n        fh.write(b'x')\n",  # same size, in place
    "def f(d):\n    (d / MANIFEST_FILE).write_text('{}')\n",  # read whole, never mapped
    "def f(d):\n    tmp = d / 'x.tmp'\n    tmp.write_bytes(b'')\n    os.replace(tmp, d / ENTRIES_FILE)\n",  # new inode
    "def f(d):\n    (d / 'meta.json').write_text('{damaged')\n",  # tantivy reads meta.json whole
    "def f(d, layout):\n    with open(d / vectors_file(layout), 'xb') as fh:\n        fh.write(b'')\n",
])
def test_the_scan_leaves_safe_writes(source: str) -> None:
    assert violations(source) == []


def test_no_code_shrinks_a_mapped_file_in_place() -> None:
    found = [v for folder in source_folders() for path in sorted((ROOT / folder).rglob("*.py"))
             for v in violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert found == [], (f"in-place shrinking write of a memory-mapped file kind (SIGBUS in a reader): replace "
                         f"it with a new file and os.replace, or overwrite at the same size, or mark the "
                         f"line '# {MARKER}: <why no mapping can be read>':\n" + "\n".join(found))


# What a sync and searches in one process may map under the data directory: the list above.
MAPPED_NAME = re.compile(r"(?:vectors(?:\.\d+)?\.i8|entries(?:\.\d+)?\.bin"
                         r"|[0-9a-f]{32}\.(?:idx|term|store|fast|fieldnorm|pos)|[0-9a-f]{32}\.\d+\.del|.*-shm)"
                         r"( \(deleted\))?")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps (Linux)")
def test_a_sync_and_searches_map_only_the_listed_kinds(settings: Settings) -> None:
    """The audit, checked: embedded Chroma (its SQLite file, its HNSW files) maps nothing, SQLite
    maps no database file (mmap_size 0), so a new kind of mapping means the list and the scan above
    must be looked at again."""
    from memsync.search import Filters, Mode, Searcher, SearchRequest
    from memsync.worker.pipeline.resync import resync
    from tests.conftest import FakeEmbedder, make_db, mixed_records

    make_db(settings.db, mixed_records(20))
    resync(settings, embedder=FakeEmbedder())
    engine = Searcher(settings, embedder=FakeEmbedder())
    try:
        for mode in (Mode.HYBRID, Mode.SEMANTIC, Mode.LEXICAL):
            engine.search(SearchRequest(query="caching", filters=Filters(project="alpha"), window_days=0, mode=mode))
        root = str(settings.data_dir.parent)
        with open("/proc/self/maps") as maps:
            mapped = {line.split(None, 5)[5].strip() for line in maps if root in line}
    finally:
        engine.close()
    names = sorted(Path(m).name for m in mapped)
    assert [n for n in names if not MAPPED_NAME.fullmatch(n)] == [], names
    assert any(n.endswith(".i8") for n in names) and any(n.endswith(".idx") for n in names), names
