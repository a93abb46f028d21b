"""Snippets: which field, where it is cut, what is marked; CJK, long and hostile text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memsync.config.claude_mem.schema import Kind
from memsync.search.snippets import SNIPPET_CHARS, Snippet, clean_text, cut, matches, merge, snippet


def marked(s: Snippet) -> list[str]:
    return [s.text[a:b] for a, b in s.highlights]


class TestMatches:
    def test_words_and_their_stems_are_marked_as_full_text_search_finds_them(self) -> None:
        text = "Upload retries: the uploader retried twice"
        assert [text[a:b] for a, b in matches(text, ["upload", "retries"])] == ["Upload", "retries", "uploader",
                                                                               "retried"]

    def test_a_word_inside_another_is_not_a_match(self) -> None:
        assert matches("reupload the file", ["upload"]) == []

    def test_cjk_bigrams_are_found_inside_a_run_and_overlapping_ones_join(self) -> None:
        text = "修复退款金额的舍入错误"
        assert [text[a:b] for a, b in matches(text, ["退款", "款金", "金额"])] == ["退款金额"]

    def test_offsets_stay_right_after_a_letter_whose_lower_case_is_longer(self) -> None:
        text = "İstanbul upload Straße"
        assert [text[a:b] for a, b in matches(text, ["upload", "straße"])] == ["upload", "Straße"]

    def test_merge_joins_overlapping_and_touching_ranges(self) -> None:
        assert merge([(5, 7), (0, 2), (1, 3), (7, 9)]) == [(0, 3), (5, 9)]


class TestCut:
    def test_short_text_is_kept_whole(self) -> None:
        assert cut("short text", [(0, 5)]) == Snippet("short text", ((0, 5),))

    def test_long_text_is_cut_around_the_matches_with_ellipses(self) -> None:
        text = "lead " * 100 + "the ledger table duplicated rows " + "tail " * 100
        start = text.index("ledger")
        s = cut(text, [(start, start + 6)])
        assert len(s.text) <= SNIPPET_CHARS and s.text.startswith("…") and s.text.endswith("…")
        assert marked(s) == ["ledger"]

    def test_the_window_holding_most_matches_wins(self) -> None:
        text = "alpha " + "x " * 200 + "alpha alpha alpha " + "y " * 200
        hits = matches(text, ["alpha"])
        s = cut(text, hits)
        assert marked(s) == ["alpha"] * 3


class TestSnippet:
    def test_the_field_with_most_query_words_is_shown(self) -> None:
        record = {"title": "Fix uploads", "narrative": "Upload retries duplicated rows in the ledger"}
        s = snippet(Kind.OBSERVATION, record, "upload retries ledger")
        assert s is not None and s.field == "narrative"
        assert marked(s) == ["Upload", "retries", "ledger"]

    def test_a_result_found_by_meaning_only_shows_the_head_of_its_best_field(self) -> None:
        record = {"title": "Retry budget", "narrative": "n" * 300, "facts": ["first fact", "second fact"]}
        s = snippet(Kind.OBSERVATION, record, "flaky network", field="fact_1", by_meaning_only=True)
        assert s == Snippet("second fact", (), "fact_1")
        s = snippet(Kind.OBSERVATION, record, "flaky network", field="narrative", by_meaning_only=True)
        assert s is not None and s.text.startswith("n" * 150) and len(s.text) == SNIPPET_CHARS

    def test_no_query_shows_the_first_field(self) -> None:
        s = snippet(Kind.SUMMARY, {"request": None, "learned": "It works\n\nnow"}, "")
        assert s == Snippet("It works now", (), "learned")

    def test_prompts_and_empty_records(self) -> None:
        s = snippet(Kind.PROMPT, {"prompt_text": "why do uploads fail"}, "uploads", field="prompt")
        assert s is not None and s.field == "prompt_text" and marked(s) == ["uploads"]
        assert snippet(Kind.PROMPT, {"prompt_text": "  "}, "x") is None

    def test_cjk_query_marks_the_words_in_a_chinese_record(self) -> None:
        record = {"title": "退款", "narrative": "我们修复了退款金额的舍入错误，并补了测试。"}
        s = snippet(Kind.OBSERVATION, record, "退款金额 舍入")
        assert s is not None and s.field == "narrative" and marked(s) == ["退款金额", "舍入"]

    def test_hostile_text_stays_text_and_control_characters_go(self) -> None:
        record = {"narrative": "<img src=x onerror=alert(1)>\x00 upload\u202e done\u200b </script>"}
        s = snippet(Kind.OBSERVATION, record, "upload")
        assert s is not None and s.text == "<img src=x onerror=alert(1)> upload done </script>"
        assert marked(s) == ["upload"]

    def test_offsets_count_code_points_past_emoji_and_astral_characters(self) -> None:
        s = snippet(Kind.OBSERVATION, {"narrative": "🎉𠀀 upload"}, "upload")
        assert s is not None and s.highlights == ((3, 9),)


@given(st.text(max_size=600), st.text(max_size=40))
def test_any_text_and_query_give_a_bounded_snippet_with_ranges_inside_it(text: str, query: str) -> None:
    """Whatever the record and the query: at most SNIPPET_CHARS, sorted disjoint ranges inside the text."""
    s = snippet(Kind.OBSERVATION, {"narrative": text}, query)
    if s is None:
        assert clean_text(text) == ""
        return
    assert len(s.text) <= SNIPPET_CHARS
    last = 0
    for a, b in s.highlights:
        assert last <= a < b <= len(s.text)
        last = b
