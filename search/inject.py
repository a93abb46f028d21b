"""The one decision of per-prompt injection: which of a search's results go in front of the agent,
and how much of each, within a token budget. Pure: it takes the ranked results with their signals
and returns what to inject; the service (``servers.inject_service``) searches, renders and frames.

Two questions, two signals. Whether anything fits the prompt at all is the best result's
**quality**, not the fused score: a result found only by meaning has fused score 1.000 whatever its
similarity, so the fused score cannot tell a prompt the memory answers from one it does not. Which
memories go in, and in what order, is the search's own ranking: on the dev set its hybrid order puts
more evidence in the first places than the similarity order does (bench_inject, the same thresholds:
0.625 against 0.609 of the evidence at 8 memories, precision 0.149 against 0.143).

Quality, per result, on the similarity's scale:

- **similarity**, the cosine of the result's best field document with the query (the semantic
  side's own number). A result without one (found by words only) is never injected: a pasted stack
  trace or a command shares words with many memories and means none of them.
- **both sides agreeing** (``Signal.BOTH``): found by words and by meaning; worth ``BOTH_BONUS`` of
  similarity.
- **recency**, a prior only: a memory of today is worth ``RECENCY_BONUS`` of similarity over an
  old one, halving every ``RECENCY_HALF_LIFE_DAYS``; it tips a memory near the cut-offs, it never
  makes a poor one fit.

Linked evidence (observations vouching for the prompt they were recorded under) exists only when a
search asks for prompts without observations; injection searches every kind, so observations are
results of their own and no result carries a linked vote.

Fewer, better memories over a full budget: nothing is injected unless the best result's quality
reaches ``MIN_QUALITY``; then, in the search's order, the results within ``MARGIN`` of that best one,
at most ``MAX_MEMORIES`` of them. The budget is then shared in that order, each memory's text cut to
what is left for it. Nothing eligible, or not even the first memory's heading within the budget:
nothing (silence).

The thresholds are measured (``scripts/bench_inject.py``; docs/benchmarks.md): the best similarity
of real questions against the dev memory and of unrelated coding prompts (the silence set's train
half only).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from memsync.config.tokens import count_tokens
from memsync.search.models import Signal

# Chosen leave-one-conversation-out on the dev set with the silence set's train half
# (scripts/bench_inject.py; docs/benchmarks.md): the most recall with at most 5% of the train half's
# unrelated prompts answered. The best similarity of real questions has p5 0.59, that of unrelated
# coding prompts p95 0.33 and max 0.40. No policy of the grid reaches precision 0.5 with useful recall
# (0.47 at one memory, recall 0.25): the search's first result is evidence for 42% of the questions.
MIN_QUALITY = 0.39
MARGIN = 0.30  # a further memory within this of the best one, or it is left out
MAX_MEMORIES = 8
BOTH_BONUS = 0.03
RECENCY_BONUS = 0.02
RECENCY_HALF_LIFE_DAYS = 90.0
MIN_BODY_TOKENS = 8  # a memory whose text would be cut below this is left out rather than shown as a stub
ELLIPSIS = " …"

Counter = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Policy:
    """The decision's thresholds (the defaults are the shipped choice; the benchmark varies them)."""

    min_quality: float = MIN_QUALITY
    margin: float = MARGIN
    max_memories: int = MAX_MEMORIES


SHIPPED = Policy()


@dataclass(frozen=True, slots=True)
class Candidate:
    """One ranked result as the decision sees it: its ref, its signals, and its text as it would be
    rendered (``heading``: the line's start, e.g. ref, date and project; ``body``: the memory's text,
    already made safe to put in the frame by the caller)."""

    ref: str
    similarity: float | None
    signals: Signal
    heading: str
    body: str
    age_days: float | None = None


@dataclass(frozen=True, slots=True)
class Chosen:
    """One memory to inject: its ref, its heading, its text (cut to the budget) and their tokens."""

    ref: str
    heading: str
    body: str
    tokens: int


def quality(c: Candidate) -> float | None:
    """How well a result fits the prompt, on the similarity's scale; None: never injected (no
    similarity: found by words only)."""
    if c.similarity is None:
        return None
    q = c.similarity + (BOTH_BONUS if c.signals is Signal.BOTH else 0.0)
    if c.age_days is not None:
        q += RECENCY_BONUS * 0.5 ** (max(0.0, c.age_days) / RECENCY_HALF_LIFE_DAYS)
    return q


def choose(results: Sequence[Candidate], budget_tokens: int, seen: Collection[str] = frozenset(),
           count: Counter = count_tokens, policy: Policy = SHIPPED) -> list[Chosen]:
    """What to inject from ``results`` (the search's order), within ``budget_tokens`` (for the
    entries; the frame's own tokens are the caller's), leaving out the refs in ``seen`` (already
    injected in this session); in the search's order, empty when nothing fits. See the module
    docstring."""
    scored = [(q, c) for c in results if c.ref not in seen and (q := quality(c)) is not None]
    if not scored or budget_tokens <= 0:
        return []
    best, best_ref = max(((q, c.ref) for q, c in scored), key=lambda x: x[0])  # the first of the best
    if best < policy.min_quality:
        return []
    # The search's order (it ranks better than the similarity alone) among the results near the best
    # one; the best one always stays: it alone passed the gate, a cap or a short budget must not
    # leave only memories below it.
    near: list[Candidate] = []
    refs: set[str] = set()
    for q, c in scored:
        if q >= best - policy.margin and c.ref not in refs:
            refs.add(c.ref)
            near.append(c)
    in_line = sorted(near, key=lambda c: c.ref != best_ref)  # the best one first for a place, the rest in order
    heads = {c.ref: count(c.heading) for c in near}
    size = min(len(near), policy.max_memories)
    # Fewer memories rather than stubs: each one kept must have room for its heading and some text.
    while size > 1 and budget_tokens // size < max(heads[c.ref] for c in in_line[:size]) + MIN_BODY_TOKENS:
        size -= 1
    placed = {c.ref for c in in_line[:size]}
    kept = [c for c in near if c.ref in placed]
    out: list[Chosen] = []
    left = budget_tokens
    for n, c in enumerate(kept):
        share = left // (len(kept) - n)  # what is left, shared by the memories still to come
        head = heads[c.ref]
        whole = head + count(c.body)
        if whole <= share:
            out.append(Chosen(c.ref, c.heading, c.body, whole))
            left -= whole
            continue
        body = cut(c.body, share - head, count)
        if body is None:
            continue  # not even its heading and a few words fit (none fit: silence)
        tokens = head + count(body)
        out.append(Chosen(c.ref, c.heading, body, tokens))
        left -= tokens
    return out


def cut(text: str, tokens: int, count: Counter = count_tokens) -> str | None:
    """The longest start of ``text`` by whole words, with an ellipsis, of at most ``tokens``
    tokens; None when fewer than ``MIN_BODY_TOKENS`` would be left of it."""
    if tokens < MIN_BODY_TOKENS:
        return None
    if count(text) <= tokens:
        return text
    words = text.split(" ")
    room = tokens - count(ELLIPSIS)
    lo, hi = 0, len(words)  # the most words whose start fits: binary search (a count is a tokenizer call)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid])) <= room:
            lo = mid
        else:
            hi = mid - 1
    start = " ".join(words[:lo])
    if count(start) < MIN_BODY_TOKENS:
        return None
    return start + ELLIPSIS
