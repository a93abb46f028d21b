"""The packaged model, really run: offline, normalised, order-preserving, meaning-aware."""

from __future__ import annotations

import numpy as np
import pytest

from memsync.embedding import EmbeddingError, get_embedder


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


def test_sub_batches_bound_padded_tokens(embedder) -> None:  # type: ignore[no-untyped-def]
    from memsync.embedding import TOKENS_PER_TEXT

    lengths = [3] * 40 + [60] * 10 + [256] * 9 + [500]
    batches = embedder._sub_batches(list(range(len(lengths))), lengths)
    budget = embedder._batch_size * TOKENS_PER_TEXT
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each text once, in order
    assert [i for b in batches for i in b] == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= embedder._batch_size
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= budget
    assert len(batches[0]) == embedder._batch_size  # short texts still go 32 at a time
    # Long texts embed the same whatever their batch: the budget changes memory, not vectors.
    long_texts = [f"text number {i} " + "word " * 300 for i in range(6)]
    together = embedder.embed(long_texts)
    alone = np.vstack([embedder.embed([t]) for t in long_texts])
    assert np.allclose(together, alone, atol=1e-4)


class TestOneSessionForBothPurposes:
    """The worker with injection on embeds documents and queries; it holds the model once."""

    @pytest.fixture
    def fresh(self, monkeypatch):  # type: ignore[no-untyped-def]
        from memsync.embedding import local

        monkeypatch.setattr(local, "_instances", {})
        monkeypatch.setattr(local, "_shared", {})
        return local

    def test_a_process_asking_both_purposes_runs_them_on_one_session(self, fresh) -> None:  # type: ignore[no-untyped-def]
        texts = ["the refund endpoint got duplicate events", "word " * 400, ""]
        docs = fresh.get_embedder("all-MiniLM-L6-v2-int8", 32, 256, 0)
        lean = docs.embed(texts)
        queries = fresh.get_embedder("all-MiniLM-L6-v2-int8", 32, 256, 1, purpose="queries")
        assert queries is not docs and queries._session is docs._session  # one session, two locks
        assert queries._lock is not docs._lock
        assert np.allclose(docs.embed(texts), lean, atol=1e-5)  # the same vectors on the shared session
        assert np.allclose(queries.embed(texts), lean, atol=1e-5)
        later = fresh.get_embedder("all-MiniLM-L6-v2-int8", 32, 128, 0)  # a documents instance made later joins it
        assert later._session is docs._session

    def test_one_purpose_alone_keeps_its_own_profile(self, fresh) -> None:  # type: ignore[no-untyped-def]
        docs = fresh.get_embedder("all-MiniLM-L6-v2-int8", 32, 256, 0)
        assert not fresh._shared and docs._session is not None

    def test_cut_as_the_tokenizer_cuts(self) -> None:
        """The shared tokenizer does not truncate; the embedder cuts as the tokenizer's own truncation did."""
        from tokenizers import Tokenizer

        from memsync.embedding.local import shared_tokenizer, tokenizer_json, truncated

        own = Tokenizer.from_str(tokenizer_json())
        own.no_padding()
        texts = ["short", "word " * 600, "漢字 " * 300, ""]
        for n in (16, 256):
            own.enable_truncation(max_length=n)
            for text, mine in zip(texts, shared_tokenizer().encode_batch(texts), strict=True):
                assert truncated(mine.ids, n) == own.encode(text).ids
