"""How many tokens a text costs a model: the one counter (benchmarks and the injection budget).

No model vendor's tokenizer can be loaded offline, so the count is the shipped MiniLM WordPiece
tokenizer's (close to the BPE tokenizers of chat models on English text; measured beside
characters / 4 in ``scripts/bench_tokens.py``). The tokenizer is loaded once per process, on
first use (about 30 ms).
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_tokenizer: Any = None


def _load() -> Any:
    global _tokenizer
    with _lock:
        if _tokenizer is None:
            from tokenizers import Tokenizer

            from memsync.embedding.local import tokenizer_json

            tok = Tokenizer.from_str(tokenizer_json())
            tok.no_padding()
            tok.no_truncation()
            _tokenizer = tok
        return _tokenizer


def count_tokens(text: str) -> int:
    """The WordPiece tokens of ``text`` (no special tokens, no truncation)."""
    if not text:
        return 0
    return len(_load().encode(text, add_special_tokens=False).ids)
