"""The one table of kind names: the words every front end shows, the aliases it accepts,
and claude-mem's own words kept as upstream writes them."""

from __future__ import annotations

import pytest

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.docids import DOC_TYPES
from memsync.config.kinds import ALL_KINDS, KIND_BY_NAME, KIND_CHOICES, KIND_NAMES, choice_for, plural
from memsync.config.records import format_ref


class TestKindTable:
    def test_the_choices_are_all_then_each_kinds_plural(self) -> None:
        assert (ALL_KINDS, *(plural(k) for k in KINDS)) == KIND_CHOICES
        assert [plural(k) for k in KINDS] == ["observations", "summaries", "prompts"]

    def test_json_values_are_the_kind_values_unchanged(self) -> None:
        assert [k.value for k in KINDS] == ["observation", "summary", "prompt"]

    def test_claude_mem_doc_types_keep_upstreams_words(self) -> None:
        assert DOC_TYPES == {Kind.OBSERVATION: "observation", Kind.SUMMARY: "session_summary",
                             Kind.PROMPT: "user_prompt"}

    def test_references_print_their_letter(self) -> None:
        assert [format_ref(k, 7) for k in KINDS] == ["#7", "#S7", "#P7"]

    def test_every_name_belongs_to_one_kind(self) -> None:
        names = [n for k, kn in KIND_NAMES.items() for n in (k.value, kn.plural, *kn.aliases)]
        assert len(names) == len(set(names)) == len(KIND_BY_NAME)


class TestChoiceFor:
    @pytest.mark.parametrize(("name", "choice"), [
        ("sessions", "summaries"), ("session", "summaries"), ("Summary", "summaries"), ("summaries", "summaries"),
        ("user_prompts", "prompts"), ("prompt", "prompts"), ("obs", "observations"), (" observation ", "observations"),
    ])
    def test_an_accepted_name_stands_for_its_choice(self, name: str, choice: str) -> None:
        assert choice_for(name) == choice

    @pytest.mark.parametrize("name", ["all", "emails", "", 3, None])
    def test_anything_else_is_left_for_the_callers_check(self, name: object) -> None:
        assert choice_for(name) == name
