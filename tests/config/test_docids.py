"""Document ids: the upstream scheme, round-trip, no collisions across kinds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.config.claude_mem.schema import SUMMARY_FIELDS, Kind
from memsync.config.docids import DocId, DocIdError, fact_field, format_doc_id, parse_doc_id

ids = st.integers(min_value=0, max_value=2**53)
obs_fields = st.one_of(st.sampled_from(["narrative", "text", "title"]), st.integers(0, 10_000).map(fact_field))
doc_keys = st.one_of(
    st.tuples(st.just(Kind.OBSERVATION), ids, obs_fields),
    st.tuples(st.just(Kind.SUMMARY), ids, st.sampled_from(SUMMARY_FIELDS)),
    st.tuples(st.just(Kind.PROMPT), ids, st.none()),
)


class TestDocIds:
    @given(doc_keys)
    def test_parse_inverts_format(self, key: tuple[Kind, int, str | None]) -> None:
        kind, sid, field = key
        assert parse_doc_id(format_doc_id(kind, sid, field)) == DocId(kind, sid, field)

    @given(doc_keys, doc_keys)
    def test_distinct_keys_never_share_an_id(
        self, a: tuple[Kind, int, str | None], b: tuple[Kind, int, str | None]
    ) -> None:
        if a != b:
            assert format_doc_id(*a) != format_doc_id(*b)

    def test_upstream_examples(self) -> None:
        assert format_doc_id(Kind.OBSERVATION, 5, "narrative") == "obs_5_narrative"
        assert format_doc_id(Kind.OBSERVATION, 5, fact_field(2)) == "obs_5_fact_2"
        assert format_doc_id(Kind.SUMMARY, 5, "next_steps") == "summary_5_next_steps"
        assert format_doc_id(Kind.PROMPT, 5) == "prompt_5"
        assert parse_doc_id("obs_5_fact_2").fact_index == 2

    @pytest.mark.parametrize("bad", ["", "obs_5", "obs_x_text", "summary_5_title", "prompt_5_text", "prompt_-1",
                                     "obs_٣_text", "obs_5_narrative ", "OBS_5_text"])
    def test_rejects_anything_else(self, bad: str) -> None:
        with pytest.raises(DocIdError):
            parse_doc_id(bad)

    @given(st.text(max_size=40))
    def test_parse_never_raises_anything_but_docid_error(self, text: str) -> None:
        try:
            parsed = parse_doc_id(text)
        except DocIdError:
            return
        assert str(parsed) == text or parse_doc_id(str(parsed)) == parsed
