"""claude-mem 13.25.3's project for a hook's directory, and its private prompts, as memsync ports them.

These run real ``git`` in temporary directories: a repository, a subfolder of it, a worktree, a
folder outside git, and each override. The parity tests run claude-mem's own functions, cut from its
released bundle (``tests/upstream/project_rule.js``, under the pinned bun), on the same directories
and prompts, and compare the results with the port.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config.claude_mem.project_name import (
    MAX_PROMPT_BYTES,
    UNKNOWN_PROJECT,
    ProjectContext,
    hook_directory,
    is_internal_protocol_payload,
    is_private_prompt,
    is_tracked_directory,
    project_context_for_cwd,
    project_for_cwd,
    prompt_without_blocks,
    stored_prompt_text,
)
from scripts.real_claude_mem import BUN, WORKER_SCRIPT

RULE_JS = Path(__file__).parents[1] / "upstream" / "project_rule.js"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main",
                    *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """home/code/alpha (a repository with src/deep), home/code/alpha-feature (its worktree),
    home/code/loose (no git), home/code/stale (a .git file of a pruned worktree), home/link -> alpha."""
    root = tmp_path_factory.mktemp("projects")
    code = root / "home" / "code"
    (code / "alpha" / "src" / "deep").mkdir(parents=True)
    _git(code / "alpha", "init", "-q")
    _git(code / "alpha", "commit", "-q", "--allow-empty", "-m", "init")
    _git(code / "alpha", "worktree", "add", "-q", "-b", "feature", str(code / "alpha-feature"))
    (code / "alpha-feature" / "src").mkdir()
    (code / "loose" / "sub").mkdir(parents=True)
    (code / "stale").mkdir()
    (code / "stale" / ".git").write_text(f"gitdir: {root}/gone/repo/.git/worktrees/stale\n")
    (root / "home" / "link").symlink_to(code / "alpha")
    return root


@pytest.fixture(autouse=True)
def _git_stops_at_tree(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """git looks no higher than the temporary tree, whatever holds it (both sides inherit this)."""
    if "tree" in request.fixturenames:
        monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(request.getfixturevalue("tree")))


def _env(tree: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(tree / "home"), **extra}


# (cwd relative to the tree or as given, CLAUDE_PROJECT_DIR relative to the tree or None, expected primary)
CASES: list[tuple[str, str | None, str]] = [
    ("home/code/alpha", None, "alpha"),                                    # plain repository
    ("home/code/alpha/src/deep", None, "alpha"),                           # subfolder: the git top level
    ("home/code/alpha-feature", None, "alpha/alpha-feature"),              # worktree: parent/worktree
    ("home/code/alpha-feature/src", None, "alpha/alpha-feature"),          # a worktree's subfolder
    ("home/code/loose/sub", None, "sub"),                                  # outside git: the folder itself
    ("home/code/loose/", None, "loose"),                                   # a trailing slash is ignored
    ("home/code/loose/..", None, ".."),                                    # outside git, not resolved
    ("home/link", None, "alpha"),                                          # git resolves the symlink
    ("home/code/stale", None, "repo/stale"),                               # a pruned worktree's .git file
    ("home/code/missing", None, "missing"),                                # no such folder
    ("~/code/alpha/src", None, "alpha"),                                   # ~ is the hook's HOME
    ("~", None, "home"),
    ("home/code/loose", "home/code/alpha", "alpha"),                       # CLAUDE_PROJECT_DIR wins over cwd
    ("home/code/alpha", " home/code/loose/sub ", "sub"),                   # trimmed
    ("home/code/loose", "   ", "loose"),                                   # blank: cwd
    ("home/code/alpha", "~/code/alpha-feature", "alpha/alpha-feature"),    # ~ in the override too
    ("/", None, UNKNOWN_PROJECT),                                          # no base name
]


def _absolute(tree: Path, value: str) -> str:
    stripped = value.strip()
    if not stripped or stripped.startswith(("~", "/")):
        return value
    return value.replace(stripped, str(tree / stripped))


def _case_env(tree: Path, override: str | None) -> dict[str, str]:
    return _env(tree) if override is None else _env(tree, CLAUDE_PROJECT_DIR=_absolute(tree, override))


class TestProjectForCwd:
    @pytest.mark.parametrize(("cwd", "override", "expected"), CASES)
    def test_project_is_upstreams_rule(self, tree: Path, cwd: str, override: str | None, expected: str) -> None:
        assert project_for_cwd(_absolute(tree, cwd), _case_env(tree, override)) == expected

    def test_a_worktree_reads_its_parent_and_itself(self, tree: Path) -> None:
        """claude-mem records a worktree's rows as parent/worktree; its SessionStart context reads both."""
        ctx = project_context_for_cwd(tree / "home/code/alpha-feature/src", _env(tree))
        assert ctx == ProjectContext("alpha/alpha-feature", "alpha", True, ("alpha", "alpha/alpha-feature"))
        assert project_context_for_cwd(tree / "home/code/alpha", _env(tree)).all_projects == ("alpha",)

    def test_the_processs_own_environment_is_the_default(self, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(tree / "home/code/alpha"))
        assert project_for_cwd(tree / "home/code/loose") == "alpha"
        assert project_for_cwd(tree / "home/code/loose", {}) == "loose"

    def test_an_empty_directory_is_unknown_and_the_adapter_would_reject_it(self, tree: Path) -> None:
        assert hook_directory("", {}) == "" and hook_directory("  ", {}) == ""
        assert project_for_cwd("", {}) == UNKNOWN_PROJECT
        assert project_for_cwd("", {"CLAUDE_PROJECT_DIR": str(tree / "home/code/alpha")}) == "alpha"

    def test_git_missing_counts_as_outside_git(self, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("PATH", str(tree / "no-bin"))
        assert project_for_cwd(tree / "home/code/alpha/src/deep", _env(tree)) == "deep"

    def test_one_call_takes_milliseconds(self, tree: Path) -> None:
        """One git subprocess per call (upstream runs two): well under the hook's budget."""
        started = time.perf_counter()
        for _ in range(10):
            project_for_cwd(tree / "home/code/alpha-feature/src", _env(tree))
        assert (time.perf_counter() - started) / 10 < 0.05


class TestTrackedDirectory:
    """claude-mem's hook records nothing, and injects nothing, for a directory it does not track."""

    def _env(self, tree: Path, **extra: str) -> dict[str, str]:
        return _env(tree, CLAUDE_MEM_DATA_DIR=str(tree / "home/.claude-mem"), **extra)

    @pytest.mark.parametrize(("patterns", "cwd", "tracked"), [
        ("", "home/code/alpha", True),
        ("~/code/alpha*", "home/code/alpha", False),                 # the path, ~ expanded
        ("~/code/alpha*", "home/code/alpha-feature", False),
        ("~/code/alpha*", "home/code/alpha/src", True),              # * stays within a segment
        ("~/code/**", "home/code/alpha/src/deep", False),            # ** crosses them
        ("loose", "home/code/loose", False),                         # the base name
        ("loose", "home/code/loose/sub", True),
        (" nothing , sub ", "home/code/loose/sub", False),           # a list, trimmed
        ("lo?se", "home/code/loose", False),
    ])
    def test_excluded_projects_match_the_path_or_its_base_name(self, tree: Path, patterns: str, cwd: str,
                                                               tracked: bool) -> None:
        env = self._env(tree, CLAUDE_MEM_EXCLUDED_PROJECTS=patterns)
        assert is_tracked_directory(str(tree / cwd), env) is tracked

    def test_the_setting_comes_from_claude_mems_settings_file_unless_the_environment_has_it(self, tree: Path) -> None:
        data = tree / "home/.claude-mem"
        data.mkdir(parents=True, exist_ok=True)
        (data / "settings.json").write_text(json.dumps({"CLAUDE_MEM_EXCLUDED_PROJECTS": "alpha"}))
        try:
            assert not is_tracked_directory(tree / "home/code/alpha", self._env(tree))
            assert is_tracked_directory(tree / "home/code/alpha", self._env(tree, CLAUDE_MEM_EXCLUDED_PROJECTS=""))
        finally:
            (data / "settings.json").unlink()

    def test_claude_mems_own_folders_and_sessions_are_not_tracked(self, tree: Path) -> None:
        home = tree / "home"
        assert not is_tracked_directory(home / ".claude-mem/observer-sessions/x", self._env(tree))
        assert not is_tracked_directory(home / ".claude/plugins/cache/thedotmack/claude-mem/13.25.3", self._env(tree))
        assert not is_tracked_directory(tree / "cc/plugins/marketplaces/thedotmack/plugin",
                                        self._env(tree, CLAUDE_CONFIG_DIR=str(tree / "cc")))
        assert not is_tracked_directory(home / "code/alpha", self._env(tree, CLAUDE_MEM_INTERNAL="1"))
        assert is_tracked_directory(home / ".claude-mem/observer-sessions-not", self._env(tree))

    def test_claude_project_dir_is_the_directory_checked(self, tree: Path) -> None:
        env = self._env(tree, CLAUDE_MEM_EXCLUDED_PROJECTS="alpha", CLAUDE_PROJECT_DIR=str(tree / "home/code/alpha"))
        assert not is_tracked_directory(tree / "home/code/loose", env)


PROMPTS: list[tuple[str | None, str, bool]] = [
    # (prompt, the text claude-mem saves, private)
    ("<private>my token is hunter2</private>", "", True),
    ("  <private>a</private>\n<private reason='x'>b</private>  ", "", True),
    ("<private>a</private><system-reminder>b</system-reminder>", "", True),
    ("<claude-mem-context>old memory</claude-mem-context>", "", True),
    ("deploy it <private>with key hunter2</private> now", "deploy it  now", False),
    ("<private>unclosed", "<private>unclosed", False),
    ("<PRIVATE>caps</PRIVATE>", "<PRIVATE>caps</PRIVATE>", False),
    ("<privateer>x</privateer>", "<privateer>x</privateer>", False),
    ("<private-notes>x</private>", "", True),
    ("<privateé>x</private>", "", True),
    ("<private><private>a</private>b</private>", "b</private>", False),
    ("<priv<private>x</private>ate>y</private>", "<private>y</private>", False),  # storage strips twice, keeps this
    ("", "[media prompt]", False),
    ("   ", "[media prompt]", False),
    (None, "[media prompt]", False),
    ("\ufeff", "[media prompt]", False),
    ("\x1c", "\x1c", False),  # JavaScript's trim keeps it; Python's strip would not
]


class TestPrivatePrompt:
    @pytest.mark.parametrize(("prompt", "saved", "private"), PROMPTS)
    def test_private_is_nothing_left_once_blocks_are_removed(self, prompt: str | None, saved: str,
                                                             private: bool) -> None:
        assert stored_prompt_text(prompt) == saved
        assert is_private_prompt(prompt) is private

    def test_a_prompt_is_cut_to_256_kib_before_its_blocks_are_removed(self) -> None:
        """A closing tag past the cut leaves the block unclosed: upstream saves it, private text and all
        (its first 4,000 characters, as every saved prompt)."""
        long_private = "<private>" + "a" * MAX_PROMPT_BYTES + "</private>"
        assert not is_private_prompt(long_private)
        assert stored_prompt_text(long_private) == long_private[:3999] + "\u2026"
        assert prompt_without_blocks(long_private) == long_private[:MAX_PROMPT_BYTES]  # not capped
        assert stored_prompt_text("a" * 3999 + "é") == "a" * 3999 + "é"
        assert stored_prompt_text("😀" * 2001) == "😀" * 1999 + "\ud83d\u2026"  # UTF-16 units, as JavaScript cuts

    @pytest.mark.parametrize(("prompt", "protocol"), [
        ("<task-notification>done</task-notification>", True),
        ("\n <task-notification id='1'>done</task-notification>\n", True),
        ("see <task-notification>done</task-notification>", False),
        ("<task-notification>a</task-notification><task-notification>b</task-notification>", False),
        ("", False),
    ])
    def test_an_internal_protocol_payload_is_one_task_notification(self, prompt: str, protocol: bool) -> None:
        assert is_internal_protocol_payload(prompt) is protocol


@pytest.fixture
def upstream_rule() -> Iterator[None]:
    if not (BUN.exists() and WORKER_SCRIPT.exists()):
        pytest.fail(f"claude-mem's bundle or bun is missing ({WORKER_SCRIPT}, {BUN}): run make")
    yield


def _run_upstream(cases: dict[str, object], home: Path) -> dict[str, list[dict[str, object]]]:
    """The bundle's functions on ``cases``. HOME is set for the process: bun reads it once, at start."""
    done = subprocess.run([str(BUN), str(RULE_JS), str(WORKER_SCRIPT)], input=json.dumps(cases).encode(),
                          env={**os.environ, "HOME": str(home)}, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result: dict[str, list[dict[str, object]]] = json.loads(done.stdout)
    return result


@pytest.mark.slow
@pytest.mark.usefixtures("upstream_rule")
def test_the_port_matches_claude_mems_own_functions(tree: Path) -> None:
    """Every directory case and every prompt above, through claude-mem 13.25.3's bundled code."""
    projects = [{"cwd": _absolute(tree, cwd), "env": {"CLAUDE_PROJECT_DIR": None if override is None
                                                      else _absolute(tree, override)}}
                for cwd, override, _ in CASES]
    prompts = [p for p, _, _ in PROMPTS] + ["<private>" + "a" * MAX_PROMPT_BYTES + "</private>",
                                             "<private>" + "é" * MAX_PROMPT_BYTES + "</private>", "😀" * 2001,
                                             "<task-notification>x</task-notification>"]
    upstream = _run_upstream({"projects": projects, "prompts": prompts}, tree / "home")
    ours = [project_context_for_cwd(cwd, _case_env(tree, override)) for cwd, override in
            ((_absolute(tree, c), o) for c, o, _ in CASES)]
    assert [(c.primary, c.parent, c.is_worktree, list(c.all_projects)) for c in ours] == [
        (u["primary"], u["parent"], u["isWorktree"], u["allProjects"]) for u in upstream["projects"]]
    ported = [(prompt_without_blocks(p), is_private_prompt(p), stored_prompt_text(p), is_internal_protocol_payload(p))
              for p in prompts]
    assert ported == [(u["stripped"], u["private"], u["stored"], u["protocol"]) for u in upstream["prompts"]]
