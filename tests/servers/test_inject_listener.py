"""The worker's injection listener, in this process with a stand-in answer function, and the real
hook client as a process against it: the hook output, the 1 s give-up, errors that never stop the
listener, the socket's mode and its stale and long-path rules, the served counts (no text)."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memsync.config.formats.inject_stats import served
from memsync.config.inject_channel import CLIENT_TIMEOUT_S, Reply, short_dir, socket_path
from memsync.config.settings import Settings
from memsync.servers.inject_listener import (
    SEARCH_TIMEOUT_MS,
    UNCALIBRATED_REASON,
    InjectListener,
    search_settings,
    start_listener,
    unavailable_reason,
)
from tests.cli.test_inject_client import PAYLOAD, run_hook

pytestmark = pytest.mark.slow  # the client runs as a process


class StandIn:
    """An answer function: records payloads, answers what it is told, can hang or fail."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.reply = Reply("<memsync-memory>\n- #12 2026-01-02 alpha: the login test was flaky\n</memsync-memory>",
                           ["#12"], 20)
        self.release = threading.Event()
        self.hang = False
        self.fail: BaseException | None = None
        self.delivered_refs: list[list[str]] = []
        # Set once a delivery is recorded: the listener records it after the reply is sent, so the
        # hook process can have exited before (the test waits on this, not on the client's exit).
        self.delivery = threading.Event()

    def __call__(self, payload: dict[str, Any]) -> Reply:
        self.payloads.append(payload)
        if self.hang:
            self.release.wait(10)
        if self.fail is not None:
            raise self.fail
        return self.reply

    def delivered(self, payload: dict[str, Any], reply: Reply) -> None:
        self.delivered_refs.append(reply.refs)
        self.delivery.set()


@pytest.fixture
def served_by(settings: Settings) -> Iterator[tuple[InjectListener, StandIn]]:
    answer = StandIn()
    listener = start_listener(settings, answer)
    assert listener is not None
    try:
        yield listener, answer
    finally:
        answer.release.set()
        listener.stop()


def test_a_prompt_gets_the_hook_output(served_by: tuple[InjectListener, StandIn], settings: Settings) -> None:
    listener, answer = served_by
    done, _ = run_hook(settings.data_dir, json.dumps(PAYLOAD).encode())
    assert done.returncode == 0 and done.stderr == b""
    assert json.loads(done.stdout) == {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                              "additionalContext": answer.reply.context}}
    assert answer.payloads == [PAYLOAD]  # the payload as Claude Code sent it
    assert answer.delivery.wait(10)
    assert answer.delivered_refs == [["#12"]]  # the hook read it: its refs are now the session's
    assert stat.S_IMODE(os.stat(listener.path).st_mode) == 0o600
    answer.reply = Reply()
    done, _ = run_hook(settings.data_dir, json.dumps(PAYLOAD).encode())
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    listener.stop()  # waits for every answer in flight: the count follows the reply's send
    counts = served(settings.data_dir, int(time.time() * 1000))
    assert (counts.prompts, counts.injected, counts.mean_tokens) == (2, 1, 20.0)
    assert "login" not in (settings.data_dir / "inject.json").read_text()  # counts only, no prompt text


def test_a_compaction_reaches_the_worker_and_is_no_prompt(served_by: tuple[InjectListener, StandIn],
                                                          settings: Settings) -> None:
    """Claude Code's SessionStart of a `/compact` (swap's second entry): passed on for the worker to
    forget what it injected in the session; nothing printed, not counted as a prompt served."""
    listener, answer = served_by
    compaction = {"session_id": "s1", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
                  "hook_event_name": "SessionStart", "source": "compact"}
    done, _ = run_hook(settings.data_dir, json.dumps(compaction).encode())
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")  # even with a context in the reply
    assert answer.payloads == [compaction]
    startup = {**compaction, "source": "startup"}  # another start of a session: not for memsync
    done, _ = run_hook(settings.data_dir, json.dumps(startup).encode())
    assert done.returncode == 0 and done.stdout == b"" and b"is not UserPromptSubmit" in done.stderr
    assert answer.payloads == [compaction]
    run_hook(settings.data_dir, json.dumps(PAYLOAD).encode())  # a prompt
    listener.stop()  # waits for every answer in flight, its count included
    assert served(settings.data_dir, int(time.time() * 1000)).prompts == 1


def test_the_client_forwards_what_only_the_hook_process_knows(
        served_by: tuple[InjectListener, StandIn], settings: Settings, tmp_path: Path) -> None:
    """claude-mem's project rule reads the hook's CLAUDE_PROJECT_DIR (not in the payload) before cwd,
    and the hook's own directory when the payload has no cwd."""
    _, answer = served_by
    without_cwd = {k: v for k, v in PAYLOAD.items() if k != "cwd"}
    done, _ = run_hook(settings.data_dir, json.dumps(without_cwd).encode(),
                       env={"CLAUDE_PROJECT_DIR": "/work/projects/alpha"}, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == b""
    assert answer.payloads == [{**without_cwd, "claude_project_dir": "/work/projects/alpha", "cwd": str(tmp_path)}]


def test_a_slow_worker_is_given_up_at_one_second(served_by: tuple[InjectListener, StandIn], settings: Settings) -> None:
    _, answer = served_by
    answer.hang = True
    done, wall = run_hook(settings.data_dir, json.dumps(PAYLOAD).encode())
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert CLIENT_TIMEOUT_S <= wall < 1.5


def test_an_answer_after_the_client_gave_up_is_not_counted_as_injected(
        served_by: tuple[InjectListener, StandIn], settings: Settings) -> None:
    """An answer ready after the client's 1 s (a slow embeddings endpoint) finds the socket closed:
    the prompt was asked, nothing was injected, and status must not say otherwise."""
    _, answer = served_by
    answer.hang = True
    done, _ = run_hook(settings.data_dir, json.dumps(PAYLOAD).encode())
    assert (done.returncode, done.stdout) == (0, b"")
    answer.release.set()  # the answer comes now, to a client that has gone
    deadline = time.monotonic() + 10
    while (counts := served(settings.data_dir, int(time.time() * 1000))).prompts == 0:
        assert time.monotonic() < deadline, "the late answer was not counted as a prompt"
        time.sleep(0.05)
    assert (counts.prompts, counts.injected) == (1, 0)
    assert answer.delivered_refs == []  # its memories stay free for the session's next prompt


def test_a_failing_answer_is_one_stderr_line_and_the_listener_goes_on(
        served_by: tuple[InjectListener, StandIn], settings: Settings) -> None:
    _, answer = served_by
    for failure in (RuntimeError("search exploded"), BaseException("a native panic")):
        answer.fail = failure
        done, _ = run_hook(settings.data_dir, json.dumps(PAYLOAD).encode())
        assert done.returncode == 0 and done.stdout == b""
        assert done.stderr.count(b"\n") == 1 and str(failure).encode() in done.stderr
    answer.fail = None
    done, _ = run_hook(settings.data_dir, json.dumps(PAYLOAD).encode())
    assert b"additionalContext" in done.stdout


def test_garbage_on_the_socket_gets_an_error_reply(served_by: tuple[InjectListener, StandIn]) -> None:
    listener, answer = served_by
    for line in (b"not json\n", b'{"v": 7}\n', b"\xff\n"):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(listener.path))
            s.sendall(line)
            s.shutdown(socket.SHUT_WR)
            assert "error" in json.loads(s.makefile("rb").readline())
    assert answer.payloads == []


def test_stale_socket_removed_live_one_and_other_files_left(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True)
    path = settings.data_dir / "inject.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # what a killed worker leaves
    first = InjectListener(settings, StandIn())
    assert first.start()
    try:
        second = InjectListener(settings, StandIn())  # a second worker of the same data directory
        assert not second.start()
        second.stop()
        assert path.exists()  # the running one's socket stays
    finally:
        first.stop()
    assert not path.exists()  # removed at exit
    path.write_text("not a socket")
    third = InjectListener(settings, StandIn())
    assert not third.start()  # refused and logged: the worker runs without injection
    third.stop()
    assert path.read_text() == "not a socket"


def test_a_failing_bind_leaves_the_worker_without_injection(settings: Settings) -> None:
    settings.data_dir.parent.mkdir(parents=True, exist_ok=True)
    settings.data_dir.write_text("")  # no directory to bind in (as a full or read-only disk refuses one)
    listener = InjectListener(settings, StandIn())
    assert not listener.start()
    listener.stop()


def test_a_long_data_dir_listens_on_the_short_path(tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 80) / ("e" * 40)
    settings = Settings(db=tmp_path / "claude-mem.db", data_dir=data_dir, chroma_mode="embedded")
    data_dir.mkdir(parents=True)
    answer = StandIn()
    listener = start_listener(settings, answer)
    assert listener is not None
    try:
        assert listener.path.parent == short_dir() and len(os.fsencode(str(listener.path))) <= 100
        assert stat.S_IMODE(short_dir().stat().st_mode) == 0o700
        done, _ = run_hook(data_dir, json.dumps(PAYLOAD).encode())
        assert b"additionalContext" in done.stdout
    finally:
        listener.stop()
    assert not listener.path.exists()


def test_inject_off_starts_no_listener(settings: Settings) -> None:
    assert start_listener(settings.model_copy(update={"inject": False}), StandIn()) is None


def test_embedded_chroma_starts_no_listener_that_would_race_the_worker_for_the_store(settings: Settings) -> None:
    """The real answer's Searcher would take the embedded store's one file lock from the worker."""
    assert settings.chroma_mode == "embedded"
    assert start_listener(settings) is None
    assert not socket_path(settings.data_dir).exists()


def test_an_uncalibrated_model_starts_no_listener(settings: Settings) -> None:
    """The multilingual model's similarities are high for anything: the decision's thresholds would
    let unrelated prompts through, so the worker answers none and says why."""
    multilingual = settings.model_copy(update={"chroma_mode": "managed", "embedding_provider": "local-multilingual"})
    assert unavailable_reason(multilingual) == UNCALIBRATED_REASON
    assert start_listener(multilingual) is None
    assert not socket_path(settings.data_dir).exists()
    assert unavailable_reason(settings.model_copy(update={"chroma_mode": "managed"})) is None


def test_the_prompts_search_gives_up_before_the_client_does(settings: Settings) -> None:
    """A vector side slower than the client's second (a slow embeddings endpoint) answers no prompt:
    the search takes the lexical answer (never injected) in time, and finds the endpoint failing."""
    assert SEARCH_TIMEOUT_MS < CLIENT_TIMEOUT_S * 1000
    assert search_settings(settings).search_timeout_ms == min(settings.search_timeout_ms, SEARCH_TIMEOUT_MS)
    quick = settings.model_copy(update={"search_timeout_ms": 300})
    assert search_settings(quick).search_timeout_ms == 300  # a shorter deadline of the user's stays
    assert search_settings(settings).db == settings.db


def test_a_stop_waits_for_the_warm_up_step_in_flight(settings: Settings) -> None:
    """The warm-up runs native code (the model, the text index) on a daemon thread: a stop that
    returned while it ran let the process exit under it, and the worker died of an abort (-6)."""

    class Warming(StandIn):
        def __init__(self) -> None:
            super().__init__()
            self.entered, self.finished = threading.Event(), threading.Event()

        def warm(self, stop: threading.Event) -> None:
            self.entered.set()
            self.release.wait(1.0)  # a step that does not look at ``stop`` (a model load, a search)
            self.finished.set()

    answer = Warming()
    listener = start_listener(settings, answer)
    assert listener is not None and answer.entered.wait(10)
    listener.stop()
    assert answer.finished.is_set()
