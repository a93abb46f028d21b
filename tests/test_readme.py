"""The README's front door shows output as memsync prints it today: the worker's ready line, a
search, an injected memory. The shapes here are the code's own (its renderers and the hook's
frame); the fresh-HOME run (tests/system/test_fresh_home.py) checks real output against them."""

from __future__ import annotations

import re
from pathlib import Path

from memsync.servers.inject_service import FOOTER, HEADER

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FRONT_DOOR_LINES = 40
MAX_LINES = 170

READY = re.compile(r"^memsync: search is ready: [\d,]+ documents searchable, .+\. "
                   r"Try: (\S+) search (.+) \(and \1 status\)$")
SEARCH_HEAD = re.compile(r"^mode (hybrid|lexical|semantic|lexical_fallback)( \(.*\))? · (last \d+ days|all time)"
                         r"( · \d+ older matches outside the window \(--window-days 0 shows them\))?"
                         r"( · \d+ below the cutoff; --all to show)?$")
RESULT = re.compile(r"^ *(\d\.\d{3}|cos \d\.\d\d|-) (both|semantic|lexical) +#[SP]?\d+ +"
                    r"(\d{4}-\d\d-\d\d \d\d:\d\d|\?)  \[[^\]]*\] [\w ]+: .+$")
MEMORY = re.compile(r"^- #[SP]?\d+ \d{4}-\d\d-\d\d \S+: .+$")


def blocks(text: str) -> list[list[str]]:
    """The fenced blocks of a markdown text, as lists of lines."""
    return [b.splitlines() for b in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)]


def front_door() -> list[list[str]]:
    """The fenced blocks within the README's first lines: the two commands and the samples."""
    head = "\n".join(README.read_text("utf-8").splitlines()[:FRONT_DOOR_LINES]) + "\n"
    return blocks(head)


def sample(prefix: str) -> list[str]:
    """The front door's sample block whose first line starts with ``prefix``."""
    found = [b for b in front_door() if b and b[0].startswith(prefix)]
    assert found, f"no sample starting with {prefix!r} in the README's first {FRONT_DOOR_LINES} lines"
    return found[0]


def search_command() -> list[str]:
    """The sample search's command line, as arguments after the executable."""
    import shlex

    return shlex.split(sample("$ .venv/bin/memsync search")[0][2:])


def test_the_front_door_holds_the_sentence_the_two_commands_and_the_samples() -> None:
    text = README.read_text("utf-8")
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES
    assert lines[0] == "# memsync" and "claude-mem" in lines[2]
    commands = front_door()[0]
    assert [c.split()[:2] for c in commands] == [["make", "run"], ["make", "test"]]
    assert "```\n<memsync-memory>" in "\n".join(lines[:FRONT_DOOR_LINES])


def test_the_ready_line_is_the_workers() -> None:
    run = sample("$ make run")
    assert len(run) == 2 and READY.match(run[1]), run


def test_the_sample_search_is_in_the_current_format() -> None:
    search = sample("$ .venv/bin/memsync search")
    assert SEARCH_HEAD.match(search[1]), search[1]
    assert len(search) >= 4 and all(RESULT.match(line) for line in search[2:]), search[2:]


def test_the_sample_injection_is_the_hooks_frame() -> None:
    block = sample("<memsync-memory>")
    assert "\n".join(block[:2]) + "\n" == HEADER and block[-1] == FOOTER
    memories = block[2:-1]
    assert memories and MEMORY.match(memories[0])
    # Every line is a memory, but for one line saying how many more the sample leaves out.
    assert sum(1 for m in memories if not MEMORY.match(m)) <= 1
