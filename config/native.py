"""Calls into native libraries (tantivy, onnxruntime, the tokenizer, Chroma, the multilingual
engine): the one boundary that turns a panic in one of them into memsync's error for the side that
made the call.

A Rust library bound with pyo3 (tantivy, ``tokenizers``, Chroma's bindings) raises
``pyo3_runtime.PanicException`` when its code panics: an index out of bounds while reading a
garbled segment file, say. It derives from ``BaseException``, not ``Exception``, so no ``except
Exception`` of a caller sees it: one raised on a search thread escaped the MCP tool's error
handling and ended the server process, and the CLI printed a traceback. Every call into such a
library is made inside :func:`guarded` with the error its side answers with (the text index's
damage: FTS5 answers; the embedder or Chroma: the search answers lexically, the worker backs off).
Anything else passes through untouched, ``KeyboardInterrupt`` and ``SystemExit`` first of all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from memsync.config.errors import MemsyncError

PANIC = "PanicException"  # pyo3's class name; each pyo3 extension module defines its own class of it
MESSAGE_CHARS = 160  # a panic's message is one line of Rust's; its backtrace goes to stderr, not here


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a native library's panic (a BaseException that Python itself never raises)."""
    return not isinstance(exc, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit)) and \
        type(exc).__name__ == PANIC


@contextlib.contextmanager
def guarded(what: str, error: Callable[[str], MemsyncError]) -> Iterator[None]:
    """Run the body; a native panic in it is raised as ``error("<what> panicked: <message>")``
    (chained to the panic), anything else as it was."""
    try:
        yield
    except BaseException as exc:
        if not is_panic(exc):
            raise
        message = " ".join(str(exc).split())[:MESSAGE_CHARS] or "no message"
        raise error(f"{what} panicked: {message}") from exc
