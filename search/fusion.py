"""Weighted reciprocal-rank fusion of ranked lists of rows, with a score normalised to 0..1.

The weights and k were chosen on the LoCoMo dev set (scripts/bench_quality.py; docs/benchmarks.md has the
table of what was tried). Lexical ranks count fully, semantic ranks half: BM25 alone is the
strongest single signal on conversational memory, and equal-weight RRF with k=60 is worse than
BM25 alone. A small k (10) lets a first place in one list outweigh middling places in several.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

RRF_K = 10
LEXICAL_WEIGHT = 1.0
SEMANTIC_WEIGHT = 0.5
# Observations recorded under a prompt vouch for that prompt (see engine: linked signals).
LINKED_SEMANTIC_WEIGHT = 0.5
LINKED_LEXICAL_WEIGHT = 0.5
# Prompts ranked in the context of their neighbouring prompts (search.context): a second dense list,
# counted as the first one is.
CONTEXT_WEIGHT = SEMANTIC_WEIGHT

K = TypeVar("K", bound=Hashable)  # what a list ranks (the engine: a row's (kind, id))


@dataclass(frozen=True, slots=True)
class Weights:
    """The fusion constants (the defaults are the shipped choice; benchmarks vary them)."""

    k: int = RRF_K
    lexical: float = LEXICAL_WEIGHT
    semantic: float = SEMANTIC_WEIGHT
    linked_semantic: float = LINKED_SEMANTIC_WEIGHT
    linked_lexical: float = LINKED_LEXICAL_WEIGHT
    context: float = CONTEXT_WEIGHT


@dataclass(frozen=True, slots=True)
class Ranked(Generic[K]):
    """One input list: keys best first, its weight, and whether it is a semantic signal. Linked
    evidence gives each key the rank of its evidence and a share of that evidence's vote."""

    keys: Sequence[K]
    weight: float
    semantic: bool
    ranks: Sequence[int] | None = None  # default: the position in ``keys``
    shares: Sequence[float] | None = None  # default: 1 for every key


def fuse(lists: Sequence[Ranked[K]], k: int = RRF_K) -> list[tuple[K, float, bool, bool]]:
    """(key, score in 0..1, found semantically, found lexically), best first. The score is the
    fused value over the most any key could get from the lists that had something."""
    score: dict[K, float] = defaultdict(float)
    sem: set[K] = set()
    lex: set[K] = set()
    best_possible = 0.0
    first_seen: dict[K, int] = {}
    for li, ranked in enumerate(lists):
        if not ranked.keys:
            continue
        best_possible += ranked.weight / (k + 1)
        seen: set[K] = set()
        for pos, key in enumerate(ranked.keys):
            if key in seen:
                continue
            seen.add(key)
            rank = ranked.ranks[pos] if ranked.ranks is not None else pos
            share = ranked.shares[pos] if ranked.shares is not None else 1.0
            score[key] += ranked.weight * share / (k + rank + 1)
            first_seen.setdefault(key, li * 1_000_000 + rank)
            (sem if ranked.semantic else lex).add(key)
    if not score:
        return []
    order = sorted(score, key=lambda key: (-score[key], first_seen[key]))
    return [(key, min(1.0, score[key] / best_possible), key in sem, key in lex) for key in order]
