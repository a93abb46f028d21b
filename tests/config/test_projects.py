"""Excluded projects: upstream's glob semantics on project names, and where the patterns come from."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.config.claude_mem.projects import ProjectExclusion, claude_mem_patterns, exclusion


@pytest.mark.parametrize(("pattern", "name", "excluded"), [
    ("secret", "secret", True), ("secret", "secret-api", False), ("secret*", "secret-api", True),
    ("*-api", "secret-api", True), ("sec?et", "secret", True), ("sec?et", "secreet", False),
    ("**tmp**", "my-tmp-dir", True), ("a.b", "a.b", True), ("a.b", "axb", False),  # regex characters are literal
    ("~/work/secret-*", "secret-api", True), ("/home/me/work/secret-*", "other", False),  # through the last segment
    (r"C:\work\client-*", "client-x", True),  # backslashes are separators, as upstream normalises them
])
def test_patterns_match_project_names_as_upstream_globs(pattern: str, name: str, excluded: bool) -> None:
    assert ProjectExclusion.of((pattern,)).excluded(name) is excluded


def test_a_directory_pattern_is_ignored_not_applied_to_everything() -> None:
    ex = ProjectExclusion.of(("~/clients/**", "/tmp/*", "scratch"))
    assert ex.ignored == ("~/clients/**", "/tmp/*")
    assert not ex.excluded("anything") and ex.excluded("scratch")
    assert not ProjectExclusion.of(("~/clients/**",)).excluded("anything")


@pytest.mark.parametrize("patterns", [(), ("secret",), ("~/clients/**",)])
def test_claude_mems_own_project_is_excluded_with_or_without_patterns(patterns: tuple[str, ...]) -> None:
    ex = ProjectExclusion.of(patterns)
    assert ex.excluded("observer-sessions") and ex.excluded("old-name", "observer-sessions")
    assert ex.sql("observer-sessions", None) == 1
    # Its name exactly, not a look-alike; and not listed as a pattern (status shows the user's own).
    assert not ex.excluded("observer-sessions-2") and not ex.excluded("my-observer-sessions")
    assert "observer-sessions" not in ex.patterns


def test_a_row_is_excluded_by_its_project_or_the_one_it_was_merged_into() -> None:
    ex = ProjectExclusion.of(("secret",))
    assert ex.excluded("old-name", "secret") and ex.excluded("secret", None)
    assert not ex.excluded("old-name", "") and not ex.excluded(None, None)
    assert ex.sql("secret", None) == 1 and ex.sql("alpha", None) == 0


def test_claude_mems_setting_from_env_over_its_file_and_memsyncs_own_added(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude-mem").mkdir(parents=True)
    (home / ".claude-mem" / "settings.json").write_text('{"env": {"CLAUDE_MEM_EXCLUDED_PROJECTS": "a, b*"}}')
    env = {"HOME": str(home)}
    assert claude_mem_patterns(env) == ("a", "b*")
    assert claude_mem_patterns({**env, "CLAUDE_MEM_EXCLUDED_PROJECTS": "c"}) == ("c",)
    assert claude_mem_patterns({**env, "CLAUDE_MEM_EXCLUDED_PROJECTS": ""}) == ()  # set empty: none
    assert exclusion("mine,", env).patterns == ("mine", "a", "b*")
    # The settings file of the data directory claude-mem uses, not always ~/.claude-mem's.
    other = tmp_path / "cm"
    other.mkdir()
    (other / "settings.json").write_text('{"CLAUDE_MEM_EXCLUDED_PROJECTS": "z"}')
    assert claude_mem_patterns({**env, "CLAUDE_MEM_DATA_DIR": str(other)}) == ("z",)
    (other / "settings.json").write_text('{"CLAUDE_MEM_EXCLUDED_PROJECTS": "z, y"}')  # a new version is read
    assert claude_mem_patterns({**env, "CLAUDE_MEM_DATA_DIR": str(other)}) == ("z", "y")
