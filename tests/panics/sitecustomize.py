"""Test-only fault injection: makes a native library's entry point panic in a memsync subprocess.

Python imports ``sitecustomize`` at start-up from the first directory on ``sys.path`` that has
one; a test puts this directory first on PYTHONPATH of a `memsync` subprocess only, so nothing of
it ships (``tests/`` is not installed) and nothing runs without that variable. With
``MEMSYNC_TEST_PANIC_AT`` naming a file, each of the four entry points reads the file before the
real call: when it holds the entry point's name (``tantivy``, ``onnxruntime``, ``tokenizer``,
``chroma``), the call raises ``pyo3_runtime.PanicException`` (the class pyo3 defines: a
``BaseException`` of that name and module) instead, and appends the name to ``<file>.hits``, so a
test knows the panic was reached. The patches sit below memsync's own code, where the native
library is called: tantivy's searcher (its classes cannot be patched, so memsync's opener returns
a proxy), onnxruntime's ``InferenceSession.run``, the ``tokenizers.Tokenizer`` memsync's model
builds, Chroma's ``Collection.query``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CONTROL = os.environ.get("MEMSYNC_TEST_PANIC_AT")


class PanicException(BaseException):
    """As pyo3 defines it for each extension module: ``pyo3_runtime.PanicException(BaseException)``."""


PanicException.__module__ = "pyo3_runtime"


def _maybe_panic(point: str) -> None:
    assert CONTROL is not None
    try:
        wanted = Path(CONTROL).read_text().strip()
    except FileNotFoundError:
        return
    if wanted == point:
        with open(CONTROL + ".hits", "a") as fh:
            fh.write(point + "\n")
        raise PanicException(f"injected panic at {point}: index out of bounds: the len is 8 but the index is 8")


class _Searcher:
    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        _maybe_panic("tantivy")
        return self._real.search(*args, **kwargs)


class _Index:
    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def searcher(self) -> _Searcher:
        return _Searcher(self._real.searcher())


class _Tokenizer:
    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @classmethod
    def from_str(cls, text: str) -> _Tokenizer:
        return cls(_RealTokenizer.from_str(text))

    def encode_batch(self, *args: Any, **kwargs: Any) -> Any:
        _maybe_panic("tokenizer")
        return self._real.encode_batch(*args, **kwargs)


def _install() -> None:
    global _RealTokenizer
    import onnxruntime
    import tokenizers
    from chromadb.api.models.Collection import Collection

    import memsync.search.textindex as reader
    from memsync.config.formats import text_index

    real_open = text_index.open_index

    def open_index(path: Path, create: bool) -> Any:
        index = real_open(path, create)
        return index if create else _Index(index)

    reader.open_index = open_index  # type: ignore[assignment]

    real_run = onnxruntime.InferenceSession.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        _maybe_panic("onnxruntime")
        return real_run(self, *args, **kwargs)

    onnxruntime.InferenceSession.run = run  # type: ignore[method-assign]

    _RealTokenizer = tokenizers.Tokenizer
    tokenizers.Tokenizer = _Tokenizer  # type: ignore[misc]

    real_query = Collection.query

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        _maybe_panic("chroma")
        return real_query(self, *args, **kwargs)

    Collection.query = query  # type: ignore[method-assign]


_RealTokenizer: Any = None
if CONTROL:
    _install()
