"""Prose that points somewhere: no comment, docstring or string in the code cites a numbered issue,
design note, design decision, style rule or defect of a list, which no reader of the repository can
open. Say the reason itself; an upstream claude-mem issue is written as
``thedotmack/claude-mem#2979``, which a reader can follow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.pkgmap import source_folders

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = source_folders()  # the package's folders (cli, config, worker, search, servers), scripts, tests

# The word, then a number (a "#" before it, or spaces, allowed): in any case, as the samples below show.
CITATION = re.compile(r"\b(?:issues?\s*#?\s*\d+|design\s+(?:notes?|decisions?)\s*#?\s*\d+|style\s+\d+|defect\s+\d+)",
                      re.IGNORECASE)

# Built from parts so that this file does not cite what it tests.
ISSUE, NOTE, DECISION, STYLE, DEFECT = "issue", "design note", "design decision", "style", "defect"


def citations(text: str) -> list[tuple[int, str]]:
    """Each line of ``text`` that cites a numbered issue or design note: (line number, the citation)."""
    return [(number, m.group(0)) for number, line in enumerate(text.splitlines(), 1)
            for m in CITATION.finditer(line)]


@pytest.mark.parametrize("sample", [
    f"# the reason ({ISSUE} 24)", f'"""{ISSUE.title()} 28: one table."""', f"see {ISSUE} #17", f"{ISSUE.upper()}#5",
    f"({NOTE} 6: pick by cost)", f"{NOTE.title()} 4", f"{ISSUE}s 16 and 24", f"({DECISION}s 2 and 3)",
    f"hints ({STYLE} 4)", f"(upstream {DEFECT} 8)",
])
def test_the_matcher_finds_a_citation(sample: str) -> None:
    assert citations(f"x = 1\n{sample}\n") == [(2, CITATION.search(sample).group(0))]  # type: ignore[union-attr]


@pytest.mark.parametrize("sample", [
    "thedotmack/claude-mem#2979", "an issue with the index", f"t{ISSUE} 4", "the issues are listed",
    "design notes", "issue_24 = 1", "the style of the page", "a design decision",
])
def test_the_matcher_leaves_other_text(sample: str) -> None:
    assert citations(sample) == []


def test_no_code_cites_an_unreadable_issue_or_design_note() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {cited}"
             for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
             for number, cited in citations(path.read_text(encoding="utf-8"))]
    assert found == [], "say the reason, not a number no reader can open:\n" + "\n".join(found)


GLOSSARY = ROOT / "docs/glossary.md"


def test_the_glossary_names_modules_that_exist() -> None:
    """Each word of docs/glossary.md says where it lives in the code: a module that moved or went is
    a wrong address (the glossary names them as imported: ``memsync.worker.pipeline.sync``)."""
    import importlib.util

    named = set(re.findall(r"`(memsync(?:\.\w+)+)`", GLOSSARY.read_text(encoding="utf-8")))
    assert len(named) > 30, named
    gone = sorted(m for m in named if importlib.util.find_spec(m) is None)
    assert gone == [], f"docs/glossary.md names modules that do not exist: {gone}"
