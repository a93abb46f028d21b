"""The docs' sample outputs have the shape memsync prints today: each sample block that shows a
command (README's ``$ .venv/bin/memsync search ...``) or names one in a ``<!-- sample: ... -->``
comment before it (docs/servers.md's MCP answer) is run against a small synced database, and its
lines are compared with the real output's after masking what depends on the data (numbers, dates,
record ids, titles, projects, types, which retriever found a row). What stays is the structure:
the header's parts, the columns, the score format (``0.83``, ``0.83 (cos 0.61)``), the ref formats.

When an output format changes on purpose, the sample is updated by running the command and
pasting; a failure prints both shapes side by side."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memsync.config.settings import Settings
from memsync.main import main
from tests.search.test_search import build, o, p, s

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DOCS = ("README.md", "docs/servers.md", "docs/cli.md")
MARKER = re.compile(r"^<!-- sample: (\w+) (\w+) (\{.*\}) -->$")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.M | re.S)

# Data-dependent pieces, masked in this order (dates before numbers; ids before numbers).
MASKS = [(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d"), "DATE"), (re.compile(r"#[SP]?\d+"), "REF"),
         (re.compile(r"\b(both|semantic|lexical)\b"), "FOUND"), (re.compile(r"\d+(\.\d+)?"), "N")]
TEXT_RESULT = re.compile(r"\[[^\]]*\] [\w ]+: .*$")  # `[project] type: title` of a text result line
Sample = tuple[str, int, str, str, dict[str, Any], list[str]]  # doc, line, front end, command, arguments, lines


def shape(line: str) -> str:
    """A line with what depends on the data masked, and column padding collapsed."""
    if line.startswith("| ") and not line.startswith("| id |"):  # a table row: type and title are data
        cells = line.strip("|").split(" | ")
        cells[1], cells[-1] = "TYPE", "TEXT"
        line = "| " + " | ".join(c.strip() for c in cells) + " |"
    else:
        line = TEXT_RESULT.sub("[PROJECT] TYPE: TEXT", line)
    for pattern, mask in MASKS:
        line = pattern.sub(mask, line)
    return re.sub(r"\s+", " ", line).strip()


def shapes(text: str) -> list[str]:
    """The text's line shapes, a header's `` · ``-separated parts each on its own, runs of
    identical shapes (result rows) as one."""
    out: list[str] = []
    for line in text.splitlines():
        for part in shape(line).split(" · ") if " · " in line else [shape(line)]:
            if not out or out[-1] != part:
                out.append(part)
    return out


def samples() -> list[Sample]:
    """(doc, line, front end, command, arguments, sample lines) of each runnable sample."""
    found: list[Sample] = []
    for doc in SAMPLE_DOCS:
        text = (ROOT / doc).read_text("utf-8")
        for block in FENCE.finditer(text):
            lines = block.group(1).splitlines()
            before = text[:block.start()].rstrip("\n").splitlines()
            at = text[:block.start()].count("\n") + 1
            marker = MARKER.match(before[-1]) if before else None
            if marker is not None:
                found.append((doc, at, marker.group(1), marker.group(2), json.loads(marker.group(3)), lines))
            elif lines and re.match(r"\$ (\.venv/bin/)?memsync search ", lines[0]):
                found.append((doc, at, "cli", lines[0], {}, lines[1:]))
    return found


def corpus() -> list[dict[str, Any]]:
    """Dark mode and upload memories, recent and old (outside the 90-day window), every kind, and
    unrelated rows the confidence cutoff leaves out."""
    return [
        o("Add dark mode toggle to the dashboard settings page", 10, project="web", type="feature"),
        o("Harden dark mode toggle: the choice is stored in localStorage", 4, project="web"),
        p("the dark mode toggle forgets the choice after a reload", 4, project="web"),
        s("Dark mode session: toggle state persisted", 4, project="web"),
        o("Dark mode toggle first sketched in the old theme engine", 200, project="web"),
        o("Dark mode colours reviewed for the toggle", 210, project="web"),
        o("Upload retries duplicated rows in the ledger table", 2, type="bugfix"),
        o("The retry budget for flaky uploads was too small, raised to five", 3, type="bugfix"),
        p("why do uploads fail after three retries", 2),
        *(o(f"Database connection pool timeout number {i} in the billing service", 5 + i) for i in range(12)),
    ]


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A small database synced into embedded Chroma, with the shipped cutoff (not build's 0)."""
    return build(tmp_path_factory.mktemp("samples"), corpus(),
                 min_confidence=Settings.model_fields["min_confidence"].default)


def run_cli(settings: Settings, command: str) -> str:
    args = shlex.split(command[2:])[1:]  # after `$ ` and the executable
    result = CliRunner().invoke(main, [*args, "--db", str(settings.db), "--data-dir", str(settings.data_dir),
                                       "--chroma-mode", "embedded"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def run_mcp(settings: Settings, tool: str, arguments: dict[str, Any]) -> str:
    from mcp import Client

    from memsync.search import Searcher
    from memsync.servers.mcp_tools import build_server

    searcher = Searcher(settings)

    async def call() -> str:
        async with Client(build_server(settings, searcher)) as client:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error
            return "\n".join(getattr(c, "text", "") for c in result.content)

    try:
        return asyncio.run(call())
    finally:
        searcher.close()


def test_the_docs_have_runnable_samples() -> None:
    """The samples this file checks are there (a renamed block or marker would skip them silently)."""
    assert {(doc, front) for doc, _, front, *_ in samples()} >= {("README.md", "cli"), ("docs/servers.md", "mcp")}


@pytest.mark.parametrize("sample", samples(), ids=lambda sm: f"{sm[0]}:{sm[1]}")
def test_a_sample_has_the_shape_of_the_real_output(synced: Settings, sample: Sample) -> None:
    doc, line, front, command, arguments, lines = sample
    real = run_cli(synced, command) if front == "cli" else run_mcp(synced, command, arguments)
    # A header's notes about what was left out depend on the data (this database has no old rows,
    # the sample's memory has): each must have the renderer's wording, but either may be absent.
    optional = [s for s in shapes("\n".join(lines)) if s.startswith(OPTIONAL_NOTES)]
    assert all(s in KNOWN_NOTES for s in optional), optional
    assert without(shapes("\n".join(lines))) == without(shapes(real)), f"{doc}:{line} sample vs real output:\n{real}"


OPTIONAL_NOTES = ("N older matches outside the window", "N below the cutoff")
KNOWN_NOTES = {"N older matches outside the window (--window-days N shows them)",
               "N below the cutoff; --all to show",
               "N older matches outside the window (window_days=N includes them)",
               "N below the cutoff; all=true to show"}


def without(parts: list[str]) -> list[str]:
    """Line shapes without the header's data-dependent notes."""
    return [p for p in parts if not p.startswith(OPTIONAL_NOTES)]


class TestShape:
    """What the masking keeps and what it hides."""

    def test_values_are_masked_and_structure_kept(self) -> None:
        assert shape("| #142 | bugfix | 2026-11-19 07:33 | 0.83 (cos 0.61) | both | Fix it |") == \
            "| REF | TYPE | DATE | N (cos N) | FOUND | TEXT |"
        assert shape("0.440 both     #P31     2026-09-26 05:21  [web] prompt: I want it") == \
            "N FOUND REF DATE [PROJECT] TYPE: TEXT"
        assert shapes("mode: hybrid · results 1-2 of 14\n\n| #1 | a | ? | 0.1 | both | x |\n"
                      "| #S2 | b | ? | 0.2 | lexical | y |") == \
            ["mode: hybrid", "results N-N of N", "", "| REF | TYPE | ? | N | FOUND | TEXT |"]

    def test_a_missing_column_or_header_part_shows(self) -> None:
        assert shape("| #1 | a | ? | 0.1 | x |") != shape("| #1 | a | ? | 0.1 (cos 0.2) | both | x |")
        assert shapes("mode: hybrid · window: last 90 days") != shapes("mode: hybrid")


# -- statements about the commands, checked against the commands -----------------------------------
COMMON = {"--db", "--data-dir", "--chroma-mode", "--config"}


def leaf_commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every command under ``group`` by its name after ``memsync`` (``db init``)."""
    import click

    out: dict[str, Any] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out.update(leaf_commands(command, f"{prefix}{name} "))
        else:
            out[f"{prefix}{name}"] = command
    return out


def test_the_common_options_sentence_names_every_exception() -> None:
    """docs/operations.md says which commands do not take all four common options; exactly those."""
    text = re.sub(r"\s+", " ", (ROOT / "docs/operations.md").read_text("utf-8"))
    found = re.search(r"Every command accepts `--db`, `--data-dir`, `--chroma-mode` and `--config` except "
                      r"these: (.*?) \(", text)
    assert found is not None, "docs/operations.md lost its sentence on the common options"
    named = set(re.findall(r"`([^`]+)`", found.group(1)))
    lacking = {name for name, command in leaf_commands(main).items()
               if not {opt for param in command.params for opt in param.opts} >= COMMON}
    assert named == lacking


def registration(text: str) -> str:
    """The command a text tells ``claude mcp add memsync`` to register (whitespace as one space)."""
    found = re.search(r"claude mcp add memsync -- (\S+) mcp\b", re.sub(r"\s+", " ", text))
    assert found is not None, text
    return found.group(1)


def test_mcp_help_registers_the_command_as_the_readme_does() -> None:
    """``memsync mcp --help`` and the README register the same executable: by its absolute path in
    memsync's virtualenv (Claude Code does not start it there)."""
    result = CliRunner().invoke(main, ["mcp", "--help"])
    assert result.exit_code == 0
    assert registration(result.stdout) == registration((ROOT / "README.md").read_text("utf-8")) == \
        "/path/to/memsync/.venv/bin/memsync"


def test_the_help_never_registers_a_bare_memsync() -> None:
    """Wherever the help names the executable Claude Code is given (``mcp``, ``claude-code``), it is
    the memsync in the virtual environment (``…/memsync`` with the example path), never a bare
    ``memsync`` that Claude Code would look up on its own PATH."""
    for args in (["mcp", "--help"], ["claude-code", "--help"]):
        text = re.sub(r"\s+", " ", CliRunner().invoke(main, args).stdout)
        assert "/path/to/memsync/.venv/bin/memsync" in text, args
        named = re.findall(r"(\S*)memsync (?:mcp|claude-code inject)\b", text)
        assert named and all(p.endswith(("…/", "/path/to/memsync/.venv/bin/")) for p in named), (args, named)


# -- docs/search.md's `--json` contract, against a real answer -------------------------------------
def contract() -> dict[str, Any]:
    """The JSON block under docs/search.md's "The `--json` contract" heading, parsed."""
    text = (ROOT / "docs/search.md").read_text("utf-8")
    section = text[text.index("## The `--json` contract"):]
    found = FENCE.search(section)
    assert found is not None, "docs/search.md lost its --json contract block"
    return dict(json.loads(found.group(1)))


def test_the_json_contract_has_the_keys_search_prints(synced: Settings) -> None:
    """Every key of the documented answer, at each level (the answer, ``window``, ``cutoff``, an
    observation row, its ``signals``), is in a real ``search --json`` answer and the other way
    round; ``signals`` may lack the ranks of lists that did not hold the row."""
    doc = contract()
    real = json.loads(run_cli(synced, "$ memsync search 'dark mode toggle' --json"))
    assert set(doc) == set(real)
    for key in ("window", "cutoff"):
        assert set(doc[key]) == set(real[key]), key
    row = next(r for r in real["results"] if r["kind"] == "observation" and r["signals"]["found_by"] == "both")
    assert set(doc["results"][0]) == set(row)
    ranks = {"lexical_rank", "semantic_rank", "context_rank", "linked_semantic_rank", "linked_lexical_rank"}
    assert set(doc["results"][0]["signals"]) - ranks == set(row["signals"]) - ranks
