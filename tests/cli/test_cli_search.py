"""`memsync search` / `memsync timeline` on the command line: the JSON contract, batches, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.config.limits import MAX_DEPTH
from memsync.config.settings import Settings
from memsync.main import main
from tests.search.test_search import build, o, p, s


@pytest.fixture(scope="module")
def opts(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tmp = tmp_path_factory.mktemp("cli")
    settings: Settings = build(tmp, [o("The retry budget for uploads was too small", 2),
                                     o("Dark mode colors fixed in the dashboard", 1, project="beta"),
                                     p("why do uploads fail after three retries", 2), s("Uploads session", 2)])
    return ["--db", str(settings.db), "--data-dir", str(settings.data_dir), "--chroma-mode", "embedded"]


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r.exit_code, r.stdout, r.stderr


def test_search_json_contract(opts: list[str]) -> None:
    code, out, _ = run("search", "upload retries", *opts, "--json", "--window-days", "0")
    data = json.loads(out)
    assert code == 0 and data["mode"] == "hybrid"
    assert {"mode", "results", "window", "excluded_by_window", "timings_ms", "reason", "cutoff"} <= set(data)
    first = data["results"][0]
    assert first["kind"] in ("observation", "summary", "prompt") and isinstance(first["id"], int)
    # score: the confidence, at or above the cutoff; the raw signals under signals, the fused value among them
    assert data["cutoff"]["min_confidence"] <= first["score"] <= 1
    assert first["signals"]["found_by"] in ("semantic", "lexical", "both") and first["signals"]["fused"] > 0
    assert "semantic_rank" in first["signals"] or "lexical_rank" in first["signals"]


def test_search_kind_and_project(opts: list[str]) -> None:
    code, out, _ = run("search", "uploads", *opts, "--json", "--kind", "prompts", "--window-days", "0")
    assert code == 0 and {r["kind"] for r in json.loads(out)["results"]} == {"prompt"}
    code, out, _ = run("search", "colors", *opts, "--json", "--project", "beta", "--window-days", "0")
    assert {r["project"] for r in json.loads(out)["results"]} == {"beta"}


def test_search_text_output(opts: list[str]) -> None:
    code, out, _ = run("search", "dark mode", *opts, "--window-days", "0")
    assert code == 0 and out.startswith("mode hybrid") and "#2" in out


def test_batch_one_response_per_line_in_order(opts: list[str], tmp_path: Path) -> None:
    lines = [{"query": "upload retries", "window_days": 0, "limit": 2},
             {"query": "dark mode", "project": "beta", "kind": "observations", "window_days": 0},
             "not json", {"query": "x", "kind": "bogus"}, {"query": ""}]
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    code, out, _ = run("search", *opts, "--batch", str(f))
    got = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(got) == 5
    assert len(got[0]["results"]) <= 2 and got[0]["mode"] == "hybrid"
    assert {r["project"] for r in got[1]["results"]} == {"beta"}
    assert "error" in got[2] and "unknown kind" in got[3]["error"]
    assert got[4]["mode"] == "lexical"


@pytest.mark.parametrize(("option", "value", "bounds"), [("--limit", "101", "1<=x<=100"),
                                                         ("--offset", "10001", "0<=x<=10000")])
def test_the_page_is_bounded_as_in_the_servers(opts: list[str], option: str, value: str, bounds: str) -> None:
    """One limit policy (limit 1-100, offset 0-10,000) for the CLI, its batches and the servers."""
    code, _, err = run("search", "x", *opts, option, value)
    assert code == 2 and option in err and bounds in err and "Traceback" not in err


def test_batch_lines_are_bounded_as_the_options(opts: list[str], tmp_path: Path) -> None:
    lines = [{"query": "uploads", "limit": 500}, {"query": "uploads", "offset": 10_001},
             {"query": "uploads", "window_days": 0, "limit": 100, "offset": 10_000}]
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    code, out, _ = run("search", *opts, "--batch", str(f))
    got = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and got[0] == {"error": "limit must be an integer from 1 to 100, got 500"}
    assert got[1] == {"error": "offset must be an integer from 0 to 10000, got 10001"}
    assert got[2]["results"] == [] and got[2]["total"] is not None


def test_batch_numbers_written_as_text_are_read_as_before(opts: list[str], tmp_path: Path) -> None:
    """A batch line's limit, offset and window_days go through int() as they always did: "5" and
    5.0 are 5; text that is no whole number is that line's error."""
    lines = [{"query": "uploads", "limit": "2", "window_days": "0"}, {"query": "uploads", "limit": 2.0},
             {"query": "uploads", "limit": "two"}, {"query": "uploads", "limit": 2}]
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    code, out, _ = run("search", *opts, "--batch", str(f))
    got = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(got) == 4
    keys = [[(r["kind"], r["id"]) for r in g.get("results", [])] for g in got]
    assert keys[0] == keys[1] == keys[3] and len(keys[3]) == 2 and got[0]["window"]["days"] == 0
    assert "error" in got[2] and "two" in got[2]["error"]


def test_bad_date_is_usage_error(opts: list[str]) -> None:
    code, _, err = run("search", "x", *opts, "--since", "yesterday")
    assert code == 2 and "--since" in err and "Traceback" not in err


def test_every_filter_option_is_a_default_of_the_batch_lines(opts: list[str], tmp_path: Path) -> None:
    f = tmp_path / "lines.jsonl"
    f.write_text('{"query": "uploads", "window_days": 0}\n{"query": "uploads", "window_days": 0, "kind": "prompts"}\n')
    code, out, _ = run("search", *opts, "--batch", str(f), "--file", "src/app.py")
    first, second = (json.loads(line) for line in out.splitlines())
    assert code == 0 and first["results"] and {r["kind"] for r in first["results"]} <= {"observation", "summary"}
    assert second["results"] == []  # prompts read or modify no files
    code, out, err = run("search", *opts, "--batch", str(f), "--since", "yesterday")
    assert code == 2 and out == "" and "--since" in err  # refused once, by its name, before any line


def test_timeline_cli(opts: list[str]) -> None:
    code, out, _ = run("timeline", "P1", *opts, "--json", "--before", "1", "--after", "1")
    data = json.loads(out)
    assert code == 0 and data["anchor"] == {"kind": "prompt", "id": 1}
    code, _, err = run("timeline", "S42", *opts)
    assert code == 2 and "no summary with id 42" in err


def test_timeline_takes_the_one_parsers_limits(opts: list[str]) -> None:
    """The depths' bound is config.limits.MAX_DEPTH, as in the servers, and an anchor given as words
    is held to max_query_chars, as a search query is; each refusal is a usage error (exit 2)."""
    code, out, _ = run("timeline", "P1", *opts, "--json", "--before", str(MAX_DEPTH), "--after", "0")
    assert code == 0 and json.loads(out)["anchor"] == {"kind": "prompt", "id": 1}
    code, _, err = run("timeline", "P1", *opts, "--before", str(MAX_DEPTH + 1))
    assert code == 2 and f"0<=x<={MAX_DEPTH}" in err
    code, _, err = run("timeline", "x" * 4001, *opts)
    assert code == 2 and "anchor is 4001 characters; the limit is 4000" in err


def test_search_explain_and_all(opts: list[str]) -> None:
    """--explain puts each result's raw signals under it; the default list leaves out what the
    cutoff does and says so; --all lists it."""
    code, out, _ = run("search", "upload retries", *opts, "--window-days", "0", "--explain")
    lines = out.splitlines()
    assert code == 0 and lines[2].lstrip().startswith("found_by=") and "fused=" in lines[2]
    assert "below the cutoff" in lines[0] and lines[0].endswith("--all to show")
    shown = sum(1 for line in lines[1:] if not line.startswith(" "))
    code, everything, _ = run("search", "upload retries", *opts, "--window-days", "0", "--all")
    assert code == 0 and "below the cutoff" not in everything
    assert len(everything.splitlines()) - 1 > shown
