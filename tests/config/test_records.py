"""Record references, kind names and ISO dates: the one parser the CLI, HTTP and MCP share."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.kinds import KIND_CHOICES
from memsync.config.records import (
    MAX_ROW_ID,
    InvalidRecordId,
    RecordRefError,
    format_ref,
    iso_from_ms,
    ms_from_iso,
    parse_iso,
    parse_kinds,
    parse_record_ref,
)


class TestRecordRefs:
    @given(st.sampled_from(KINDS), st.integers(min_value=1, max_value=MAX_ROW_ID))
    def test_a_printed_reference_parses_back(self, kind: Kind, row_id: int) -> None:
        assert parse_record_ref(format_ref(kind, row_id)) == (kind, row_id)

    @pytest.mark.parametrize(("text", "expected"), [
        ("123", (Kind.OBSERVATION, 123)), ("#123", (Kind.OBSERVATION, 123)), (" #s12 ", (Kind.SUMMARY, 12)),
        ("S12", (Kind.SUMMARY, 12)), ("P5", (Kind.PROMPT, 5)), ("#P5", (Kind.PROMPT, 5)), (7, (Kind.OBSERVATION, 7)),
    ])
    def test_accepted_spellings(self, text: str | int, expected: tuple[Kind, int]) -> None:
        assert parse_record_ref(text) == expected

    @pytest.mark.parametrize("text", ["", "#", "S", "X12", "12a", True, "2026-11-01", "S-", "P 1 2"])
    def test_anything_else_is_refused_with_what_is_accepted(self, text: str | int) -> None:
        with pytest.raises(RecordRefError, match="use 123 or #123") as info:
            parse_record_ref(text)
        assert not isinstance(info.value, InvalidRecordId)

    @pytest.mark.parametrize("value", ["0", "#S0", "S0", "P-1", "-3", "#-5", str(MAX_ROW_ID + 1),
                                       pytest.param("9" * 5000, id="5000 digits"), 0, -3, MAX_ROW_ID + 1, 10**30,
                                       pytest.param(10**5000, id="10**5000")])
    def test_an_id_no_record_can_have_is_out_of_range(self, value: str | int) -> None:
        """Shaped like an id but not a valid one (0, negative, past SQLite's int64)."""
        with pytest.raises(InvalidRecordId, match=f"out of range: ids are 1 to {MAX_ROW_ID}"):
            parse_record_ref(value)

    def test_the_largest_sqlite_rowid_is_an_id(self) -> None:
        assert parse_record_ref(str(MAX_ROW_ID)) == (Kind.OBSERVATION, MAX_ROW_ID)
        assert parse_record_ref("P" + "0" * 30 + "7") == (Kind.PROMPT, 7)


class TestKindNames:
    def test_choices_are_all_and_the_plural_names(self) -> None:
        assert KIND_CHOICES == ("all", "observations", "summaries", "prompts")
        assert parse_kinds("all") == KINDS and parse_kinds(None) == KINDS

    def test_aliases_and_dedup(self) -> None:
        assert parse_kinds("sessions, summary,prompts") == (Kind.SUMMARY, Kind.PROMPT)
        assert parse_kinds(["summaries", "session", "user_prompts", "obs"]) == (Kind.SUMMARY, Kind.PROMPT,
                                                                               Kind.OBSERVATION)

    def test_unknown_kind_names_the_accepted_ones(self) -> None:
        with pytest.raises(RecordRefError, match="observations, summaries, prompts"):
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
