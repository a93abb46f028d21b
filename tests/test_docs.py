"""The documentation stays true: generated pages match the code, the layout names every module,
links between the pages resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memsync.config.settings import Settings
from memsync.main import main as cli_main
from scripts import docs
from scripts.pkgmap import package_folders

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to dashes."""
    text = _FENCE.sub("", page.read_text())
    titles = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in titles}


class TestGeneratedPages:
    def test_committed_pages_match_the_code(self) -> None:
        """docs/cli.md and docs/settings.md are what scripts.docs renders from the code today."""
        stale = docs.drifted()
        assert not stale, f"{stale} differ from the code; regenerate with: {docs.REGENERATE}"

    def test_a_page_that_differs_is_reported(self, tmp_path: Path) -> None:
        """The check compares text: a page edited by hand, or missing, is reported as drifted."""
        for page, render in docs.PAGES.items():
            (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / page).write_text(render())
        assert docs.drifted(tmp_path) == []
        (tmp_path / "docs/settings.md").write_text(docs.render_settings().replace("`MEMSYNC_DB`", "`DB`"))
        (tmp_path / "docs/cli.md").unlink()
        assert sorted(docs.drifted(tmp_path)) == ["docs/cli.md", "docs/settings.md"]

    def test_check_mode_exits_1_and_names_the_fix(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
        monkeypatch.setattr(docs, "ROOT", tmp_path)
        assert docs.main(["--check"]) == 1
        assert f"run: {docs.REGENERATE}" in capsys.readouterr().err
        assert docs.main([]) == 0  # writes the pages
        assert docs.main(["--check"]) == 0
        assert (tmp_path / "docs/cli.md").read_text() == docs.render_cli()

    def test_cli_page_has_every_command(self) -> None:
        page = (ROOT / "docs/cli.md").read_text()
        for name, command in cli_main.commands.items():
            assert f"\n## memsync {name}\n" in page, name
            assert (command.short_help or command.help or "").split()[0] in page

    def test_settings_page_lists_every_setting(self) -> None:
        """The settings reference is the user's reference: a setting missing there is invisible."""
        page = (ROOT / "docs/settings.md").read_text()
        missing = [n for n in Settings.model_fields if f"| `{n}` | `MEMSYNC_{n.upper()}` |" not in page]
        assert not missing, f"docs/settings.md lacks: {missing}"

    def test_the_pages_do_not_depend_on_the_terminal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        wide = docs.render_cli()
        monkeypatch.setenv("COLUMNS", "40")
        assert docs.render_cli() == wide


def test_layout_names_every_module() -> None:
    """The layout in docs/development.md is the newcomer's map: a module missing there, or a name
    that is gone, is a lie."""
    text = (ROOT / "docs/development.md").read_text()
    layout = text.split("## Layout", 1)[1].split("```\ncli/", 1)[1].split("```", 1)[0]
    modules = {p.name for f in package_folders() for p in (ROOT / f).rglob("*.py") if p.name != "__init__.py"}
    missing = sorted(m for m in modules - {"__main__.py"} if m not in layout)
    assert not missing, f"docs/development.md layout lacks: {missing}"
    named = set(re.findall(r"\b([a-z_]+\.py)\b", layout))
    assert not named - modules, f"docs/development.md layout names modules that do not exist: {sorted(named - modules)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    """Every link to another page (and its #section) points at a file and a heading that exist."""
    broken = []
    for target in _LINK.findall(_FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.name})")
    assert not broken, f"{page.name}: {broken}"


def test_pages_keep_no_development_history() -> None:
    """The pages describe the program as it is; its history lives in git."""
    pattern = re.compile(r"\b(session \d+|sessions? \d+|issue[- ]?\d+|\(issue|issue #\d+)", re.I)
    found = [f"{p.name}: {m.group(0)}" for p in PAGES for m in pattern.finditer(p.read_text())]
    assert not found, found
