"""The swap of claude-mem's search server for memsync's in Claude Code: the settings edit on its own
(every other key kept, nothing written on a bad file), and ``memsync claude-code swap`` /
``restore`` end to end with the real ``claude`` CLI (installed by ``make test``) on a temporary
HOME where claude-mem's published plugin is installed from a local marketplace, its hooks running
beside memsync's and a real ``memsync worker`` answering memsync's."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memsync.config.claude_code.hook import (
    COMPACT_AT,
    HOOK_AT,
    HOOK_TIMEOUT_S,
    SEMANTIC_INJECT_KEY,
    InjectTarget,
    claude_mem_injection,
    compact_entry,
    hook_entry,
    hook_installed,
    hook_supported,
    inject_command,
    parse_inject_command,
)
from memsync.config.claude_code.registrations import (
    CLAUDE_MEM_SERVER,
    DENY_RULES,
    SEARCH_TOOLS,
    Registration,
    allow_claude_mem_search,
    apply_change,
    deny_claude_mem_search,
    plan_restore,
    plan_swap,
    registrations,
    settings_path,
    winning_scope,
)
from memsync.config.claude_code.settings_file import (
    RECORD_KEY,
    ClaudeSettingsError,
    RecordedEdit,
    read_settings,
    record_misread_by_claude_code,
    settings_text,
    write_settings,
)
from memsync.config.formats.inject_stats import served
from memsync.config.formats.worker_status import WorkerStatus
from memsync.config.inject_channel import Reply, socket_path
from memsync.config.settings import Settings
from memsync.main import main
from memsync.servers.inject_listener import start_listener
from memsync.servers.inject_service import TAG
from scripts.real_claude_mem import BUN, CLAUDE_CODE, NO_TELEMETRY, WORKER_SCRIPT
from tests.conftest import free_port, kill_managed_server, make_db, mixed_records, obs
from tests.system.test_worker import WorkerProcess, wait_for
from tests.upstream.model_api import ModelApi, model_api
from tests.upstream.written import written_db

MEMSYNC = str(Path(sys.executable).parent / "memsync")
# claude-mem 13.25.3's MCP tools (tests/servers/test_claude_mem_profile.py checks its server lists 15)
CLAUDE_MEM_TOOLS = ("build_corpus", "get_observations", "get_tool_uses", "important_workflow", "list_corpora",
                    "prime_corpus", "query_corpus", "rebuild_corpus", "reprime_corpus", "search",
                    "session_start_context", "smart_outline", "smart_search", "smart_unfold", "timeline")


# -- the settings edit ---------------------------------------------------------------------------
SEARCH_RULE, TIMELINE_RULE, GET_RULE = DENY_RULES


def test_deny_and_allow_keep_every_other_key(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    theirs = {"enabledPlugins": {"claude-mem@thedotmack": True}, "deniedMcpServers": [{"serverName": "other"}],
              "permissions": {"allow": ["Bash(ls)"], "deny": ["Bash(rm:*)"]}}
    path.write_text(json.dumps(theirs))
    path.chmod(0o640)
    assert deny_claude_mem_search(path) is True
    assert deny_claude_mem_search(path) is False  # idempotent
    data = json.loads(path.read_text())
    assert data["permissions"]["deny"] == ["Bash(rm:*)", SEARCH_RULE, TIMELINE_RULE, GET_RULE]
    assert data["permissions"]["allow"] == ["Bash(ls)"]
    assert list(data) == [*theirs, RECORD_KEY]  # the record goes last, beside the entries
    assert data[RECORD_KEY]["added"] == [{"at": ["permissions", "deny"], "value": r} for r in DENY_RULES]
    assert {k: v for k, v in data.items() if k not in ("permissions", RECORD_KEY)} == \
        {k: v for k, v in theirs.items() if k != "permissions"}
    assert path.stat().st_mode & 0o777 == 0o640
    assert allow_claude_mem_search(path) is True and allow_claude_mem_search(path) is False
    assert json.loads(path.read_text()) == theirs
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no temporary file left


def test_allow_removes_the_keys_it_added(tmp_path: Path) -> None:
    path = tmp_path / "claude" / "settings.json"
    assert deny_claude_mem_search(path) is True  # no file yet: created, private
    assert path.stat().st_mode & 0o777 == 0o600
    data = json.loads(path.read_text())
    assert data["permissions"] == {"deny": list(DENY_RULES)}
    assert data[RECORD_KEY]["created"] == [["permissions"], ["permissions", "deny"]]
    assert allow_claude_mem_search(path) is True
    assert json.loads(path.read_text()) == {}


class TestOnlyWhatSwapAdded:
    """Restore removes exactly what swap recorded adding: a user's own entries, the keys' order and
    the lists' order stay, whatever the user did to the file in between."""

    def test_a_rule_the_user_wrote_survives_swap_and_restore(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        text = json.dumps({"model": "opus", "permissions": {"deny": [SEARCH_RULE, "Bash(rm:*)"],
                                                            "allow": ["Bash(ls)"]}, "theme": "dark"}, indent=2)
        path.write_text(text)
        assert deny_claude_mem_search(path) is True
        data = json.loads(path.read_text())
        assert data["permissions"]["deny"] == [SEARCH_RULE, "Bash(rm:*)", TIMELINE_RULE, GET_RULE]
        assert [a["value"] for a in data[RECORD_KEY]["added"]] == [TIMELINE_RULE, GET_RULE]  # not theirs
        assert allow_claude_mem_search(path) is True
        assert path.read_text() == text  # keys, order, the user's rule and no final newline as they were

    def test_a_restore_with_no_swap_before_it_changes_nothing(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        text = json.dumps({"permissions": {"deny": list(DENY_RULES)}, "deniedMcpServers": [
            {"serverName": CLAUDE_MEM_SERVER}]})
        path.write_text(text)
        change = plan_restore(path)
        assert change.text is None and change.steps == ()
        assert any("no record of a swap" in n for n in change.notes)
        assert any("deniedMcpServers" in n and "left as it is" in n for n in change.notes)
        assert allow_claude_mem_search(path) is False
        assert path.read_text() == text

    def test_the_record_stays_true_through_the_users_edits(self, tmp_path: Path) -> None:
        """Entries added, moved and removed between swap and restore: only the recorded values go."""
        path = tmp_path / "settings.json"
        path.write_text(json.dumps({"permissions": {"deny": ["Bash(rm:*)"]}}))
        deny_claude_mem_search(path)
        data = json.loads(path.read_text())
        # The user moves memsync's rules around, deletes one, adds their own and a key of their own.
        data["permissions"]["deny"] = [GET_RULE, "Read(.env)", SEARCH_RULE, "Bash(rm:*)"]
        data = {"hooks": {}, **data}
        path.write_text(json.dumps(data))
        assert allow_claude_mem_search(path) is True
        assert json.loads(path.read_text()) == {"hooks": {}, "permissions": {"deny": ["Read(.env)", "Bash(rm:*)"]}}
        assert list(json.loads(path.read_text())) == ["hooks", "permissions"]

    def test_a_created_container_stays_when_the_user_put_something_in_it(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        deny_claude_mem_search(path)
        data = json.loads(path.read_text())
        data["permissions"]["allow"] = ["Bash(ls)"]
        path.write_text(json.dumps(data))
        allow_claude_mem_search(path)
        assert json.loads(path.read_text()) == {"permissions": {"allow": ["Bash(ls)"]}}

    def test_a_second_swap_keeps_the_first_record(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        deny_claude_mem_search(path)
        first = path.read_text()
        data = json.loads(first)
        data["permissions"]["deny"].remove(TIMELINE_RULE)  # the user took one away
        path.write_text(json.dumps(data))
        assert deny_claude_mem_search(path) is True  # put back, recorded once
        assert json.loads(path.read_text()) == json.loads(first) | {"permissions": {"deny": [
            SEARCH_RULE, GET_RULE, TIMELINE_RULE]}}
        allow_claude_mem_search(path)
        assert json.loads(path.read_text()) == {}

    def test_the_record_is_general(self, tmp_path: Path) -> None:
        """Any value added to any list (a hook entry as well as a rule) is recorded and taken back."""
        path = tmp_path / "settings.json"
        original = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "theirs"}]}]}}
        path.write_text(json.dumps(original))
        hook = {"hooks": [{"type": "command", "command": "memsync hook"}]}
        edit = RecordedEdit(read_settings(path), path)
        edit.add(("hooks", "UserPromptSubmit"), hook)
        edit.add(("hooks", "Stop"), hook)
        edit.finish()
        write_settings(path, settings_text(path, edit.data))
        undo = RecordedEdit(read_settings(path), path)
        assert undo.created == [("hooks", "UserPromptSubmit")]
        undo.undo()
        assert undo.data == original

    @pytest.mark.parametrize("line", [
        {"at": "permissions.deny", "value": "x"},
        {"at": ["hooks", "UserPromptSubmit"], "value": "x", "json": "[]"},  # both forms at once
        {"at": ["hooks", "UserPromptSubmit"], "json": '"a string"'},  # text is only for an object or list
        {"at": ["hooks", "UserPromptSubmit"], "json": "{not json"},
        {"at": ["hooks", "UserPromptSubmit"], "json": {"hooks": []}},  # the text form holds text
    ], ids=["a dotted path", "value and json", "json of a scalar", "json not JSON", "json not text"])
    def test_a_record_that_is_not_what_swap_wrote_is_refused(self, tmp_path: Path, line: dict[str, Any]) -> None:
        path = tmp_path / "settings.json"
        text = json.dumps({RECORD_KEY: {"added": [line]}})
        path.write_text(text)
        with pytest.raises(ClaudeSettingsError, match=f"holds a {RECORD_KEY} entry that is not what"):
            allow_claude_mem_search(path)
        assert path.read_text() == text


@pytest.mark.parametrize("edit", [deny_claude_mem_search, allow_claude_mem_search])
def test_a_whole_server_entry_is_left_as_it_is(tmp_path: Path, edit: Callable[[Path], bool]) -> None:
    """memsync's first swap denied claude-mem's whole server; such an entry cannot be told from the
    user's own, so swap and restore leave it and say so."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"deniedMcpServers": [{"serverName": "other"}, {"serverName": CLAUDE_MEM_SERVER}]}))
    change = (plan_swap if edit is deny_claude_mem_search else plan_restore)(path)
    assert any(f"denies claude-mem's whole server ({CLAUDE_MEM_SERVER})" in n for n in change.notes)
    edit(path)
    assert json.loads(path.read_text())["deniedMcpServers"] == [{"serverName": "other"},
                                                                {"serverName": CLAUDE_MEM_SERVER}]


DEEP = "[" * 100_000 + "]" * 100_000  # deeper than Python's JSON parser goes
UNEDITABLE = {"not JSON": "{not json", "not an object": "[1, 2]", "permissions a list": '{"permissions": ["mcp__x"]}',
              "deny a string": '{"permissions": {"deny": "mcp__plugin_claude-mem_mcp-search__search"}}',
              "nested 100,000 deep": '{"a": ' + DEEP + "}",
              "a duplicate key": '{"permissions": {"deny": ["Bash(rm:*)"], "deny": ["Read(.env)"]}}'}


@pytest.mark.parametrize("text", UNEDITABLE.values(), ids=UNEDITABLE.keys())
def test_a_settings_file_it_cannot_edit_is_left_as_it_is(tmp_path: Path, text: str) -> None:
    path = tmp_path / "settings.json"
    path.write_text(text)
    with pytest.raises(ClaudeSettingsError, match="fix it"):
        deny_claude_mem_search(path)
    assert path.read_text() == text


def test_claude_config_dir_is_honoured(tmp_path: Path) -> None:
    assert settings_path({"CLAUDE_CONFIG_DIR": str(tmp_path)}) == tmp_path / "settings.json"
    assert settings_path({}) == Path.home() / ".claude" / "settings.json"


# -- the real Claude Code ------------------------------------------------------------------------
def claude_env(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **NO_TELEMETRY, **extra}


def claude(home: Path, *args: str, cwd: Path, **extra: str) -> str:
    done = subprocess.run([str(CLAUDE_CODE), *args], env=claude_env(home, **extra), cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def servers(listing: str) -> dict[str, str]:
    """``claude mcp list``: server name -> its health (Connected / Failed to connect)."""
    out = {}
    for line in listing.splitlines():
        name, sep, rest = line.partition(": ")
        if sep and ("✔" in rest or "✘" in rest):
            out[name] = "Connected" if "✔ Connected" in rest else rest.rsplit(" - ", 1)[-1]
    return out


def started_under(home: Path) -> list[int]:
    """Pids of the live processes whose environment has ``HOME=home``: every process Claude Code
    and claude-mem's plugin start in the test inherits it, and nothing else has it."""
    marker = f"HOME={home}".encode()
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
    return pids


def kill_started_under(home: Path, timeout: float = 15.0) -> list[int]:
    """SIGKILL every process :func:`started_under` ``home`` until none is left; the survivors at
    ``timeout``. A round, not one pass: a killed process is listed until the kernel has torn it down,
    and one may have started a child between the scan and its kill."""
    deadline = time.monotonic() + timeout
    while (left := started_under(home)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)  # the kernel's teardown has no event to wait on here
    return started_under(home)


CLAUDE_MEM_TOOL = "mcp__plugin_claude-mem_mcp-search__"  # how the model sees claude-mem's tools
MEMSYNC_TOOL = "mcp__memsync__"


def agent_tools(home: Path, project: Path, api: ModelApi, worker_port: int,
                prompt: str = "hello") -> dict[str, dict[str, Any]]:
    """The MCP tools a Claude Code session gives the model (name -> input schema): one ``claude -p``
    turn against the stand-in model API, which records the tool list it is sent (and the messages,
    left in ``api.requests``). claude-mem's MCP server and hooks get a worker port of their own
    (they start a worker when none answers).

    ``claude -p`` connects MCP servers in the background and sends the first turn with those
    connected by then; ``MCP_CONNECTION_NONBLOCKING=0`` (read by Claude Code's connect step)
    makes it wait for all of them, so the list does not depend on which server started first.
    ``ENABLE_TOOL_SEARCH=false``: every tool in the list with its schema (by default Claude Code
    defers MCP tools, see :func:`offered_tools`)."""
    api.requests.clear()
    answer = claude(home, "-p", prompt, cwd=project, ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test",
                    CLAUDE_MEM_WORKER_PORT=str(worker_port), MCP_CONNECTION_NONBLOCKING="0",
                    ENABLE_TOOL_SEARCH="false")
    assert answer.strip() == "ok", answer
    return {name: schema for name, schema in api.tools().items() if name.startswith("mcp__")}


def offered_tools(home: Path, project: Path, api: ModelApi, worker_port: int) -> set[str]:
    """The MCP tools a session with Claude Code's defaults offers the model: those in the tool list,
    and those it defers (2.1.332: MCP tools are not in the list; a message names them and the model
    loads a schema with its ToolSearch tool). A denied tool is in neither."""
    api.requests.clear()
    answer = claude(home, "-p", "hello", cwd=project, ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test",
                    CLAUDE_MEM_WORKER_PORT=str(worker_port), MCP_CONNECTION_NONBLOCKING="0")
    assert answer.strip() == "ok", answer
    listed = {name for name in api.tools() if name.startswith("mcp__")}
    last = [r for r in api.requests if r.get("tools")][-1]
    return listed | set(re.findall(r"\bmcp__[\w-]+", "\n".join(message_texts(last))))


def jelly_turn(home: Path, project: Path, api: ModelApi, session: str | None = None,
               **env: str) -> tuple[str, set[str]]:
    """One ``claude -p`` turn of :data:`JELLY_PROMPT` (in ``session`` when given, by ``--resume``;
    with ``env`` added to Claude Code's environment): its session id and the refs memsync injected in it."""
    api.requests.clear()
    out = claude(home, "-p", JELLY_PROMPT, "--output-format", "json", *(("--resume", session) if session else ()),
                 cwd=project, ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-test", **env)
    last = [r for r in api.requests if r.get("messages")][-1]  # the turn's request: the history, then this turn
    turn = list(itertools.takewhile(lambda m: m.get("role") != "assistant", reversed(last["messages"])))
    text = "\n".join(message_texts({"messages": turn}))
    blocks = re.findall(f"UserPromptSubmit hook additional context: (<{TAG}>.*?</{TAG}>)", text, re.DOTALL)
    refs = {ref for block in blocks for ref in re.findall(r"^- (#\w+) ", block, re.MULTILINE)}
    return json.loads(out)["session_id"], refs


def memsync_context(api: ModelApi) -> list[str]:
    """memsync's memory blocks, as the additional context of a UserPromptSubmit hook, in the
    messages of the requests ``api`` recorded (Claude Code puts every hook's context of a turn
    into one text, claude-mem's SessionStart context with it)."""
    texts = [text for request in api.requests for text in message_texts(request)]
    return re.findall(f"UserPromptSubmit hook additional context: (<{TAG}>.*?</{TAG}>)", "\n".join(texts), re.DOTALL)


def message_texts(request: dict[str, Any]) -> list[str]:
    """The text blocks of a Messages request's messages, in order."""
    texts: list[str] = []
    for message in request["messages"]:
        content = message["content"]  # a string or a list of blocks
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts += [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return texts


def user_prompts(db: Path) -> list[str]:
    """The prompts claude-mem recorded in its database, in order."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return [str(r[0]) for r in conn.execute("SELECT prompt_text FROM user_prompts ORDER BY id")]


# The memory of the session's project (its folder's name, "project"), written by claude-mem itself.
JELLY = obs(100, project="project", title="Where the jellyfish deploy config lives", facts=[],
            narrative="The jellyfish service reads its deploy config from deploy/jelly.toml.")
JELLY_PROMPT = "where does the jellyfish service read its deploy config from?"
UNRELATED_PROMPT = "write a short poem about the autumn rain on the harbour"


def with_claude_mem(tmp_path: Path, user_settings: dict[str, Any]) -> tuple[Path, Path, Path, int]:
    """A HOME with Claude Code's settings file ``user_settings`` and claude-mem 13.25.3's published
    plugin installed by the real CLI, its MCP server connected, and the user's memory in its
    database: (home, a project folder, the database, claude-mem's worker port)."""
    assert CLAUDE_CODE.exists(), f"{CLAUDE_CODE} is missing: `make test` installs Claude Code's CLI there"
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    # claude-mem's hooks run `node bun-runner.js`, which looks for bun on PATH, then where bun's
    # installer puts it: the pinned one there.
    (home / ".bun" / "bin").mkdir(parents=True)
    (home / ".bun" / "bin" / "bun").symlink_to(BUN.resolve())
    # The user's memory, in claude-mem's own database under HOME, before claude-mem first starts;
    # claude-mem's settings file gives every process of it (hooks, MCP server, the worker they start)
    # a free port and no Chroma (its uvx would fetch chroma-mcp from the network).
    db = written_db(home / ".claude-mem" / "claude-mem.db", [*mixed_records(3), JELLY])
    port = free_port()
    (home / ".claude-mem" / "settings.json").write_text(json.dumps({"CLAUDE_MEM_WORKER_PORT": str(port),
                                                                  "CLAUDE_MEM_CHROMA_ENABLED": "false"}))
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps(user_settings))
    # claude-mem's published plugin (the npm package's plugin/ folder), from a local marketplace.
    market = tmp_path / "marketplace"
    shutil.copytree(WORKER_SCRIPT.parents[1], market / "plugin")
    (market / ".claude-plugin").mkdir()
    (market / ".claude-plugin" / "marketplace.json").write_text(json.dumps({
        "name": "thedotmack", "owner": {"name": "test"},
        "plugins": [{"name": "claude-mem", "source": "./plugin", "description": "claude-mem from npm"}]}))
    claude(home, "plugin", "marketplace", "add", str(market), cwd=project)
    claude(home, "plugin", "install", "claude-mem@thedotmack", cwd=project)
    assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected"}
    return home, project, db, port


@pytest.mark.slow
def test_swap_and_restore_with_the_real_claude_code(tmp_path: Path) -> None:
    """What the agent sees, before, after swap and after restore: the tool list a real Claude Code
    session sends the model, with claude-mem's published plugin installed. The user had denied
    claude-mem's search tool themselves: a restore with no swap before it, and swap then restore,
    leave that rule (and the file) as it was; Claude Code reads the file with memsync's record and
    hook entry in it (the session runs with the hook) and keeps both when it rewrites the file.

    After swap, both UserPromptSubmit hooks run: memsync's puts the memory a real ``memsync
    worker`` finds in claude-mem's own database in front of the model for a prompt that has one,
    and nothing for one that has none; claude-mem's (its worker started by its hooks) still
    records every prompt in that database."""
    home, project, db, port = with_claude_mem(tmp_path, {"cleanupPeriodDays": 30,
                                                         "permissions": {"deny": [SEARCH_RULE, "Bash(rm:*)"]}})
    settings = home / ".claude" / "settings.json"
    data_dir = tmp_path / "data"
    env = {**claude_env(home), "MEMSYNC_DATA_DIR": str(data_dir)}
    # memsync's worker on that database (it syncs and warms up while the steps before swap run).
    worker = WorkerProcess(Settings(db=db, data_dir=data_dir, chroma_mode="managed"))
    try:
        with model_api() as api:
            installed = settings.read_text()  # the user's file, with the plugin's entries Claude Code wrote
            restore = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", str(CLAUDE_CODE)], env=env,
                                     cwd=project, capture_output=True, text=True, timeout=180)
            assert restore.returncode == 0, restore.stdout + restore.stderr
            assert settings.read_text() == installed  # a restore with no swap before it changes nothing
            before = agent_tools(home, project, api, port)
            assert sorted(before) == sorted(CLAUDE_MEM_TOOL + t for t in CLAUDE_MEM_TOOLS if t != "search")

            swap = subprocess.run([MEMSYNC, "claude-code", "swap", "--claude", str(CLAUDE_CODE), "--db", str(db)],
                                  env=env, cwd=project, capture_output=True, text=True, timeout=180)
            assert swap.returncode == 0, swap.stdout + swap.stderr
            # claude-mem's server stays on (its other tools with it); memsync's is added.
            assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected",
                                                                         "memsync": "Connected"}
            hook = inject_hook(data_dir, db)
            assert recorded(json.loads(settings.read_text())) == [TIMELINE_RULE, GET_RULE, hook, compact_entry(hook)]
            # Claude Code rewrites the file (the plugin off and on again) and keeps memsync's record.
            claude(home, "plugin", "disable", "claude-mem@thedotmack", cwd=project)
            claude(home, "plugin", "enable", "claude-mem@thedotmack", cwd=project)
            swapped = json.loads(settings.read_text())
            assert swapped["enabledPlugins"] == {"claude-mem@thedotmack": True} and RECORD_KEY in swapped
            assert swapped["hooks"] == {"UserPromptSubmit": [hook], "SessionStart": [compact_entry(hook)]}
            wait_for(lambda: worker.events("inject_warm"), 120, "the worker's warm injection searcher")
            after = agent_tools(home, project, api, port, JELLY_PROMPT)
            assert sorted(after) == sorted([*(MEMSYNC_TOOL + t for t in SEARCH_TOOLS),
                                            *(CLAUDE_MEM_TOOL + t for t in CLAUDE_MEM_TOOLS if t not in SEARCH_TOOLS)])
            injected = memsync_context(api)
            assert len(injected) == 1 and "deploy/jelly.toml" in injected[0], \
                (injected, served(data_dir, int(time.time() * 1000)), worker.events("inject_failed"))
            api.requests.clear()  # a session for the hook only: its tools are not waited for
            assert claude(home, "-p", UNRELATED_PROMPT, cwd=project, ANTHROPIC_BASE_URL=api.url,
                          ANTHROPIC_API_KEY="sk-ant-test").strip() == "ok"
            assert api.requests and memsync_context(api) == []
            # The worker was asked both times (the second prompt got nothing by its decision), and
            # claude-mem's own hook recorded both prompts in its database.
            wait_for(lambda: served(data_dir, int(time.time() * 1000)).prompts == 2, 10, "the worker's count")
            assert served(data_dir, int(time.time() * 1000)).injected == 1
            assert user_prompts(db)[-2:] == [JELLY_PROMPT, UNRELATED_PROMPT]
            # In one session a memory is injected once, until Claude Code compacts the conversation
            # (`/compact`: memsync's SessionStart entry runs with the session's id), then it may be again.
            session, first = jelly_turn(home, project, api)
            assert first, "the jellyfish prompt got no memory in a new session"
            assert not jelly_turn(home, project, api, session)[1] & first  # already in this conversation
            claude(home, "-p", "/compact", "--resume", session, cwd=project, ANTHROPIC_BASE_URL=api.url,
                   ANTHROPIC_API_KEY="sk-ant-test")
            assert jelly_turn(home, project, api, session)[1] & first  # the summary may have dropped them
            # One session without memsync's memory, the hook left installed (upstream #321, #1976): Claude
            # Code's environment reaches its hooks; the client exits before it asks the worker.
            assert jelly_turn(home, project, api, MEMSYNC_INJECT="false")[1] == set()
            wait_for(lambda: served(data_dir, int(time.time() * 1000)).prompts >= 5, 10, "the worker's count")
            assert offered_tools(home, project, api, port) == set(after)  # deferred or listed: the same tools
            assert worker.stop() == 0
            # a compaction is no prompt, nor one of a session with inject off: the two prompts, the three
            # jellyfish turns and offered_tools' "hello"
            assert served(data_dir, int(time.time() * 1000)).prompts == 6
            for tool in ("timeline", "get_observations"):  # the agent is given the parameters the skill teaches
                mine, theirs = after[MEMSYNC_TOOL + tool], before[CLAUDE_MEM_TOOL + tool]
                assert set(mine["properties"]) == set(theirs["properties"]), tool
                assert mine.get("required", []) == theirs.get("required", []), tool
            details = claude(home, "plugin", "details", "claude-mem@thedotmack", cwd=project)
            assert "Hooks (7)" in details, details  # the plugin's hooks stay: it still records memory
            registered = claude(home, "mcp", "get", "memsync", cwd=project)
            assert "--profile claude-mem" in registered and f"MEMSYNC_DB={db}" in registered, registered

            restore = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", str(CLAUDE_CODE)], env=env,
                                     cwd=project, capture_output=True, text=True, timeout=180)
            assert restore.returncode == 0, restore.stdout + restore.stderr
            assert sorted(agent_tools(home, project, api, port)) == sorted(before)
        assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected"}
        restored = json.loads(settings.read_text())
        assert restored == json.loads(installed) and not hook_installed(settings)
        # The order Claude Code last wrote, less what swap created (hooks, the record).
        assert list(restored) == [k for k in swapped if k not in (RECORD_KEY, "hooks")]
        assert restored["permissions"]["deny"] == [SEARCH_RULE, "Bash(rm:*)"]
    finally:  # anything the plugin's hooks or server started (a worker it auto-starts outlives claude)
        worker.kill()
        kill_managed_server(data_dir)
        assert kill_started_under(home) == []


@pytest.mark.slow
def test_a_file_an_earlier_swap_wrote_is_applied_again_after_swap(tmp_path: Path) -> None:
    """The real Claude Code applies nothing of a settings file whose swap record holds the hook entry
    as an object (as swap wrote it from 2026-11-28 until the record held text): claude-mem's plugin,
    enabled there, is gone from its servers. ``memsync status`` says so, and ``swap`` run again
    rewrites the record: the plugin's server is back beside memsync's, and status no longer says it."""
    home, project, db, _ = with_claude_mem(tmp_path, {})
    settings = home / ".claude" / "settings.json"
    data = json.loads(settings.read_text())
    earlier = old_record(inject_hook(tmp_path / "data", db))
    data["hooks"], data[RECORD_KEY] = earlier["hooks"], earlier[RECORD_KEY]
    settings.write_text(json.dumps(data, indent=2))
    env = {**claude_env(home), "MEMSYNC_DATA_DIR": str(tmp_path / "data")}

    def injection() -> dict[str, Any]:
        done = subprocess.run([MEMSYNC, "status", "--json", "--db", str(db)], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout)["injection"])

    try:
        assert servers(claude(home, "mcp", "list", cwd=project)) == {}  # the whole file unread, the plugin with it
        assert injection()["settings_misread"] is True
        swap = subprocess.run([MEMSYNC, "claude-code", "swap", "--claude", str(CLAUDE_CODE), "--db", str(db)],
                              env=env, cwd=project, capture_output=True, text=True, timeout=180)
        assert swap.returncode == 0, swap.stdout + swap.stderr
        assert "rewrites swap's record" in swap.stderr
        assert servers(claude(home, "mcp", "list", cwd=project)) == {CLAUDE_MEM_SERVER: "Connected",
                                                                     "memsync": "Connected"}
        assert injection()["settings_misread"] is False
    finally:  # anything the plugin's server started
        assert kill_started_under(home) == []


@pytest.mark.slow
def test_the_real_claude_code_runs_the_hook_swap_installed(tmp_path: Path, settings: Settings) -> None:
    """The hook entry as swap writes it, run by a real ``claude -p``: the hook client reaches the
    worker's listener (here with a stand-in answer, not a search) over the data directory's socket,
    and the request Claude Code sends the model holds the answer as the prompt's additional context;
    a prompt with no answer adds nothing. (That restore takes the entry away is the test above's.)"""
    assert CLAUDE_CODE.exists(), f"{CLAUDE_CODE} is missing: `make test` installs Claude Code's CLI there"
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir(parents=True)
    memory = "<memsync-memory>#12 2026-01-02 alpha: the jellyfish config lives in deploy/jelly.toml</memsync-memory>"
    payloads: list[dict[str, Any]] = []

    def answer(payload: dict[str, Any]) -> Reply:
        payloads.append(payload)
        return Reply(memory, ["#12"], 20) if "jellyfish" in payload["prompt"] else Reply()

    claude_cmd, _ = stand_in_claude(tmp_path)  # the MCP registration is the other test's
    memsync_env = claude_env(home)
    listener = start_listener(settings, answer)
    assert listener is not None
    try:
        swap = subprocess.run([MEMSYNC, "claude-code", "swap", "--claude", str(claude_cmd), "--db", str(settings.db),
                               "--data-dir", str(settings.data_dir)], env=memsync_env, capture_output=True, text=True,
                              timeout=60)
        assert swap.returncode == 0, swap.stderr
        with model_api() as api:
            def sent(prompt: str) -> str:
                api.requests.clear()
                assert claude(home, "-p", prompt, cwd=project, ANTHROPIC_BASE_URL=api.url,
                              ANTHROPIC_API_KEY="sk-ant-test").strip() == "ok"
                return json.dumps([r["messages"] for r in api.requests])

            assert json.dumps(f"UserPromptSubmit hook additional context: {memory}")[1:-1] in \
                sent("where does the jellyfish config live?")
            assert "additional context" not in sent("hello there, how are you")
            assert [(p["hook_event_name"], p["cwd"]) for p in payloads] == [("UserPromptSubmit", str(project))] * 2
    finally:
        listener.stop()


@pytest.mark.slow
def test_each_swap_hook_reaches_the_worker_of_its_own_database(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Two databases, each with its worker's listener (a stand-in answer naming its database), and
    a swap for each into a Claude Code settings file of its own: each hook command line, run by a
    shell as Claude Code runs it, gets the answer of its own database's worker only."""
    claude_cmd, _ = stand_in_claude(tmp_path)
    listeners, commands = [], {}
    try:
        for name in ("one", "two"):
            db = make_db(tmp_path / f"{name}.db", mixed_records(1))
            settings = Settings(db=db, data_dir=tmp_path / f"data-{name}")
            listener = start_listener(settings, lambda _payload, db=db: Reply(f"memory of {db}", ["#1"], 3))
            assert listener is not None
            listeners.append(listener)
            monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / f"claude-{name}"))
            result = CliRunner().invoke(main, ["claude-code", "swap", "--claude", str(claude_cmd), "--db", str(db),
                                               "--data-dir", str(settings.data_dir)], catch_exceptions=False)
            assert result.exit_code == 0, result.stderr
            entry = json.loads((tmp_path / f"claude-{name}" / "settings.json").read_text())["hooks"][HOOK_AT[1]]
            commands[db] = entry[0]["hooks"][0]["command"]
        payload = json.dumps({"session_id": "s1", "cwd": str(tmp_path), "hook_event_name": "UserPromptSubmit",
                              "prompt": "what did we decide about the release?"})
        for db, command in commands.items():
            done = subprocess.run(["/bin/sh", "-c", command], input=payload, capture_output=True, text=True,
                                  timeout=30, cwd=tmp_path)
            assert done.returncode == 0 and done.stderr == "", done.stderr
            assert json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] == f"memory of {db}"
    finally:
        for listener in listeners:
            listener.stop()


@pytest.mark.slow
def test_a_dry_run_prints_the_steps_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings = home / ".claude" / "settings.json"
    settings.write_text('{"enabledPlugins": {"claude-mem@thedotmack": true}}')
    db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run([MEMSYNC, "claude-code", "swap", "--dry-run", "--claude", sys.executable, "--db", str(db)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"$ {sys.executable} mcp remove --scope user memsync"
    assert lines[1].startswith(f"$ {sys.executable} mcp add --scope user memsync -e MEMSYNC_DB={db} -- ")
    assert lines[1].endswith(" mcp --profile claude-mem")
    hook = hook_entry(inject_command(Path(MEMSYNC), InjectTarget(home / ".memsync", db)))  # the default data dir
    assert lines[2:-2] == [*(f'{settings}: would add to permissions.deny: "{rule}"' for rule in DENY_RULES),
                           f"{settings}: would add to hooks.UserPromptSubmit: {json.dumps(hook)}",  # the hook entry
                           f"{settings}: would add to hooks.SessionStart: {json.dumps(compact_entry(hook))}",
                           f"{settings}: would record what it adds in {RECORD_KEY}"]
    assert lines[-2] == f"Claude Code: {sys.executable} (on PATH)"  # a path is found by which as well
    assert lines[-1].startswith(f"claude-mem: not installed (no plugin in {home}/.claude/plugins/cache/")
    assert settings.read_text() == '{"enabledPlugins": {"claude-mem@thedotmack": true}}'


def stand_in_claude(tmp_path: Path) -> tuple[Path, Path]:
    """A ``claude`` that only writes down how it was called (the real one is the slow test's)."""
    log, script = tmp_path / "claude-calls", tmp_path / "claude"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    script.chmod(0o755)
    return script, log


@pytest.mark.slow
@pytest.mark.parametrize(("case", "commands"), [("nested 100,000 deep", ("swap", "restore")),
                                               ("a duplicate key", ("swap", "restore")),
                                               ("deny a string", ("swap",))])  # restore has nothing to remove
def test_a_dry_run_refuses_as_the_real_run_does(tmp_path: Path, case: str, commands: tuple[str, ...]) -> None:
    """One line, exit 2, the same from ``--dry-run`` as from the real command, before any
    ``claude`` command runs and with the file untouched."""
    text = UNEDITABLE[case]
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings = home / ".claude" / "settings.json"
    settings.write_text(text)
    claude_cmd, calls = stand_in_claude(tmp_path)
    db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for command in (["swap", "--db", str(db)] if c == "swap" else [c] for c in commands):
        answers = [subprocess.run([MEMSYNC, "claude-code", *command, *dry, "--claude", str(claude_cmd)], env=env,
                                  capture_output=True, text=True, timeout=60) for dry in ([], ["--dry-run"])]
        for done in answers:
            assert done.returncode == 2, done.stderr
            assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"memsync: {settings} "), done.stderr
        assert answers[0].stdout == ""
        assert f"{settings}: cannot plan its edit (below)" in answers[1].stdout.splitlines()  # the rest first
        assert answers[0].stderr == answers[1].stderr
    assert not calls.exists()
    assert settings.read_text() == text


@pytest.mark.slow
def test_a_restore_with_no_swap_before_it_leaves_the_users_rules(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    settings = home / ".claude" / "settings.json"
    text = json.dumps({"permissions": {"deny": [DENY_RULES[0], "Bash(rm:*)"]}})
    settings.write_text(text)
    claude_cmd, calls = stand_in_claude(tmp_path)
    done = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", str(claude_cmd)],
                          env={"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"{settings}: nothing to change (no swap is recorded in it)" in done.stdout.splitlines()
    assert f"permissions.deny holds {DENY_RULES[0]} with no record of a swap" in done.stderr
    assert settings.read_text() == text
    assert calls.read_text() == "mcp remove --scope user memsync\n"


@pytest.mark.slow
def test_without_claude_code_it_says_how_to_get_it(tmp_path: Path) -> None:
    done = subprocess.run([MEMSYNC, "claude-code", "restore", "--claude", "no-such-claude"],
                          env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "'no-such-claude' was not found: not on PATH (/usr/bin, /bin); install Claude Code, or pass --claude " \
        "PATH" in done.stderr
    assert not (tmp_path / ".claude").exists()


@pytest.mark.slow
class TestADryRunWithoutClaudeCode:
    """``swap --dry-run`` where no ``claude`` is found: the whole plan on stdout, then the refusal
    the real run stops at (where it looked), and the real run's exit code; nothing written."""

    def run(self, home: Path, cwd: Path, *args: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
        return subprocess.run([MEMSYNC, "claude-code", "swap", *args], env={"HOME": str(home), "PATH": path},
                              cwd=cwd, capture_output=True, text=True, timeout=60)

    def test_the_plan_then_the_refusal_and_the_real_exit_code(self, tmp_path: Path) -> None:
        home = tmp_path / "home"
        home.mkdir()
        port = free_port()  # claude-mem's worker port: nothing answers there
        write_json(home / ".claude-mem" / "settings.json", {"CLAUDE_MEM_WORKER_PORT": str(port)})
        db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
        dry, real = (self.run(home, tmp_path, "--db", str(db), *extra) for extra in (["--dry-run"], []))
        assert dry.returncode == real.returncode == 2
        settings = home / ".claude" / "settings.json"
        lines = dry.stdout.splitlines()
        assert lines[0] == "$ claude mcp remove --scope user memsync"  # the name it was given
        assert lines[1].startswith(f"$ claude mcp add --scope user memsync -e MEMSYNC_DB={db} -- {MEMSYNC} mcp")
        # rules, the prompt hook, the compaction entry, the record
        assert [line.split(": would ")[0] for line in lines[2:8]] == [str(settings)] * 6
        where = f"not on PATH (/usr/bin, /bin) nor at {home}/.local/bin/claude, {home}/.claude/local/claude"
        assert lines[8] == f"Claude Code: 'claude' not found ({where}): the real run stops (below)"
        assert lines[9] == (f"claude-mem: not installed (no plugin in {home}/.claude/plugins/cache/thedotmack/"
                            f"claude-mem or {home}/.claude/plugins/marketplaces/thedotmack, no worker on 127.0.0.1:"
                            f"{port}): the deny rules wait for it; its database {home}/.claude-mem/claude-mem.db "
                            "(claude-mem's default directory (~/.claude-mem)) does not exist")
        assert len(lines) == 10
        refusal = f"memsync: Claude Code's command 'claude' was not found: {where}; install Claude Code, or pass " \
                  "--claude PATH\n"
        assert dry.stderr.endswith(refusal) and real.stderr == refusal and real.stdout == ""
        assert not (home / ".claude").exists()

    def test_claude_mem_found_by_its_running_worker(self, tmp_path: Path) -> None:
        """No plugin in Claude Code's directory, but a worker answering claude-mem's health request
        on its port (``CLAUDE_MEM_WORKER_PORT``): claude-mem is there, by its own rule."""
        import http.server
        import threading

        class Health(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                body = json.dumps({"status": "ok", "version": "13.25.3"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        home = tmp_path / "home"
        home.mkdir()
        db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
        with http.server.HTTPServer(("127.0.0.1", 0), Health) as server:
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            try:
                done = subprocess.run([MEMSYNC, "claude-code", "swap", "--dry-run", "--db", str(db)], cwd=tmp_path,
                                      env={"HOME": str(home), "PATH": "/usr/bin:/bin",
                                           "CLAUDE_MEM_WORKER_PORT": str(server.server_port)},
                                      capture_output=True, text=True, timeout=60)
            finally:
                server.shutdown()
                thread.join(timeout=10)
        assert done.returncode == 2
        assert done.stdout.splitlines()[-1].startswith(
            f"claude-mem: no plugin in {home}/.claude/plugins, but its worker 13.25.3 answers on 127.0.0.1:"
            f"{server.server_port} (CLAUDE_MEM_WORKER_PORT or its default); its database ")

    def test_every_refusal_is_listed_and_claude_mem_is_found_by_its_rule(self, tmp_path: Path) -> None:
        home = tmp_path / "home"
        plugin = home / ".claude" / "plugins" / "cache" / "thedotmack" / "claude-mem" / "13.25.3"
        (plugin / "scripts").mkdir(parents=True)
        (plugin / "scripts" / "worker-service.cjs").write_text("")
        data = tmp_path / "mem-data"
        (home / ".claude-mem").mkdir()
        (home / ".claude-mem" / "settings.json").write_text(json.dumps({"CLAUDE_MEM_DATA_DIR": str(data)}))
        settings = home / ".claude" / "settings.json"
        settings.write_text(UNEDITABLE["deny a string"])
        db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
        done = self.run(home, tmp_path, "--db", str(db), "--dry-run", "--claude", str(tmp_path / "no-claude"))
        assert done.returncode == 2
        assert f"{settings}: cannot plan its edit (below)" in done.stdout.splitlines()
        assert f"Claude Code: '{tmp_path}/no-claude' not found (no executable file there): the real run stops " \
            "(below)" in done.stdout.splitlines()
        assert f"claude-mem: 13.25.3 installed ({plugin}); its database {data}/claude-mem.db (CLAUDE_MEM_DATA_DIR " \
            f"in {home}/.claude-mem/settings.json) does not exist" in done.stdout.splitlines()
        refusals = done.stderr.splitlines()[-2:]
        assert refusals[0] == (f"memsync: Claude Code's command '{tmp_path}/no-claude' was not found: no executable "
                               "file there; install Claude Code, or pass --claude PATH")
        assert refusals[1].startswith(f"memsync: {settings} ")
        assert settings.read_text() == UNEDITABLE["deny a string"]

    def test_restore_too(self, tmp_path: Path) -> None:
        home = tmp_path / "home"
        home.mkdir()
        done = subprocess.run([MEMSYNC, "claude-code", "restore", "--dry-run"], env={"HOME": str(home),
                              "PATH": "/usr/bin:/bin"}, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert done.stdout.splitlines() == ["$ claude mcp remove --scope user memsync",
                                            f"{home}/.claude/settings.json: nothing to change (no swap is recorded "
                                            "in it)",
                                            f"Claude Code: 'claude' not found (not on PATH (/usr/bin, /bin) nor at "
                                            f"{home}/.local/bin/claude, {home}/.claude/local/claude): the real run "
                                            "stops (below)"]
        assert done.stderr.startswith("memsync: Claude Code's command 'claude' was not found: not on PATH")

    def test_claude_where_its_installer_puts_it_is_found_off_path(self, tmp_path: Path) -> None:
        home = tmp_path / "home"
        claude_cmd, calls = stand_in_claude(tmp_path)
        (home / ".local" / "bin").mkdir(parents=True)
        (home / ".local" / "bin" / "claude").symlink_to(claude_cmd)
        db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
        done = self.run(home, tmp_path, "--db", str(db), "--dry-run")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"$ {home}/.local/bin/claude mcp remove --scope user memsync\n")
        assert f"memsync: note: Claude Code's command is not on PATH; using {home}/.local/bin/claude" in done.stderr
        assert f"Claude Code: {home}/.local/bin/claude (not on PATH; where its installer puts it)" in \
            done.stdout.splitlines()
        assert not calls.exists()

    @pytest.mark.slow
    def test_with_the_real_claude_code_on_path_the_plan_and_exit_0(self, tmp_path: Path) -> None:
        """The real CLI on PATH: the same plan naming it, exit 0, and nothing written in HOME (no
        ``claude`` command runs on a dry run)."""
        home = tmp_path / "home"
        home.mkdir()
        db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
        path = f"{CLAUDE_CODE.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        done = self.run(home, tmp_path, "--db", str(db), "--dry-run", path=path)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[:2] == [f"$ {CLAUDE_CODE} mcp remove --scope user memsync",
                             f"$ {CLAUDE_CODE} mcp add --scope user memsync -e MEMSYNC_DB={db} -- {MEMSYNC} mcp "
                             "--profile claude-mem"]
        # 3 deny rules, the prompt hook, the compaction entry, the record
        assert [line.split(": would ")[0] for line in lines[2:8]] == [str(home / ".claude" / "settings.json")] * 6
        assert lines[8] == f"Claude Code: {CLAUDE_CODE} (on PATH)"
        assert lines[9].startswith("claude-mem: not installed")
        assert "not found" not in done.stderr
        assert list(home.iterdir()) == []


# -- memsync registered at another scope ----------------------------------------------------------
def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def server_entry(*args: str) -> dict[str, Any]:
    return {"type": "stdio", "command": "/opt/memsync", "args": list(args), "env": {}}


class TestOtherScopes:
    """Registrations of ``memsync`` that swap does not replace: where they are, and which one Claude
    Code uses (local > project > user)."""

    def test_each_scope_is_read_where_claude_code_keeps_it(self, tmp_path: Path) -> None:
        home, project = tmp_path / "home", tmp_path / "project"
        (project / ".git").mkdir(parents=True)
        (project / "sub").mkdir()
        write_json(home / ".claude.json", {"mcpServers": {"memsync": server_entry("user")}, "projects": {
            str(project): {"mcpServers": {"memsync": server_entry("local")}},
            str(tmp_path / "elsewhere"): {"mcpServers": {"memsync": server_entry("other")}}}})
        write_json(project / ".mcp.json", {"mcpServers": {"memsync": server_entry("project")}})
        found = registrations("memsync", project / "sub", {"HOME": str(home)})  # the git root is the project
        assert [(r.scope, r.file, r.command) for r in found] == [
            ("local", home / ".claude.json", "/opt/memsync local"),
            ("project", project / ".mcp.json", "/opt/memsync project"),
            ("user", home / ".claude.json", "/opt/memsync user")]
        assert registrations("other", project, {"HOME": str(home)}) == []
        write_json(project / "sub" / ".mcp.json", {"mcpServers": {"memsync": server_entry("nearer")}})
        assert [(r.file, r.command) for r in registrations("memsync", project / "sub", {"HOME": str(home)})
                if r.scope == "project"] == [(project / "sub" / ".mcp.json", "/opt/memsync nearer")]  # nearest wins
        write_json(project / "sub" / ".mcp.json", {"mcpServers": {"other": server_entry("x")}})
        assert [r.command for r in registrations("memsync", project / "sub", {"HOME": str(home)})
                if r.scope == "project"] == ["/opt/memsync project"]  # one without the name is passed over
        config = tmp_path / "config"
        write_json(config / ".claude.json", {"mcpServers": {"memsync": server_entry("cfg")}})
        assert [r.command for r in registrations("memsync", tmp_path, {"CLAUDE_CONFIG_DIR": str(config)})] == \
            ["/opt/memsync cfg"]

    @pytest.mark.parametrize(("existing", "scope", "winner"), [
        ((), "user", "user"), (("local",), "user", "local"), (("user",), "local", "local"),
        (("project",), "user", "project"), (("user", "project"), "local", "local"),
        (("local", "user"), "project", "local")])
    def test_the_winner_is_local_then_project_then_user(self, existing: tuple[str, ...], scope: str,
                                                         winner: str) -> None:
        regs = [Registration(s, Path("/f"), "memsync mcp") for s in existing]
        assert winning_scope(regs, scope) == winner

    @pytest.mark.slow
    def test_swap_says_which_registration_claude_code_uses(self, tmp_path: Path) -> None:
        """The README's plain ``claude mcp add memsync ...`` registered at local scope: a user-scope
        swap is shadowed there, and says so; a local-scope swap replaces it and wins."""
        home, project = tmp_path / "home", tmp_path / "project"
        project.mkdir()
        local = {"mcpServers": {"memsync": server_entry("mcp")}}
        write_json(home / ".claude.json", {"projects": {str(project): local}})
        claude_cmd, _ = stand_in_claude(tmp_path)
        db = make_db(tmp_path / "claude-mem.db", mixed_records(1))
        env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
        for scope, expected in (("user", "memsync: warning: Claude Code uses the local registration, not this user "
                                         "one (local > project > user): remove it (`claude mcp remove --scope local "
                                         "memsync`) or swap with --scope local"),
                                ("local", None)):
            done = subprocess.run([MEMSYNC, "claude-code", "swap", "--dry-run", "--scope", scope, "--db", str(db),
                                   "--claude", str(claude_cmd)], env=env, cwd=project, capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            notes = [line for line in done.stderr.splitlines() if "registered at" in line or "registration" in line]
            if expected is None:
                assert notes == []  # the same scope: swap replaces it
            else:
                assert notes == [f"memsync: note: 'memsync' is registered at local scope too ({home}/.claude.json: "
                                 "/opt/memsync mcp)", expected]
        done = subprocess.run([MEMSYNC, "claude-code", "restore", "--dry-run", "--claude", str(claude_cmd)], env=env,
                              cwd=project, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stderr == (f"memsync: note: 'memsync' stays registered at local scope ({home}/.claude.json: "
                               "/opt/memsync mcp); `claude mcp remove --scope local memsync` removes it\n")


@pytest.mark.slow
def test_the_real_claude_code_uses_the_registration_swap_says_wins(tmp_path: Path) -> None:
    """Registrations the real ``claude mcp add`` wrote at each scope are found where it keeps them,
    and ``claude mcp get`` names the scope :func:`winning_scope` picks (local over user; an
    unapproved project server is one it leaves aside, so project is checked alone)."""
    home, project = tmp_path / "home", tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    home.mkdir()

    def get_scope() -> str:
        return re.findall(r"Scope: (\w+)", claude(home, "mcp", "get", "memsync", cwd=project))[0].lower()

    claude(home, "mcp", "add", "--scope", "project", "memsync", "--", "/bin/echo", "project", cwd=project)
    assert [r.scope for r in registrations("memsync", project, {"HOME": str(home)})] == ["project"]
    assert get_scope() == "project"
    claude(home, "mcp", "add", "--scope", "user", "memsync", "--", "/bin/echo", "user", cwd=project)
    claude(home, "mcp", "add", "memsync", "--", "/bin/echo", "local", cwd=project)  # the README's: local scope
    found = registrations("memsync", project, {"HOME": str(home)})
    assert [(r.scope, r.command) for r in found] == [("local", "/bin/echo local"), ("project", "/bin/echo project"),
                                                     ("user", "/bin/echo user")]
    assert get_scope() == winning_scope(found, "user") == "local"
    claude(home, "mcp", "remove", "--scope", "local", "memsync", cwd=project)
    claude(home, "mcp", "remove", "--scope", "project", "memsync", cwd=project)
    assert get_scope() == winning_scope(registrations("memsync", project, {"HOME": str(home)}), "user") == "user"


@pytest.mark.slow
def test_the_real_claude_code_from_a_subdirectory(tmp_path: Path) -> None:
    """Started in a folder below the git root, the real CLI keys a local registration by the root
    and writes a project one to the folder's own ``.mcp.json``, where :func:`registrations` finds
    each; ``claude mcp get`` there uses the one it names (the nearest ``.mcp.json`` over a farther)."""
    home, project = tmp_path / "home", tmp_path / "project"
    sub = project / "sub"
    (project / ".git").mkdir(parents=True)
    sub.mkdir()
    home.mkdir()

    def get() -> tuple[str, str]:
        answer = claude(home, "mcp", "get", "memsync", cwd=sub)
        return re.findall(r"Scope: (\w+)", answer)[0].lower(), re.findall(r"Args: (.*)", answer)[0].strip()

    write_json(project / ".mcp.json", {"mcpServers": {"memsync": {"type": "stdio", "command": "/bin/echo",
                                                                  "args": ["root"]}}})
    claude(home, "mcp", "add", "--scope", "project", "memsync", "--", "/bin/echo", "sub", cwd=sub)
    assert (sub / ".mcp.json").exists()
    assert [(r.scope, r.file, r.command) for r in registrations("memsync", sub, {"HOME": str(home)})] == \
        [("project", sub / ".mcp.json", "/bin/echo sub")]
    assert get() == ("project", "sub")
    claude(home, "mcp", "add", "memsync", "--", "/bin/echo", "local", cwd=sub)
    assert json.loads((home / ".claude.json").read_text())["projects"][str(project)]["mcpServers"]["memsync"]
    found = registrations("memsync", sub, {"HOME": str(home)})
    assert [r.scope for r in found] == ["local", "project"]
    assert get() == (winning_scope(found, "user"), "local")


# -- the per-prompt memory hook ------------------------------------------------------------------
def inject_hook(data_dir: Path, db: Path | None = None) -> dict[str, Any]:
    return hook_entry(inject_command(Path(MEMSYNC), InjectTarget(data_dir, db)))


def their_hook(command: str, **extra: Any) -> dict[str, Any]:
    return {**extra, "hooks": [{"type": "command", "command": command}]}


def recorded(data: dict[str, Any], at: tuple[str, ...] | None = None) -> list[Any]:
    """The values swap's record names (at ``at`` when given), decoded: a scalar as itself, an object
    or list from its JSON text."""
    return [json.loads(a["json"]) if "json" in a else a["value"] for a in data[RECORD_KEY]["added"]
            if at is None or a["at"] == list(at)]


def old_record(hook: dict[str, Any]) -> dict[str, Any]:
    """A settings file as swap wrote it before the record held objects as JSON text: the hook entry
    recorded as itself (Claude Code 2.1.257 and later apply nothing of such a file)."""
    return {"hooks": {"UserPromptSubmit": [hook]}, RECORD_KEY: {
        "note": "x", "added": [{"at": list(HOOK_AT), "value": hook}], "created": [["hooks"], list(HOOK_AT)]}}


# A user's hooks on several events, UserPromptSubmit among them, and keys around them.
THEIR_HOOKS = {"model": "opus", "hooks": {
    "PreToolUse": [their_hook("check-bash", matcher="Bash"), their_hook("log-tool", matcher="*")],
    "UserPromptSubmit": [their_hook("their-prompt-hook"), their_hook("/opt/memsync claude-code inject")],
    "SessionStart": [their_hook("greet")], "Stop": [their_hook("notify")]}, "theme": "dark"}


class TestTheHook:
    """The UserPromptSubmit entry swap adds beside the deny rules: after the user's own hooks, in
    the record, and gone after restore with the file as it was."""

    @pytest.mark.parametrize("newline", ["\n", ""], ids=["final newline", "none"])
    def test_swap_then_restore_gives_back_the_same_bytes(self, tmp_path: Path, newline: str) -> None:
        path = tmp_path / "settings.json"
        text = json.dumps(THEIR_HOOKS, indent=2) + newline  # two-space JSON, as Claude Code writes it
        path.write_text(text)
        hook = inject_hook(tmp_path / "data")
        assert apply_change(plan_swap(path, hook)) is True
        data = json.loads(path.read_text())
        assert data["hooks"]["UserPromptSubmit"] == [*THEIR_HOOKS["hooks"]["UserPromptSubmit"], hook]
        compact = compact_entry(hook)  # the same command, on a compaction only
        assert compact == {"matcher": "compact", **hook}
        assert data["hooks"]["SessionStart"] == [*THEIR_HOOKS["hooks"]["SessionStart"], compact]
        mine = ("UserPromptSubmit", "SessionStart")
        assert {k: v for k, v in data["hooks"].items() if k not in mine} == \
            {k: v for k, v in THEIR_HOOKS["hooks"].items() if k not in mine}  # every other event as it was
        assert list(data["hooks"]) == list(THEIR_HOOKS["hooks"])
        assert recorded(data, HOOK_AT) == [hook] and recorded(data, COMPACT_AT) == [compact]
        assert path.read_text().endswith("}" + newline)
        assert apply_change(plan_restore(path)) is True
        assert path.read_text() == text

    def test_a_file_without_hooks_gets_them_and_loses_them_again(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        path.write_text('{"permissions": {"allow": ["Bash(ls)"]}, "theme": "dark"}')
        apply_change(plan_swap(path, inject_hook(tmp_path / "data")))
        data = json.loads(path.read_text())
        assert list(data) == ["permissions", "theme", "hooks", RECORD_KEY]
        assert ["hooks"] in data[RECORD_KEY]["created"] and list(HOOK_AT) in data[RECORD_KEY]["created"]
        apply_change(plan_restore(path))
        restored = json.loads(path.read_text())
        assert restored == {"permissions": {"allow": ["Bash(ls)"]}, "theme": "dark"}
        assert list(restored) == ["permissions", "theme"]

    def test_a_second_swap_replaces_its_own_hook_and_no_other(self, tmp_path: Path) -> None:
        """Swapped again for another database: one memsync hook, the new one; a memsync hook the
        user wrote themselves is theirs and stays."""
        path = tmp_path / "settings.json"
        text = json.dumps(THEIR_HOOKS, indent=2) + "\n"
        path.write_text(text)
        first, second = inject_hook(tmp_path / "a", tmp_path / "a.db"), inject_hook(tmp_path / "b", tmp_path / "b.db")
        apply_change(plan_swap(path, first))
        change = plan_swap(path, second)
        assert [s.action for s in change.steps] == ["remove", "remove", "add", "add", "record"]  # both entries
        apply_change(change)
        data = json.loads(path.read_text())
        assert data["hooks"]["UserPromptSubmit"] == [*THEIR_HOOKS["hooks"]["UserPromptSubmit"], second]
        assert data["hooks"]["SessionStart"] == [*THEIR_HOOKS["hooks"]["SessionStart"], compact_entry(second)]
        assert recorded(data, HOOK_AT) == [second] and recorded(data, COMPACT_AT) == [compact_entry(second)]
        assert apply_change(plan_swap(path, second)) is False  # the same swap again changes nothing
        apply_change(plan_restore(path))
        assert path.read_text() == text

    def test_a_hook_entry_the_user_has_already_is_left_theirs(self, tmp_path: Path) -> None:
        hook = inject_hook(tmp_path / "data")
        path = tmp_path / "settings.json"
        path.write_text(json.dumps({"hooks": {"UserPromptSubmit": [hook]}}))
        apply_change(plan_swap(path, hook))
        data = json.loads(path.read_text())
        assert data["hooks"]["UserPromptSubmit"] == [hook]
        assert all(a["at"] != list(HOOK_AT) for a in data[RECORD_KEY]["added"])
        change = plan_restore(path)
        assert any("still holds a memsync hook that no swap recorded" in n for n in change.notes)
        apply_change(change)
        assert json.loads(path.read_text()) == {"hooks": {"UserPromptSubmit": [hook]}}

    def test_the_record_holds_no_object_claude_code_could_take_for_a_hook(self, tmp_path: Path) -> None:
        """Claude Code 2.1.257 and later apply nothing of a settings file with a hook entry outside
        ``hooks``: the record names the hook entry by its JSON text, never as an object."""
        path = tmp_path / "settings.json"
        path.write_text(json.dumps(THEIR_HOOKS))
        hook = inject_hook(tmp_path / "data")
        apply_change(plan_swap(path, hook))
        data = json.loads(path.read_text())
        lines = data[RECORD_KEY]["added"]
        assert all(not isinstance(v, dict | list) for line in lines for k, v in line.items() if k != "at"), lines
        assert {"at": list(HOOK_AT), "json": json.dumps(hook, sort_keys=True, ensure_ascii=False)} in lines
        assert record_misread_by_claude_code(data) is False

    def test_a_record_an_earlier_swap_wrote_is_undone_and_rewritten(self, tmp_path: Path) -> None:
        """A file an earlier memsync swapped (the hook entry recorded as itself): restore takes it all
        back; a swap again rewrites the record as JSON text, leaves the prompt hook as it was and adds
        the compaction entry (which that memsync did not have)."""
        hook = inject_hook(tmp_path / "data")
        path = tmp_path / "settings.json"
        path.write_text(json.dumps({"theme": "dark", **old_record(hook)}, indent=2))
        assert record_misread_by_claude_code(read_settings(path)) is True
        apply_change(plan_restore(path))
        assert json.loads(path.read_text()) == {"theme": "dark"}

        path.write_text(json.dumps({"theme": "dark", **old_record(hook)}, indent=2))
        change = plan_swap(path, hook)
        assert [s.action for s in change.steps if s.at == HOOK_AT] == []  # the hook is there already
        assert any("rewrites swap's record" in n for n in change.notes), change.notes  # --dry-run prints it
        assert apply_change(change) is True
        data = json.loads(path.read_text())
        assert data["hooks"] == {"UserPromptSubmit": [hook], "SessionStart": [compact_entry(hook)]}
        assert recorded(data) == [hook, *DENY_RULES, compact_entry(hook)]
        assert record_misread_by_claude_code(data) is False
        apply_change(plan_restore(path))
        assert json.loads(path.read_text()) == {"theme": "dark"}

    def test_an_earlier_record_of_another_hook_is_replaced(self, tmp_path: Path) -> None:
        """Swapped again for another data directory over a record in the earlier form: the earlier
        hook (read from that form) goes, the new one comes, the record is text."""
        first, second = inject_hook(tmp_path / "a"), inject_hook(tmp_path / "b")
        path = tmp_path / "settings.json"
        path.write_text(json.dumps(old_record(first)))
        apply_change(plan_swap(path, second))
        data = json.loads(path.read_text())
        assert data["hooks"]["UserPromptSubmit"] == [second] and recorded(data, HOOK_AT) == [second]
        assert record_misread_by_claude_code(data) is False

    def test_status_says_when_claude_code_would_not_read_the_file(self, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
        """A settings file with the earlier record: status says Claude Code applies none of it (the
        hook is not active, whatever the worker does) and what to run; after swap, it no longer does."""
        config = tmp_path / "claude-config"
        config.mkdir()
        data_dir = tmp_path / "data"
        (config / "settings.json").write_text(json.dumps(old_record(inject_hook(data_dir))))
        db = tmp_path / "claude-mem.db"
        make_db(db, mixed_records(1))
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))

        def injection() -> dict[str, Any]:
            result = CliRunner().invoke(main, ["status", "--json", "--db", str(db), "--data-dir", str(data_dir)],
                                        catch_exceptions=False)
            return dict(json.loads(result.stdout)["injection"])

        before = injection()
        assert before["installed"] is True and before["settings_misread"] is True, before
        assert before["active"] is False and "installed, not applied by Claude Code 2.1.257" in before["line"]
        assert "run `memsync claude-code swap` again" in before["line"], before
        assert before["compaction_hook"] is False and "no compaction hook" in before["line"], before
        apply_change(plan_swap(config / "settings.json", inject_hook(data_dir)))
        after = injection()
        assert after["settings_misread"] is False and "swap` again" not in after["line"], after
        assert after["compaction_hook"] is True
        # A file swapped after the record's fix but before the compaction entry: that alone is said.
        (config / "settings.json").write_text(json.dumps({"hooks": {"UserPromptSubmit": [inject_hook(data_dir)]}}))
        earlier = injection()
        assert earlier["installed"] is True and earlier["settings_misread"] is False, earlier
        assert earlier["compaction_hook"] is False and "no compaction hook" in earlier["line"], earlier
        assert "run `memsync claude-code swap` again to add it" in earlier["line"], earlier

    def test_hook_installed_says_whether_the_file_holds_it(self, tmp_path: Path) -> None:
        path = tmp_path / "settings.json"
        assert hook_installed(path) is False  # no file
        path.write_text(json.dumps(THEIR_HOOKS))
        assert hook_installed(path) is False  # "/opt/memsync claude-code inject" names no data directory
        apply_change(plan_swap(path, inject_hook(tmp_path / "data")))
        assert hook_installed(path) is True
        assert hook_installed(path, tmp_path / "data") is True
        assert hook_installed(path, tmp_path / "other") is False
        apply_change(plan_restore(path))
        assert hook_installed(path) is False
        path.write_text("{not json")
        assert hook_installed(path) is False

    def test_the_command_line_survives_the_shell(self, tmp_path: Path) -> None:
        """Claude Code runs the command through a shell: paths with spaces, quotes and $ reach the
        client as they were, whatever the session's folder."""
        odd = tmp_path / "it's a $HOME `dir`"
        odd.mkdir()
        fake = odd / "memsync"
        fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
        fake.chmod(0o755)
        target = InjectTarget(odd / "data", odd / "claude-mem.db", odd / "memsync.toml")
        command = inject_command(fake, target)
        assert parse_inject_command(command) == target
        done = subprocess.run(["/bin/sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert json.loads(done.stdout) == ["claude-code", "inject", "--data-dir", str(target.data_dir),
                                           "--db", str(target.db), "--config", str(target.config)]
        entry = hook_entry(command)
        assert entry["hooks"][0]["timeout"] == HOOK_TIMEOUT_S and 1 < HOOK_TIMEOUT_S <= 10

    def test_claude_mems_own_injection_is_found_where_it_is_turned_on(self, tmp_path: Path) -> None:
        home = tmp_path / "home"
        env = {"HOME": str(home)}
        assert claude_mem_injection({}, env) is None  # off by default
        (home / ".claude-mem").mkdir(parents=True)
        (home / ".claude-mem" / "settings.json").write_text(json.dumps({SEMANTIC_INJECT_KEY: "true"}))
        assert f"{home / '.claude-mem' / 'settings.json'}: set \"{SEMANTIC_INJECT_KEY}\": \"false\"" in \
            str(claude_mem_injection({}, env))
        assert claude_mem_injection({}, {**env, SEMANTIC_INJECT_KEY: "false"}) is None  # the environment wins
        assert "environment" in str(claude_mem_injection({}, {"HOME": str(tmp_path), SEMANTIC_INJECT_KEY: "TRUE"}))
        in_claude = claude_mem_injection({"env": {SEMANTIC_INJECT_KEY: "true"}}, {"HOME": str(tmp_path)})
        assert "env object of Claude Code's settings" in str(in_claude)
        assert claude_mem_injection({"env": {SEMANTIC_INJECT_KEY: "0"}}, env) is None


def swap_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str,
                    **env: str) -> tuple[int, str, str, Path]:
    """``memsync claude-code swap`` run in this process (for what a subprocess cannot patch), with
    Claude Code's settings in CLAUDE_CONFIG_DIR and a stand-in ``claude``; the settings file."""
    config = tmp_path / "claude-config"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    claude_cmd, _ = stand_in_claude(tmp_path)
    db = tmp_path / "claude-mem.db"
    if not db.exists():
        make_db(db, mixed_records(1))
    result = CliRunner().invoke(main, ["claude-code", "swap", "--claude", str(claude_cmd), "--db", str(db),
                                       "--data-dir", str(tmp_path / "data"), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr, config / "settings.json"


class TestSwapInstallsTheHook:
    """The command: the hook goes into the settings file the deny rules use, whatever --scope is;
    the notes it prints beside it."""

    @pytest.mark.parametrize("scope", ["user", "local", "project"])
    def test_the_hook_goes_into_claude_config_dir_whatever_the_scope(
            self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scope: str) -> None:
        code, out, _, settings = swap_in_process(tmp_path, monkeypatch, "--scope", scope)
        assert code == 0, out
        assert hook_installed(settings, tmp_path / "data")
        data = json.loads(settings.read_text())
        assert data["permissions"]["deny"] == list(DENY_RULES)
        command = data["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
        assert parse_inject_command(command) == InjectTarget(tmp_path / "data", tmp_path / "claude-mem.db")
        assert shlex.split(command)[0] == MEMSYNC  # the absolute executable: hooks do not see the venv
        assert not (tmp_path / "home" / ".claude").exists()  # CLAUDE_CONFIG_DIR, not ~/.claude

    def test_on_windows_no_hook_and_it_says_so(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(sys, "platform", "win32")
        assert hook_supported() is False
        code, out, err, settings = swap_in_process(tmp_path, monkeypatch, "--dry-run")
        assert code == 0, err
        assert "UserPromptSubmit" not in out and "no per-prompt memory hook on Windows" in err
        assert "would add to permissions.deny" in out  # the search tools are swapped all the same

    def test_it_warns_when_no_worker_runs_for_the_database(self, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
        code, _, err, _ = swap_in_process(tmp_path, monkeypatch, "--dry-run")
        assert code == 0
        assert f"no memsync worker is running for {tmp_path / 'claude-mem.db'}" in err
        assert f"start `memsync worker --db {tmp_path / 'claude-mem.db'} --data-dir {tmp_path / 'data'}`" in err
        # A worker up for this database (its status written as a running worker writes it): no warning.
        (tmp_path / "data").mkdir()
        WorkerStatus(pid=os.getpid(), started_at_ms=int(time.time() * 1000), mode="poll",
                     db=str(tmp_path / "claude-mem.db"), heartbeat_ms=int(time.time() * 1000)).write(tmp_path / "data")
        code, _, err, _ = swap_in_process(tmp_path, monkeypatch, "--dry-run")
        assert code == 0 and "no memsync worker" not in err, err

    @pytest.mark.parametrize(("env", "says"), [
        ({"MEMSYNC_INJECT": "false"}, "inject is off"),
        ({"MEMSYNC_CHROMA_MODE": "embedded"}, "answers no prompt with these settings: chroma_mode=embedded"),
        ({"MEMSYNC_EMBEDDING_PROVIDER": "local-multilingual"}, "not calibrated for embedding_provider=local-multi"),
    ])
    def test_it_says_when_the_worker_would_answer_no_prompt(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            env: dict[str, str], says: str) -> None:
        code, _, err, _ = swap_in_process(tmp_path, monkeypatch, "--dry-run", **env)
        assert code == 0 and says in err, err
        assert "no memsync worker" not in err  # starting one would not help

    def test_status_says_inactive_and_why_even_beside_a_stale_socket(self, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
        """A worker killed earlier left its socket; the worker now up cannot answer with these settings."""
        data = tmp_path / "data"
        data.mkdir()
        db = tmp_path / "claude-mem.db"
        make_db(db, mixed_records(1))
        WorkerStatus(pid=os.getpid(), started_at_ms=int(time.time() * 1000), mode="poll", db=str(db),
                     heartbeat_ms=int(time.time() * 1000)).write(data)
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(socket_path(data)))
        stale.close()  # the socket file stays, nothing listens
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
        monkeypatch.setenv("MEMSYNC_EMBEDDING_PROVIDER", "local-multilingual")
        result = CliRunner().invoke(main, ["status", "--json", "--db", str(db), "--data-dir", str(data)],
                                    catch_exceptions=False)
        injection = json.loads(result.stdout)["injection"]
        assert injection["active"] is False, injection
        assert "inactive: the injection decision is not calibrated" in injection["line"], injection

    def test_it_says_when_claude_code_runs_no_hooks(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        (tmp_path / "claude-config").mkdir()
        (tmp_path / "claude-config" / "settings.json").write_text('{"disableAllHooks": true}')
        code, _, err, settings = swap_in_process(tmp_path, monkeypatch)
        assert code == 0 and f"{settings} sets disableAllHooks" in err
        assert hook_installed(settings)  # installed all the same: it runs once the user turns hooks back on

    def test_it_says_when_claude_mem_injects_too(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        code, _, err, _ = swap_in_process(tmp_path, monkeypatch, "--dry-run", CLAUDE_MEM_SEMANTIC_INJECT="true")
        assert code == 0
        assert "claude-mem's own per-prompt injection is on" in err and "both would inject" in err
        assert f"unset {SEMANTIC_INJECT_KEY}" in err
