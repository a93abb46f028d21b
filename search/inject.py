"""The one decision of per-prompt injection: which of a search's results go in front of the agent,
and how much of each, within a token budget. Pure: it takes the ranked results with their signals
and returns what to inject; the service (``servers.inject_service``) searches, renders and frames.

Each result carries the relevance model's **confidence** (``search.relevance``), the calibrated
chance that it is relevant. Injection searches every kind, where the model adds confidences and
keeps the fused order (it re-orders prompt searches only). Two questions, two signals:

- **Whether anything fits the prompt** is the best **similarity** (the cosine of a result's best
  field document with the query), not the best confidence. The confidence is a chance *within* a
  search, fitted on questions the memory answers and read mostly from ranks: the first rows of any
  search rank first, so an unrelated prompt's search has confident rows too. Measured (``scripts/bench_inject.py``,
  the dev set and the silence set's train half): the best confidence of real questions has p25 0.42
  and p50 0.51, that of unrelated coding prompts p95 0.46 and max 0.53, and a confidence gate held
  to 5% of the train half keeps 0.43 of the evidence; the best similarity has p5 0.59 against p95
  0.33 (max 0.40), and its gate keeps 0.67. A confidence gate beside it (``min_confidence``) is in
  the benchmark's grid and was never chosen: it only took recall.
- **Which memories go in** is the search's order (the most confident one always kept), at most
  ``max_memories``, each at least ``floor`` and ``ratio`` of the best one's confidence. Measured: a
  floor trades recall for precision (floor 0.1 in the relevance order: recall 0.63, precision 0.20,
  against 0.67 and 0.16 with none). The number of memories is what moves recall within the budget:
  which memories a line names matters, not how much of each it shows (the stand-in's top 10 title
  lines hold 0.675 of the evidence in 327 tokens, eight memories shown at length 0.658 in 553). So up
  to 16 go in, each cut to its share of the budget (about 37 tokens: its ref, date, project and the
  start of its text, the title first), an index the agent opens with ``get_observations``, as
  claude-mem's own session-start context is an index of titles. Under the benchmark's rule (the
  most recall with at most 5% of the train half answered), every fold chose 16 and no floor once
  the grid went past 8; the gate rose to 0.36 with the demo's new sessions in the train half.

A row whose text is the same as an earlier row's (case and white space aside) is left out: claude-mem
can record one observation many times over, and each copy would take a line of the budget.

A result found by words only (no similarity) may go in beside others (``words_only``): measured,
leaving them out took recall (0.664 against 0.678 of the evidence in the relevance order, the same silence), and the
relevance model already weighs them (on the dev set their confidence tracks how often they are
evidence about as well as the rest's). It cannot open the gate on its own: it has no similarity,
and a pasted stack trace or a command shares words with many memories and means none of them. A
result without a confidence (past the depth the model re-ranks) is never injected: nothing says how
likely it is.

Held-out (leave one conversation out) on the dev set: evidence recall 0.707, precision 0.091, 599
tokens on average within the 600 budget (at most 8 memories: 0.658, 0.164, 553); the silence set's
train half 5 of 124. No policy of the grid reaches precision 0.5 with useful recall (0.34 at most,
recall 0.35): the search's first result is evidence for about two questions in five, and session
summaries fill many places (the relevance model counts a summary of a session holding evidence as
relevant; the benchmark counts only the evidence turns themselves).

Fewer, better memories over a full budget: the most confident memory may take up to ``LEAD_SHARE``
of the budget, so that the one most likely to answer is read and not only named (held-out recall
0.707 against 0.714 with equal shares); the rest is shared in the search's order, each memory's
text cut to what is left for it; a memory that would be cut below ``MIN_BODY_TOKENS`` is left out
rather than shown as a stub. The most confident result always stays (the cap or a short budget take
from the others). Nothing eligible, or not even the first memory's heading within the budget:
nothing (silence). No recency prior: the confidence is a calibrated chance, a bonus on it would
make it none, and the dev set cannot measure one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from memsync.config.cjk import pieces
from memsync.config.tokens import count_tokens
from memsync.search.models import Signal

# Chosen on the dev set and the silence set's train half by scripts/bench_inject.py (the most recall with
# at most 5% of the train half answered; the same policy in 4 of the 5 held-out folds, the fifth a gate of
# 0.45): see the module docstring.
MIN_SIMILARITY = 0.36
MIN_CONFIDENCE = 0.0
FLOOR = 0.0  # a further memory's own confidence at least this ...
RATIO = 0.0  # ... and at least this share of the best one's
MAX_MEMORIES = 16
WORDS_ONLY = True  # whether a result found by words only (no similarity) may be injected
MIN_BODY_TOKENS = 8  # a memory whose text would be cut below this is left out rather than shown as a stub
LEAD_SHARE = 0.2  # of the budget, what the most confident memory may take (the others share the rest)
ELLIPSIS = " …"

Counter = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Policy:
    """The decision's thresholds (the defaults are the shipped choice; the benchmark varies them):
    the gates (the best similarity, the best confidence), which further memories go in (a confidence
    floor, a share of the best one's), how many, and whether a words-only result may."""

    min_similarity: float = MIN_SIMILARITY
    min_confidence: float = MIN_CONFIDENCE
    floor: float = FLOOR
    ratio: float = RATIO
    max_memories: int = MAX_MEMORIES
    words_only: bool = WORDS_ONLY


SHIPPED = Policy()


@dataclass(frozen=True, slots=True)
class Candidate:
    """One ranked result as the decision sees it: its ref, its signals, and its text as it would be
    rendered (``heading``: the line's start, e.g. ref, date and project; ``body``: the memory's text,
    already made safe to put in the frame by the caller)."""

    ref: str
    similarity: float | None
    confidence: float | None
    signals: Signal
    heading: str
    body: str


@dataclass(frozen=True, slots=True)
class Chosen:
    """One memory to inject: its ref, its heading, its text (cut to the budget) and their tokens."""

    ref: str
    heading: str
    body: str
    tokens: int


def choose(results: Sequence[Candidate], budget_tokens: int, seen: Collection[str] = frozenset(),
           count: Counter = count_tokens, policy: Policy = SHIPPED) -> list[Chosen]:
    """What to inject from ``results`` (the search's order), within ``budget_tokens`` (for the
    entries; the frame's own tokens are the caller's), leaving out the refs in ``seen`` (already
    injected in this session); in the search's order, empty when nothing fits. See the module
    docstring."""
    usable = _first_of_each_text([(c.confidence, c) for c in results if c.ref not in seen and c.confidence is not None
                                  and (policy.words_only or c.signals is not Signal.LEXICAL)])
    if not usable or budget_tokens <= 0:
        return []
    # Two gates, two questions: the best similarity says whether the memory holds anything about the
    # prompt (a words-only result has none: it cannot open the gate on its own); the confidence is the
    # relevance model's chance within a search, a search for an unrelated prompt has its confident rows too.
    nearest = max((c.similarity or 0.0 for _, c in usable), default=0.0)
    best, best_ref = max(((p, c.ref) for p, c in usable), key=lambda x: x[0])  # the first of the best
    if nearest < policy.min_similarity or best < policy.min_confidence:
        return []
    bar = max(policy.floor, policy.ratio * best)
    near: list[Candidate] = []
    refs: set[str] = set()
    for p, c in usable:
        if (p >= bar or c.ref == best_ref) and c.ref not in refs:
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
    # The most confident memory is read, not only named: it may take up to LEAD_SHARE of the budget
    # (what it needs, at least its equal share); the others share what is left, in the search's order.
    lead = next(c for c in kept if c.ref == best_ref)
    chosen: dict[str, Chosen] = {}
    if (first := _fit(lead, max(budget_tokens // len(kept), int(budget_tokens * LEAD_SHARE)), heads[lead.ref],
                      count)) is not None:
        chosen[lead.ref] = first
    left = budget_tokens - (first.tokens if first is not None else 0)
    rest = [c for c in kept if c.ref != best_ref]
    for n, c in enumerate(rest):
        share = left // (len(rest) - n)  # what is left, shared by the memories still to come
        if (one := _fit(c, share, heads[c.ref], count)) is not None:
            chosen[c.ref] = one
            left -= one.tokens
    return [chosen[c.ref] for c in kept if c.ref in chosen]


def _first_of_each_text(usable: list[tuple[float, Candidate]]) -> list[tuple[float, Candidate]]:
    """``usable`` with each text once, at its first place in the search's order: rows of the same
    text (claude-mem records the same observation several times over, upstream #1955) would spend
    the budget on one memory. Texts are compared with case and runs of white space ignored."""
    texts: set[str] = set()
    out = []
    for p, c in usable:
        text = " ".join(c.body.casefold().split())
        if text and text in texts:
            continue
        texts.add(text)
        out.append((p, c))
    return out


def _fit(c: Candidate, share: int, head: int, count: Counter) -> Chosen | None:
    """``c`` within ``share`` tokens: whole, or its text cut; None when not even its heading and a
    few words fit."""
    whole = head + count(c.body)
    if whole <= share:
        return Chosen(c.ref, c.heading, c.body, whole)
    body = cut(c.body, share - head, count)
    if body is None:
        return None
    return Chosen(c.ref, c.heading, body, head + count(body))


def cut(text: str, tokens: int, count: Counter = count_tokens) -> str | None:
    """The longest start of ``text`` by whole words (or whole characters of a script written without
    spaces: ``config.cjk.pieces``), with an ellipsis, of at most ``tokens`` tokens; None when fewer
    than ``MIN_BODY_TOKENS`` would be left of it."""
    if tokens < MIN_BODY_TOKENS:
        return None
    if count(text) <= tokens:
        return text
    parts = pieces(text)
    room = tokens - count(ELLIPSIS)
    lo, hi = 0, len(parts)  # the most pieces whose start fits: binary search (a count is a tokenizer call)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count("".join(parts[:mid]).rstrip()) <= room:
            lo = mid
        else:
            hi = mid - 1
    start = "".join(parts[:lo]).rstrip()
    if count(start) < MIN_BODY_TOKENS:
        return None
    return start + ELLIPSIS
