"""The one boundary around native libraries (``config.native``): a pyo3 panic becomes the error of
the side that called, and nothing else is touched (Ctrl-C and exits above all)."""

from __future__ import annotations

import pytest

from memsync.config.errors import EmbeddingUnavailable
from memsync.config.native import guarded, is_panic


class PanicException(BaseException):
    """As pyo3 defines it: ``pyo3_runtime.PanicException(BaseException)``."""


PanicException.__module__ = "pyo3_runtime"


class TestGuarded:
    def test_a_panic_becomes_the_sides_error_with_its_message_and_cause(self) -> None:
        with pytest.raises(EmbeddingUnavailable) as caught, guarded("onnxruntime", EmbeddingUnavailable):
            raise PanicException("index out of bounds:\n  the len is 8 but the index is 8")
        assert str(caught.value) == "onnxruntime panicked: index out of bounds: the len is 8 but the index is 8"
        assert isinstance(caught.value.__cause__, PanicException)

    @pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), GeneratorExit(), ValueError("bad")],
                             ids=lambda e: type(e).__name__)
    def test_anything_else_passes_untouched(self, exc: BaseException) -> None:
        with pytest.raises(type(exc)) as caught, guarded("tantivy", EmbeddingUnavailable):
            raise exc
        assert caught.value is exc
        assert not is_panic(exc)

    def test_nothing_raised_is_nothing_changed(self) -> None:
        with guarded("tantivy", EmbeddingUnavailable):
            value = 1
        assert value == 1
