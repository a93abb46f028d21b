"""The packaged model, really run: offline, normalised, order-preserving, meaning-aware."""

from __future__ import annotations

import numpy as np
import pytest

from config.embedding import EmbeddingError, get_embedder


@pytest.fixture(scope="module")
def embedder():  # type: ignore[no-untyped-def]
    return get_embedder("all-MiniLM-L6-v2-int8")


def test_unit_vectors_in_input_order(embedder) -> None:  # type: ignore[no-untyped-def]
    texts = ["short", "a much longer text " * 40, "", "漢字 and emoji 🚀", "short"]
    vectors = embedder.embed(texts)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert np.allclose(vectors[0], vectors[4], atol=1e-5)  # sorting by length does not mix rows up
    # Same text alone or in a batch: padding to the batch's longest does not change the vector.
    assert np.allclose(embedder.embed(["a much longer text " * 40])[0], vectors[1], atol=1e-4)


def test_similar_meaning_scores_higher(embedder) -> None:  # type: ignore[no-untyped-def]
    a, b, c = embedder.embed(["The database connection timed out", "SQLite query was too slow and hit a timeout",
                              "We changed the colour of the login button"])
    assert float(a @ b) > float(a @ c) + 0.2


def test_one_instance_per_process(embedder) -> None:  # type: ignore[no-untyped-def]
    assert get_embedder("all-MiniLM-L6-v2-int8") is embedder
    with pytest.raises(EmbeddingError, match="unknown embedding model"):
        get_embedder("bge-huge")
