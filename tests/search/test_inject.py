"""The injection decision (search.inject.choose): silence when nothing fits, the budget kept, fewer
better memories, no ref twice in a session."""

from __future__ import annotations

from memsync.config.tokens import count_tokens
from memsync.search.inject import MARGIN, MAX_MEMORIES, MIN_QUALITY, Candidate, choose, cut, quality
from memsync.search.models import Signal

LONG = " ".join(f"word{i} about the upload retry budget" for i in range(200))


SHORT = "the retry budget for flaky uploads was raised to five after the ledger duplicated rows"


def cand(ref: str, similarity: float | None, signals: Signal = Signal.SEMANTIC, body: str = SHORT,
         age: float | None = None) -> Candidate:
    return Candidate(ref, similarity, signals, f"{ref} 2026-11-01 alpha", body, age)


class TestSilence:
    def test_nothing_when_no_result(self) -> None:
        assert choose([], 600, set()) == []

    def test_nothing_below_the_threshold_whatever_the_rank(self) -> None:
        """A result found only by meaning has fused score 1.0; its similarity decides."""
        assert choose([cand("#1", MIN_QUALITY - 0.1), cand("#2", 0.2)], 600, set()) == []

    def test_words_only_is_never_injected(self) -> None:
        """No similarity (found by words only): a stack trace shares words with many memories."""
        assert quality(cand("#1", None, Signal.LEXICAL)) is None
        assert choose([cand("#1", None, Signal.LEXICAL)], 600, set()) == []

    def test_nothing_when_the_budget_cannot_hold_one_memory(self) -> None:
        assert choose([cand("#1", 0.8)], 5, set()) == []
        assert choose([cand("#1", 0.8)], 0, set()) == []


class TestBudget:
    def test_every_budget_is_kept(self) -> None:
        results = [cand("#1", 0.8, body=LONG), cand("#2", 0.78, body=LONG), cand("#3", 0.77, body=LONG)]
        for budget in (20, 40, 100, 300, 600, 1500):
            chosen = choose(results, budget, set())
            assert chosen, budget
            assert sum(c.tokens for c in chosen) <= budget
            for c in chosen:
                assert c.tokens == count_tokens(c.heading) + count_tokens(c.body)

    def test_a_long_text_is_cut_at_a_word_with_an_ellipsis(self) -> None:
        (only,) = choose([cand("#1", 0.8, body=LONG)], 100, set())
        assert only.body.endswith(" …") and LONG.startswith(only.body[:-2])
        assert 80 < only.tokens <= 100  # the budget is used, not wasted

    def test_a_short_memory_is_whole(self) -> None:
        (only,) = choose([cand("#1", 0.8)], 600, set())
        assert only.body == cand("#1", 0.8).body

    def test_cut_refuses_a_stub(self) -> None:
        assert cut(LONG, 3) is None
        assert cut("short text", 50) == "short text"


class TestFewerBetter:
    def test_only_memories_near_the_best_one(self) -> None:
        chosen = choose([cand("#1", 0.85), cand("#2", 0.84 - MARGIN), cand("#3", 0.8 - MARGIN)], 600, set())
        assert [c.ref for c in chosen] == ["#1"]

    def test_at_most_max_memories_even_with_budget_left(self) -> None:
        results = [cand(f"#{i}", 0.8 - i * 0.001) for i in range(10)]
        chosen = choose(results, 1500, set())
        assert len(chosen) == MAX_MEMORIES
        assert sum(c.tokens for c in chosen) < 1500 / 2

    def test_the_search_order_is_kept(self) -> None:
        """The search ranks; the similarity only says whether a memory is near enough to the best."""
        chosen = choose([cand("#P2", 0.62, Signal.BOTH), cand("#1", 0.80), cand("#S3", 0.70)], 600, set())
        assert [c.ref for c in chosen] == ["#P2", "#1", "#S3"]

    def test_the_best_quality_opens_the_gate_wherever_it_ranks(self) -> None:
        results = [cand("#1", MIN_QUALITY - 0.1), cand("#2", MIN_QUALITY + 0.05)]
        assert [c.ref for c in choose(results, 600, set())] == ["#1", "#2"]
        assert choose(results[:1], 600, set()) == []

    def test_both_sides_agreeing_tip_the_margin(self) -> None:
        best, near = cand("#1", 0.80), cand("#2", 0.80 - MARGIN - 0.01)
        assert [c.ref for c in choose([best, near], 600, set())] == ["#1"]
        agreeing = cand("#2", 0.80 - MARGIN - 0.01, Signal.BOTH)
        assert [c.ref for c in choose([best, agreeing], 600, set())] == ["#1", "#2"]

    def test_recency_tips_the_gate_only(self) -> None:
        assert choose([cand("#3", MIN_QUALITY - 0.03, age=0)], 600, set()) == []
        assert choose([cand("#3", MIN_QUALITY - 0.01, age=3000)], 600, set()) == []
        assert [c.ref for c in choose([cand("#3", MIN_QUALITY - 0.01, age=0)], 600, set())] == ["#3"]

    def test_the_one_that_opened_the_gate_always_stays(self) -> None:
        """The cap and a short budget take from the search's order, never the best one: the block
        must not hold only memories that did not pass the gate."""
        low = MIN_QUALITY - MARGIN + 0.05
        results = [cand(f"#{i}", low) for i in range(MAX_MEMORIES)] + [cand("#best", MIN_QUALITY + 0.01)]
        refs = [c.ref for c in choose(results, 1500, set())]
        assert len(refs) == MAX_MEMORIES and refs[-1] == "#best" and "#7" not in refs
        short = [cand("#1", low, body=LONG), cand("#2", low, body=LONG), cand("#3", MIN_QUALITY + 0.01, body=LONG)]
        assert [c.ref for c in choose(short, 25, set())] == ["#3"]
        assert [c.ref for c in choose([cand("#1", low), cand("#1", MIN_QUALITY + 0.01)], 600, set())] == ["#1"]

    def test_a_small_budget_keeps_the_best_rather_than_stubs_of_each(self) -> None:
        results = [cand("#1", 0.8, body=LONG), cand("#2", 0.79, body=LONG), cand("#3", 0.78, body=LONG)]
        chosen = choose(results, 30, set())
        assert [c.ref for c in chosen] == ["#1"]


class TestSeen:
    def test_seen_refs_are_not_repeated(self) -> None:
        results = [cand("#1", 0.8), cand("#S2", 0.79), cand("#P3", 0.78 - MARGIN)]
        assert [c.ref for c in choose(results, 600, {"#1"})] == ["#S2"]
        assert choose(results, 600, {"#1", "#S2", "#P3"}) == []

    def test_a_ref_listed_twice_is_chosen_once(self) -> None:
        assert [c.ref for c in choose([cand("#1", 0.8), cand("#1", 0.8)], 600, set())] == ["#1"]
