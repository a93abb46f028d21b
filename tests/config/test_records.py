"""Record references, kind names and ISO dates: the one parser the CLI, HTTP and MCP share."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.records import (
    KIND_CHOICES,
    RecordRefError,
    format_ref,
    iso_from_ms,
    ms_from_iso,
    parse_iso,
    parse_kinds,
    parse_record_ref,
)


class TestRecordRefs:
    @given(st.sampled_from(KINDS), st.integers(min_value=1, max_value=10**18 - 1))
    def test_a_printed_reference_parses_back(self, kind: Kind, row_id: int) -> None:
        assert parse_record_ref(format_ref(kind, row_id)) == (kind, row_id)

    @pytest.mark.parametrize(("text", "expected"), [
        ("123", (Kind.OBSERVATION, 123)), ("#123", (Kind.OBSERVATION, 123)), (" #s12 ", (Kind.SUMMARY, 12)),
        ("S12", (Kind.SUMMARY, 12)), ("P5", (Kind.PROMPT, 5)), ("#P5", (Kind.PROMPT, 5)), (7, (Kind.OBSERVATION, 7)),
    ])
    def test_accepted_spellings(self, text: str | int, expected: tuple[Kind, int]) -> None:
        assert parse_record_ref(text) == expected

    @pytest.mark.parametrize("text", ["", "#", "S", "X12", "12a", "#S0", 0, -3, True, "1" * 19, "2026-11-01"])
    def test_anything_else_is_refused_with_what_is_accepted(self, text: str | int) -> None:
        with pytest.raises(RecordRefError):
            parse_record_ref(text)


class TestKindNames:
    def test_choices_are_all_and_the_plural_names(self) -> None:
        assert KIND_CHOICES == ("all", "observations", "sessions", "prompts")
        assert parse_kinds("all") == KINDS and parse_kinds(None) == KINDS

    def test_aliases_and_dedup(self) -> None:
        assert parse_kinds("sessions, summary,prompts") == (Kind.SUMMARY, Kind.PROMPT)

    def test_unknown_kind_names_the_accepted_ones(self) -> None:
        with pytest.raises(RecordRefError, match="observations, sessions, prompts"):
            parse_kinds("notes")


class TestDates:
    def test_naive_is_utc_and_z_is_accepted(self) -> None:
        assert parse_iso("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
        assert parse_iso("2026-11-01T10:00:00Z") == parse_iso("2026-11-01T11:00:00+01:00")

    @given(st.integers(min_value=0, max_value=4_102_444_800_000))
    def test_claude_mem_timestamps_round_trip(self, ms: int) -> None:
        text = iso_from_ms(ms)
        assert text.endswith("Z") and len(text) == 24
        assert ms_from_iso(text) == ms

    @pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "", "1e9"])
    def test_not_a_date(self, text: str) -> None:
        with pytest.raises(RecordRefError, match="2026-11-01"):
            parse_iso(text)
