"""Optional reranking of the fused candidates by a cross-encoder behind an OpenAI-style
``/rerank`` endpoint (``rerank_provider=openai``; the client is ``embedding.remote``).

The best ``rerank_top_n`` fused candidates are read from SQLite (one ``IN`` query per kind), sent
with the query, and put in the reranker's order; the rest follow in fused order. Each row keeps its
own fused value and confidence (the relevance model's, read before reranking). Any failure (endpoint
down, slow past the search deadline, refusing, an odd answer) keeps the fused order and says so in
the response's reason: a reranker can improve a page, never cost one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memsync.config.claude_mem.schema import SUMMARY_FIELDS, Kind
from memsync.config.errors import EmbeddingError, EmbeddingUnavailable
from memsync.config.settings import Settings
from memsync.embedding import make_reranker
from memsync.search.hydrate import PageEntry, records
from memsync.search.sql import QueryTimeout, SourceRows

TEXT_CHARS = 2000  # of a row sent to the reranker: cross-encoders read a few hundred tokens at most
OBSERVATION_FIELDS = ("title", "subtitle", "narrative", "text", "facts")


def row_text(kind: Kind, row: dict[str, Any]) -> str:
    """What the reranker reads of a row: its title and main text."""
    fields = {Kind.OBSERVATION: OBSERVATION_FIELDS, Kind.SUMMARY: SUMMARY_FIELDS}.get(kind, ("prompt_text",))
    parts: list[str] = []
    for name in fields:
        value = row.get(name)
        if isinstance(value, list):
            value = " ".join(str(v) for v in value)
        if value:
            parts.append(str(value))
    return " ".join(" ".join(parts).split())[:TEXT_CHARS] or " "


def rerank(settings: Settings, rows: SourceRows, query: str, fused: Sequence[PageEntry],
           notes: list[str]) -> list[PageEntry]:
    """``fused`` with its best ``rerank_top_n`` in the reranker's order (see the module docstring);
    on failure ``fused`` unchanged and a note for the response's reason."""
    client = make_reranker(settings)
    head = list(fused[:settings.rerank_top_n])
    if client is None or len(head) < 2:
        return list(fused)
    try:
        by_kind: dict[Kind, list[int]] = {}
        for (kind, i), *_ in head:
            by_kind.setdefault(kind, []).append(i)
        found = {k: records(rows, k, ids) for k, ids in by_kind.items()}
        texts = [row_text(kind, found.get(kind, {}).get(i) or {}) for (kind, i), *_ in head]
        order = client.rerank(query, texts)
    except (EmbeddingUnavailable, EmbeddingError, QueryTimeout) as exc:
        notes.append(f"reranker skipped, fused order kept: {exc}")
        return list(fused)
    picked = [i for i, _ in order]
    picked += [i for i in range(len(head)) if i not in set(picked)]  # any the reranker left out, as fused
    return [head[j] for j in picked] + list(fused[len(head):])
