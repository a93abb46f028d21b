"""The injection decision (search.inject.choose): silence when nothing fits (the best similarity's
gate, the best confidence's), which further memories go in (the confidence's floor and share of the
best, the cap, the search's order, the best always kept), words-only results, the budget kept,
fewer better memories, no ref twice in a session."""

from __future__ import annotations

from memsync.config.tokens import count_tokens
from memsync.search.inject import MAX_MEMORIES, MIN_BODY_TOKENS, MIN_SIMILARITY, SHIPPED, Candidate, Policy, choose, cut
from memsync.search.models import Signal

LONG = " ".join(f"word{i} about the upload retry budget" for i in range(200))
SHORT = "the retry budget for flaky uploads was raised to five after the ledger duplicated rows"
NEAR = MIN_SIMILARITY + 0.1  # a similarity that opens the similarity gate
FAR = MIN_SIMILARITY - 0.05  # one that does not


def cand(ref: str, confidence: float | None, similarity: float | None = NEAR, signals: Signal = Signal.BOTH,
         body: str | None = None) -> Candidate:
    """A candidate; its text is :data:`SHORT` and its ref unless given (two rows of one text are one memory)."""
    return Candidate(ref, similarity, confidence, signals, f"{ref} 2026-11-01 alpha",
                     f"{SHORT} {ref}" if body is None else body)


def refs(results: list[Candidate], budget: int = 600, seen: frozenset[str] = frozenset(),
         policy: Policy = SHIPPED) -> list[str]:
    return [c.ref for c in choose(results, budget, seen, policy=policy)]


class TestSilence:
    def test_nothing_when_no_result(self) -> None:
        assert choose([], 600, set()) == []

    def test_nothing_when_no_result_is_near_enough_whatever_its_confidence(self) -> None:
        """The confidence is a chance within one search: an unrelated prompt's search has confident
        rows too, so only the best similarity says whether the memory holds anything."""
        assert refs([cand("#1", 0.95, FAR), cand("#2", 0.9, FAR - 0.1)]) == []
        assert refs([cand("#1", 0.95, FAR), cand("#2", 0.05, NEAR)]) == ["#1", "#2"]

    def test_the_confidence_gate_when_a_policy_asks_for_one(self) -> None:
        policy = Policy(min_confidence=0.5)
        assert refs([cand("#1", 0.45), cand("#2", 0.3)], policy=policy) == []
        assert refs([cand("#1", 0.3), cand("#2", 0.55)], policy=policy)[-1] == "#2"

    def test_a_result_without_a_confidence_is_never_injected(self) -> None:
        """Rows past the re-ranked depth carry none: nothing says how likely they are."""
        assert refs([cand("#1", None)]) == []
        assert refs([cand("#1", None), cand("#2", 0.4)]) == ["#2"]

    def test_nothing_when_the_budget_cannot_hold_one_memory(self) -> None:
        assert choose([cand("#1", 0.8)], 5, set()) == []
        assert choose([cand("#1", 0.8)], 0, set()) == []


class TestWordsOnly:
    def test_a_words_only_result_cannot_open_the_gate(self) -> None:
        """No similarity: a pasted stack trace shares words with many memories and means none of them."""
        assert refs([cand("#1", 0.9, None, Signal.LEXICAL)]) == []

    def test_it_goes_in_beside_a_result_that_opened_the_gate(self) -> None:
        results = [cand("#1", 0.6, None, Signal.LEXICAL), cand("#2", 0.5)]
        assert refs(results) == ["#1", "#2"]
        assert refs(results, policy=Policy(words_only=False)) == ["#2"]


class TestWhichMemories:
    def test_further_memories_at_least_the_floor(self) -> None:
        policy = Policy(floor=0.2)
        assert refs([cand("#1", 0.6), cand("#2", 0.21), cand("#3", 0.19)], policy=policy) == ["#1", "#2"]

    def test_further_memories_at_least_a_share_of_the_best_one(self) -> None:
        policy = Policy(floor=0.0, ratio=0.5)
        assert refs([cand("#1", 0.6), cand("#2", 0.31), cand("#3", 0.29)], policy=policy) == ["#1", "#2"]

    def test_at_most_max_memories_even_with_budget_left(self) -> None:
        chosen = choose([cand(f"#{i}", 0.8 - i * 0.01) for i in range(MAX_MEMORIES + 2)], 1500, set())
        assert len(chosen) == MAX_MEMORIES
        assert sum(c.tokens for c in chosen) < 1500 / 2

    def test_the_search_order_is_kept(self) -> None:
        """The search ranks (by the same confidence, among other things); the decision does not reorder."""
        assert refs([cand("#P2", 0.5), cand("#1", 0.8), cand("#S3", 0.7)]) == ["#P2", "#1", "#S3"]

    def test_the_most_confident_always_stays(self) -> None:
        """The cap, the floor and a short budget take from the search's order, never the best one."""
        results = [cand(f"#{i}", 0.3) for i in range(MAX_MEMORIES)] + [cand("#best", 0.7)]
        got = refs(results, 1500)
        assert len(got) == MAX_MEMORIES and got[-1] == "#best" and f"#{MAX_MEMORIES - 1}" not in got
        assert refs([cand("#1", 0.05), cand("#2", 0.06)], policy=Policy(floor=0.5)) == ["#2"]
        short = [cand(f"#{i}", p, body=f"{LONG} {i}") for i, p in ((1, 0.3), (2, 0.3), (3, 0.7))]
        assert refs(short, 25) == ["#3"]
        assert refs([cand("#1", 0.3), cand("#1", 0.7)], policy=Policy(floor=0.5)) == ["#1"]

    def test_a_small_budget_keeps_the_best_rather_than_stubs_of_each(self) -> None:
        results = [cand(f"#{i}", p, body=f"{LONG} {i}") for i, p in ((1, 0.8), (2, 0.79), (3, 0.78))]
        assert refs(results, 30) == ["#1"]


class TestBudget:
    def test_every_budget_is_kept(self) -> None:
        results = [cand(f"#{i}", p, body=f"{LONG} {i}") for i, p in ((1, 0.8), (2, 0.78), (3, 0.77))]
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

    def test_the_most_confident_memory_is_read_while_the_others_are_named(self) -> None:
        """With many memories each line gets little room; the most confident one gets up to
        LEAD_SHARE of the budget, wherever the search ranked it, and is whole when that holds it."""
        answer = "The jellyfish service reads its deploy config from deploy/jelly.toml, not from the chart."
        others = [cand(f"#{i}", 0.3, body=f"{LONG} {i}") for i in range(MAX_MEMORIES - 1)]
        chosen = choose([*others[:3], cand("#best", 0.7, body=answer), *others[3:]], 485, set())
        by_ref = {c.ref: c for c in chosen}
        assert len(chosen) == MAX_MEMORIES and by_ref["#best"].body == answer
        assert all(c.body.endswith(" …") for c in chosen if c.ref != "#best")
        assert [c.ref for c in chosen].index("#best") == 3  # still in the search's order
        assert sum(c.tokens for c in chosen) <= 485

    def test_a_short_memory_is_whole(self) -> None:
        (only,) = choose([cand("#1", 0.8, body=SHORT)], 600, set())
        assert only.body == SHORT

    def test_a_text_without_spaces_is_cut_between_characters(self) -> None:
        """Chinese and Japanese are written without spaces: a memory in them is cut short like any
        other, never left out for having no word short enough."""
        text = "数据库备份在恢复演练中失败，原因是基础备份缺少预写日志段，" * 20
        start = cut(text, 30)
        assert start is not None and start.endswith(" …") and text.startswith(start[:-2])
        assert MIN_BODY_TOKENS <= count_tokens(start) <= 30
        (only,) = choose([cand("#1", 0.8, body=text)], 60, set())
        assert only.tokens <= 60 and only.body.endswith(" …")

    def test_cut_refuses_a_stub(self) -> None:
        assert cut(LONG, 3) is None
        assert cut("short text", 50) == "short text"


class TestSameText:
    def test_rows_of_one_text_are_one_memory_at_the_first_place(self) -> None:
        """claude-mem can record one observation many times (upstream #1955): one line, not ten."""
        copies = [cand(f"#{i}", 0.5 - i / 100, body=SHORT if i % 2 else f"  {SHORT.upper()} ") for i in range(1, 9)]
        other = cand("#9", 0.2, body="the ledger duplicated rows when two workers flushed at once")
        assert refs([*copies, other]) == ["#1", "#9"]

    def test_a_seen_copy_does_not_hide_the_next_one(self) -> None:
        """The rule is within one answer: a copy already injected in the session is left out as a ref."""
        assert refs([cand("#1", 0.5, body=SHORT), cand("#2", 0.4, body=SHORT)], seen=frozenset({"#1"})) == ["#2"]


class TestSeen:
    def test_seen_refs_are_not_repeated(self) -> None:
        results = [cand("#1", 0.8), cand("#S2", 0.6), cand("#P3", 0.5, FAR)]
        assert refs(results, seen=frozenset({"#1"})) == ["#S2", "#P3"]
        assert refs(results, seen=frozenset({"#1", "#S2", "#P3"})) == []

    def test_a_seen_ref_cannot_open_the_gate(self) -> None:
        assert refs([cand("#1", 0.8), cand("#2", 0.6, FAR)], seen=frozenset({"#1"})) == []

    def test_a_ref_listed_twice_is_chosen_once(self) -> None:
        assert refs([cand("#1", 0.8), cand("#1", 0.8)]) == ["#1"]
