"""servers.render: the command's text lines and the MCP markdown share ids, dates, labels and
one-line text; the servers ask ``Searcher.find_by_*`` for find-by requests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from memsync.config.claude_mem.schema import Kind
from memsync.search import Mode, Response, Result, Signal, Window
from memsync.servers import render
from memsync.servers.mcp_tools import instructions
from memsync.servers.params import BadRequest, FindArgs, Requests

EPOCH = int(datetime(2026, 3, 4, 5, 6).timestamp() * 1000)


def result(**kw: Any) -> Result:
    base: dict[str, Any] = {"kind": Kind.SUMMARY, "id": 12, "score": 0.5, "signals": Signal.BOTH,
                            "created_at_epoch": EPOCH, "project": "alpha", "title": "Retry | budget\nraised"}
    return Result(**{**base, **kw})


def response(*results: Result, **kw: Any) -> Response:
    return Response(kw.pop("mode", Mode.HYBRID), list(results), kw.pop("window", Window(90, 1, None, "window")), **kw)


def test_text_and_markdown_share_id_date_label_and_title() -> None:
    r = result(field="anchor")
    line = render.result_line(r)
    row = render.table([r])[2]
    assert line == "0.500 both     #S12     2026-03-04 05:06  [alpha] summary: Retry | budget raised  <- anchor"
    assert row.startswith("| #S12 | summary | 2026-03-04 05:06 | 0.50 | both | Retry \\| budget raised")
    assert row.endswith("**◀ anchor** |")
    assert render.result_line(result(kind=Kind.OBSERVATION, type="bugfix", title=None, created_at_epoch=None)) \
        == "0.500 both     #12      ?  [alpha] bugfix: "


def test_headers_share_mode_window_and_exclusions() -> None:
    resp = response(result(), reason="chroma down", mode=Mode.LEXICAL_FALLBACK, excluded_by_window=3)
    assert render.response_text(resp).splitlines()[0] == (
        "mode lexical_fallback (chroma down) · last 90 days · 3 older matches outside the window "
        "(--window-days 0 shows them)")
    assert render.header(resp, 0) == ("mode: lexical_fallback (chroma down) · window: last 90 days · results 1-1 · "
                                      "3 older matches outside the window (window_days=0 includes them)")
    dated = response(window=Window(0, EPOCH, None, "date_range"))
    assert render.response_text(dated) == "mode hybrid · 2026-03-04 to now\n(no results)"
    assert render.window_text(response(window=Window(0, None, None, "all_time"))) == "all time"


def test_dates_and_lines() -> None:
    assert render.utc_stamp(None) == "never" and render.utc_stamp(0) == "never"
    assert render.utc_stamp(1_700_000_000_000) == "2023-11-14 22:13:20Z"
    assert render.one_line("a\n  b|c", 4) == "a b…" and render.cell("a|b", 10) == "a\\|b"


def test_instructions_name_the_configured_window() -> None:
    assert "the last 30 days unless" in instructions(30) and "cover\nall time unless" in instructions(0)


class FakeSearcher:
    """Records which Searcher.find_by_* a request reached, with what."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, str, dict[str, Any]]] = []

    def observation_types(self) -> list[str]:
        return ["bugfix", "decision"]

    def _record(self, name: str) -> Any:
        def find(value: Any, query: str = "", **kw: Any) -> Response:
            self.calls.append((name, value, query, kw))
            return response()
        return find

    def __getattr__(self, name: str) -> Any:
        if name.startswith("find_by_"):
            return self._record(name)
        raise AttributeError(name)


def test_find_by_requests_call_the_searchers_find_by() -> None:
    fake = FakeSearcher()
    requests = Requests(fake)  # type: ignore[arg-type]
    requests.find_by("concept", " gotcha ", FindArgs(project=" alpha ", limit=5))
    requests.find_by("file", "src/x.py", FindArgs("retry", window_days=0, offset=5, full=True))
    requests.find_by("type", ["bugfix", "decision"], FindArgs())
    names = [c[0] for c in fake.calls]
    assert names == ["find_by_concept", "find_by_file", "find_by_type"]
    assert fake.calls[0][1:3] == ("gotcha", "") and fake.calls[0][3]["project"] == "alpha"
    assert fake.calls[1][2] == "retry" and fake.calls[1][3]["window_days"] == 0
    assert fake.calls[1][3]["offset"] == 5 and fake.calls[1][3]["format"].value == "full"
    assert fake.calls[2][1] == ("bugfix", "decision")


@pytest.mark.parametrize(("by", "value", "args", "message"), [
    ("type", "nonsense", FindArgs(), "unknown observation type 'nonsense'"),
    ("type", [], FindArgs(), "give an observation type"),
    ("concept", "  ", FindArgs(), "concept must be a non-empty string"),
    ("file", "x", FindArgs(limit=0), "limit must be an integer from 1 to 100"),
    ("file", "x", FindArgs(window_days=-1), "window_days must be"),
])
def test_find_by_refusals(by: Any, value: Any, args: FindArgs, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        Requests(FakeSearcher()).find_by(by, value, args)  # type: ignore[arg-type]


class TestCutoffAndScore:
    """The score shown is the confidence; the answers say how many results the cutoff left out."""

    def test_each_answer_counts_what_the_cutoff_left_out(self) -> None:
        from memsync.servers import claude_mem_render, structured

        resp = response(result(), total=1, below_cutoff=39, min_confidence=0.035)
        assert "39 below the cutoff; --all to show" in render.response_text(resp).splitlines()[0]
        assert "results 1-1 of 1 · 39 below the cutoff; all=true to show" \
            in render.header(resp, 0)
        assert "39 below the cutoff" in claude_mem_render.how_answered(resp)
        out = structured.search_output(resp, 0)
        assert out.total == 1 and out.below_cutoff == 39 and out.next_offset is None

    def test_nothing_above_the_cutoff_says_how_to_list_the_rest(self) -> None:
        resp = response(total=0, below_cutoff=5, min_confidence=0.035)
        assert "No results above the cutoff: all=true lists the weaker ones." in render.search_markdown(resp, 0, False)

    def test_no_cutoff_no_words_about_it(self) -> None:
        resp = response(result(), total=1)
        assert "cutoff" not in render.response_text(resp) and "cutoff" not in render.header(resp, 0)

    def test_a_row_without_a_confidence_shows_its_cosine_or_a_dash(self) -> None:
        assert render.score_text(result(score=None, similarity=0.61)) == "cos 0.61"
        assert render.score_text(result(score=None)) == "-"
        assert render.result_line(result(score=None)).startswith("    - both")
        assert render.table([result(score=0.42, similarity=0.61)])[2].split(" | ")[3] == "0.42 (cos 0.61)"

    def test_explain_shows_the_raw_signals(self) -> None:
        r = result(score=0.42, similarity=0.61, fused=0.0312, explain={"lexical_rank": 2, "semantic_rank": 1})
        text = render.response_text(response(r), explain=True).splitlines()
        assert text[1].startswith("0.420 both")
        assert text[2].split() == ["found_by=both", "fused=0.0312", "similarity=0.61", "lexical_rank=2",
                                   "semantic_rank=1"]
        assert r.to_json()["signals"] == {"found_by": "both", "fused": 0.0312, "similarity": 0.61,
                                          "lexical_rank": 2, "semantic_rank": 1}
