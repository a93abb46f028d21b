"""The sync pass's one background writer and its pacing: writes run in order on one thread, at
most ``bound`` chunks are unresolved, the first failure is raised on the caller's thread and nothing
after it runs, a drain waits for everything; chunks of a pass that may yield hold about its target
of embedding."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from memsync.worker.pipeline.overlap import OrderedWriter, Pacer

WAIT_S = 10.0  # a bound on waiting for the writer thread, never reached when the code is right


class Gate:
    """Writes that each wait for their gate to open, recording the order they ran in and on which thread."""

    def __init__(self, fail: set[int] | None = None) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.started: dict[int, threading.Event] = {}
        self.ran: list[int] = []
        self.threads: set[str] = set()
        self.fail = fail or set()

    def gate(self, job: int) -> threading.Event:
        self.started.setdefault(job, threading.Event())
        return self.gates.setdefault(job, threading.Event())

    def write(self, job: int) -> int:
        gate = self.gate(job)
        self.started[job].set()
        assert gate.wait(WAIT_S)
        self.threads.add(threading.current_thread().name)
        if job in self.fail:
            raise RuntimeError(f"write {job} failed")
        self.ran.append(job)
        return job * 10

    def open(self, *jobs: int) -> None:
        for job in jobs:
            self.gate(job).set()


class TestOrderedWriter:
    def test_writes_run_in_order_on_one_background_thread_and_results_come_back_in_order(self) -> None:
        gate = Gate()
        with OrderedWriter(gate.write, bound=10, name="test-writer") as writer:
            for job in range(5):
                writer.put(job)
            gate.open(*range(5))
            assert writer.drain() == [0, 10, 20, 30, 40]
        assert gate.ran == [0, 1, 2, 3, 4]
        assert len(gate.threads) == 1 and next(iter(gate.threads)).startswith("test-writer")
        assert threading.current_thread().name not in gate.threads

    def test_no_thread_is_started_without_a_write_and_none_is_left_after_close(self) -> None:
        before = set(threading.enumerate())
        with OrderedWriter(Gate().write, bound=2, name="test-idle") as writer:
            assert writer.drain() == []
            assert set(threading.enumerate()) == before
        gate = Gate()
        gate.open(1)
        with OrderedWriter(gate.write, bound=2, name="test-once") as writer:
            writer.put(1)
        assert gate.ran == [1]  # close waited for it
        assert not any(t.name.startswith("test-once") for t in threading.enumerate())

    def test_at_most_bound_bounded_writes_are_unresolved(self) -> None:
        gate = Gate()
        with OrderedWriter(gate.write, bound=2, name="test-bound") as writer:
            writer.put(0)
            writer.put(1)  # two unresolved: the bound (1 cannot run before its gate opens)
            opener = threading.Thread(target=gate.open, args=(0,))
            opener.start()
            writer.put(2)  # returns only once the oldest resolved
            assert gate.ran == [0]
            opener.join(WAIT_S)
            gate.open(1, 2)
            assert writer.drain() == [0, 10, 20]

    def test_an_unbounded_write_does_not_wait_for_room_and_still_runs_in_order(self) -> None:
        gate = Gate()
        with OrderedWriter(gate.write, bound=1, name="test-unbounded") as writer:
            writer.put(0)
            writer.put(1, bounded=False)  # the bound is full: it is queued at once all the same
            gate.open(0, 1)
            assert writer.drain() == [0, 10]
        assert gate.ran == [0, 1]

    def test_a_failed_write_is_raised_on_the_callers_thread_and_nothing_after_it_runs(self) -> None:
        gate = Gate(fail={1})
        writer = OrderedWriter(gate.write, bound=5, name="test-fail")
        try:
            for job in range(4):
                writer.put(job)
            moved: list[str] = []
            writer.after(lambda: moved.append("after 3"))
            gate.open(0, 1, 2, 3)
            with pytest.raises(RuntimeError, match="write 1 failed"):
                writer.drain()
            assert moved == []  # the action behind the failed write never ran
        finally:
            writer.close()
        assert gate.ran == [0]  # 2 and 3 were handed in after the failure: not written
        assert not gate.started.get(2, threading.Event()).is_set()

    def test_a_failure_is_raised_by_the_next_bounded_hand_in(self) -> None:
        gate = Gate(fail={0})
        gate.open(0)
        with OrderedWriter(gate.write, bound=1, name="test-fail-put") as writer:
            writer.put(0)
            with pytest.raises(RuntimeError, match="write 0 failed"):
                writer.put(1)  # waits for room: the oldest failed
        assert gate.ran == []

    def test_a_failure_before_the_oldest_bounded_write_is_raised_as_itself(self) -> None:
        gate = Gate(fail={0})
        with OrderedWriter(gate.write, bound=5, name="test-fail-first") as writer:
            writer.put(0, bounded=False)
            writer.put(1)
            gate.open(0, 1)
            with pytest.raises(RuntimeError, match="write 0 failed"):
                writer.settle()  # write 1 did not run: the first failure is what is raised
        assert gate.ran == []

    def test_an_action_waits_for_every_write_before_it(self) -> None:
        gate = Gate()
        seen: list[str] = []
        with OrderedWriter(gate.write, bound=5, name="test-after") as writer:
            writer.after(lambda: seen.append("none pending"))  # nothing waits: at once
            assert seen == ["none pending"]
            writer.put(0)
            writer.after(lambda: seen.append(f"after 0, ran {gate.ran}"))
            writer.put(1, bounded=False)
            writer.after(lambda: seen.append(f"after 1, ran {gate.ran}"))
            gate.open(0)
            writer.settle()  # 0 resolved and its action ran; 1 is held at its gate
            assert seen == ["none pending", "after 0, ran [0]"]
            gate.open(1)
            writer.drain()
        assert seen == ["none pending", "after 0, ran [0]", "after 1, ran [0, 1]"]

    def test_drain_waits_for_every_write_and_settle_for_every_bounded_one(self) -> None:
        gate = Gate()
        with OrderedWriter(gate.write, bound=5, name="test-drain") as writer:
            writer.put(0)
            writer.put(1, bounded=False)
            gate.open(0)
            writer.settle()
            assert gate.ran == [0]
            gate.open(1)
            assert writer.drain() == [0, 10]
            assert gate.ran == [0, 1]
            assert writer.drain() == []  # results are given once


class TestPacer:
    def test_the_first_chunk_holds_first_documents_before_the_rate_is_known(self) -> None:
        pacer = Pacer(target_s=1.0, first=4, least=2)
        assert pacer.end(["x" * 10] * 20, 0, 20, len) == 4
        assert pacer.end(["x" * 10] * 20, 18, 20, len) == 20  # never past the limit

    def test_chunks_hold_about_target_seconds_of_embedding_once_the_rate_is_learned(self) -> None:
        pacer = Pacer(target_s=1.0, first=4, least=2)
        pacer.learn(100, 1.0)  # 100 characters a second
        docs = ["x" * 10] * 40
        assert pacer.end(docs, 0, 40, len) == 10  # 100 characters: a second
        assert pacer.end(["x" * 500] * 40, 0, 40, len) == 2  # at least `least`, however long
        assert pacer.end(["stored"] * 40, 0, 40, lambda _: 0) == 40  # texts the store holds cost nothing

    def test_the_rate_is_learned_only_from_chunks_long_enough_to_time_and_averaged(self) -> None:
        pacer = Pacer(target_s=1.0, first=4, least=2)
        pacer.learn(100, 0.01)
        pacer.learn(0, 2.0)
        assert pacer.chars_per_s is None
        pacer.learn(100, 1.0)
        pacer.learn(300, 1.0)
        assert pacer.chars_per_s == 200.0


THREAD_MAKERS = {"Thread", "ThreadPoolExecutor", "ProcessPoolExecutor", "start_new_thread"}
# worker.pipeline.target warms the collection's index up on a thread of its own, beside the pass (not part of it).
OUTSIDE_THE_PASS = {"memsync.worker.pipeline.target"}
ROOT = Path(__file__).resolve().parents[2]


def _file(module: str) -> Path | None:
    """The file of a ``memsync.worker...`` module (a package: its ``__init__``), None if there is none."""
    base = ROOT.joinpath("worker", *module.split(".")[2:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def _imports_from(path: Path) -> dict[str, list[str]]:
    """Module -> the names a file imports from it (``memsync.worker...`` only)."""
    return {node.module: [a.name for a in node.names] for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memsync.worker")}


def _pass_modules() -> dict[str, Path]:
    """The worker modules a sync pass runs: ``worker.pipeline.syncpass`` and what it imports, transitively.
    A room's ``__init__`` imports its exports only when one is used, so a name taken from a room leads
    to the module that defines it, and the room's other modules are not followed."""
    seen: dict[str, Path] = {}
    todo = ["memsync.worker.pipeline.syncpass"]
    while todo:
        name = todo.pop()
        if name in seen or (path := _file(name)) is None or path.name == "__init__.py":
            continue
        seen[name] = path
        for module, names in _imports_from(path).items():
            todo += [module, *(f"{module}.{n}" for n in names)]
            if (package := _file(module)) is not None and package.name == "__init__.py":
                exports = {n: m for m, ns in _imports_from(package).items() for n in ns}
                todo += [exports[n] for n in names if n in exports]
    return seen


def test_the_writer_is_the_one_module_of_the_sync_pass_that_starts_threads() -> None:
    modules = _pass_modules()
    short = {name.rsplit(".", 1)[-1] for name in modules}
    assert {"sync", "overlap", "sink", "embedstore"} <= short
    starting = {name for name, path in modules.items()
                for node in ast.walk(ast.parse(path.read_text()))
                if (isinstance(node, ast.Name) and node.id in THREAD_MAKERS)
                or (isinstance(node, ast.Attribute) and node.attr in THREAD_MAKERS)}
    assert starting - OUTSIDE_THE_PASS == {"memsync.worker.pipeline.overlap"}
