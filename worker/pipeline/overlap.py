"""How a sync pass overlaps writing with embedding: the one place of the pass that starts a thread.

- :class:`OrderedWriter`: writes run on one background thread, in the order they were handed in,
  while the caller (the sync thread) goes on embedding. At most ``bound`` of the bounded writes (a
  chunk's upsert) are unresolved at a time: handing in one more first waits for the oldest. Results
  come back to the caller in order; an action handed in with :meth:`OrderedWriter.after` runs on
  the caller's thread once every write before it resolved (a cursor moves only behind its writes).
  The first write that fails is raised on the caller's thread, and no write handed in after it
  runs. :meth:`OrderedWriter.drain` returns only when every write handed in has resolved, and
  :meth:`OrderedWriter.close` leaves no thread behind.
- :class:`Pacer`: how many documents the next chunk of a pass that may yield holds, so that each
  holds about ``target_s`` of embedding, learned from the chunks before it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

D = TypeVar("D")
J = TypeVar("J")
R = TypeVar("R")


class _Skipped(Exception):
    """A write handed in after one that failed: it did not run."""


@dataclass(frozen=True, slots=True)
class _Entry(Generic[R]):
    future: Future[R] | None
    action: Callable[[], None] | None = None


class OrderedWriter(Generic[J, R]):
    """Runs ``write`` on each job handed in, on one background thread (started by the first job: a
    pass with nothing to write starts none), in order; see the module docstring."""

    def __init__(self, write: Callable[[J], R], *, bound: int, name: str) -> None:
        self._write, self._bound, self._name = write, max(1, bound), name
        self._pool: ThreadPoolExecutor | None = None
        self._bounded: deque[Future[R]] = deque()  # bounded writes not yet seen resolved, oldest first
        self._order: deque[_Entry[R]] = deque()  # every write and action, in the order handed in
        self._results: list[R] = []  # results taken up since the last drain
        self._failure: BaseException | None = None  # the first write that failed (set on the thread)

    def put(self, job: J, *, bounded: bool = True) -> None:
        """Hand in ``job``, to be written after every job before it. A bounded job first waits
        until fewer than ``bound`` bounded jobs are unresolved; an earlier failure is raised here."""
        if bounded:
            self._room(self._bound - 1)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        future = self._pool.submit(self._run, job)
        if bounded:
            self._bounded.append(future)
        self._order.append(_Entry(future))

    def after(self, action: Callable[[], None]) -> None:
        """Run ``action`` (on this thread) once every job handed in so far has resolved; at once
        when none waits."""
        if self._order:
            self._order.append(_Entry(None, action))
        else:
            action()

    def settle(self) -> None:
        """Wait until no bounded job is unresolved (an error is raised here), then take up what resolved."""
        self._room(0)

    def drain(self) -> list[R]:
        """Wait for every job handed in, run the actions waiting for them, and return the results
        taken up since the last drain, in order."""
        self._room(0)
        self._collect(block=True)
        done, self._results = self._results, []
        return done

    def close(self) -> None:
        """Let the thread finish what it holds (nothing after a failure runs) and stop it."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._pool = None
        self._bounded.clear()
        self._order.clear()
        self._results = []

    def __enter__(self) -> OrderedWriter[J, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, job: J) -> R:
        """On the thread: write ``job``, unless a job before it failed."""
        if self._failure is not None:
            raise _Skipped
        try:
            return self._write(job)
        except BaseException as exc:
            self._failure = exc
            raise

    def _result(self, future: Future[R]) -> R:
        try:
            return future.result()
        except _Skipped:
            assert self._failure is not None
            raise self._failure from None

    def _room(self, keep: int) -> None:
        """Wait until at most ``keep`` bounded jobs are unresolved, oldest first, then take up what resolved."""
        while len(self._bounded) > keep:
            self._result(self._bounded.popleft())
        self._collect(block=False)

    def _collect(self, block: bool) -> None:
        """Take up resolved jobs in order (all of them when ``block``) and run the actions that
        waited for them; a job that failed raises here, and nothing after it is taken up."""
        while self._order:
            entry = self._order[0]
            if entry.future is not None and not (block or entry.future.done()):
                return
            self._order.popleft()
            if entry.future is not None:
                self._results.append(self._result(entry.future))
            if entry.action is not None:
                entry.action()


@dataclass(slots=True)
class Pacer:
    """Sizes the chunks of a pass that may yield: about ``target_s`` of embedding each, from the
    rate (characters a second) learned from the chunks before; ``first`` documents before it is
    known, at least ``least`` after."""

    target_s: float
    first: int
    least: int
    chars_per_s: float | None = None

    def end(self, docs: Sequence[D], start: int, limit: int, cost: Callable[[D], int]) -> int:
        """Where the chunk of ``docs`` from ``start`` ends (at most ``limit``), ``cost`` saying what
        a document costs to embed, in characters the model reads (0: nothing to embed)."""
        if self.chars_per_s is None:
            return min(limit, start + self.first)
        budget, end = self.chars_per_s * self.target_s, start
        while end < limit and (end - start < self.least or budget > 0):
            budget -= cost(docs[end])
            end += 1
        return end

    def learn(self, chars: int, seconds: float) -> None:
        """Learn the rate from a chunk that embedded enough to time."""
        if seconds > 0.05 and chars > 0:
            rate = chars / seconds
            self.chars_per_s = rate if self.chars_per_s is None else 0.5 * (self.chars_per_s + rate)
