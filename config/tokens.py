"""How many tokens a text costs a model: the one counter (benchmarks and the injection budget).

No model vendor's tokenizer can be loaded offline, so the count is the shipped MiniLM WordPiece
tokenizer's (close to the BPE tokenizers of chat models on English text; measured beside
characters / 4 in ``scripts/bench_tokens.py``). The tokenizer is the process's one instance, the
bundled model's embedders' too (``embedding.local.shared_tokenizer``), loaded on first use (about
30 ms).
"""

from __future__ import annotations


def count_tokens(text: str) -> int:
    """The WordPiece tokens of ``text`` (no special tokens, no truncation)."""
    if not text:
        return 0
    from memsync.embedding.local import shared_tokenizer  # the model's package: loaded when first counted

    return len(shared_tokenizer().encode(text, add_special_tokens=False).ids)
