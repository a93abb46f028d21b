"""The injection channel's rules: the socket path (and its short form), the private directory
check, the wire protocol, the inject setting as the client reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsync import inject_client
from memsync.config import inject_channel as ch
from memsync.config.formats import database_owner
from memsync.config.settings import DEFAULT_CONFIG_FILE, Settings


class TestSocketPath:
    def test_a_short_data_dir_holds_its_own_socket(self, tmp_path: Path) -> None:
        assert ch.socket_path(tmp_path / "d") == tmp_path / "d" / "inject.sock"

    def test_a_long_data_dir_gets_a_short_path_by_the_documented_rule(self, tmp_path: Path) -> None:
        long_dir = tmp_path / ("x" * 60) / ("y" * 60)
        path = ch.socket_path(long_dir)
        assert path.parent == Path("/tmp") / f"memsync-{os.getuid()}"
        assert len(os.fsencode(str(path))) <= ch.MAX_SOCKET_PATH
        assert path == ch.socket_path(long_dir)  # the client and the worker find the same
        assert path != ch.socket_path(long_dir / "z")  # one per data directory

    def test_the_limit_is_on_the_whole_path_in_bytes(self, tmp_path: Path) -> None:
        # Non-ASCII names count in bytes, as the kernel counts them.
        room = ch.MAX_SOCKET_PATH - len(os.fsencode(str(tmp_path))) - len("/inject.sock") - 1
        fits, over = tmp_path / ("é" * (room // 2)), tmp_path / ("é" * (room // 2 + 1))
        assert ch.socket_path(fits).parent == fits
        assert ch.socket_path(over).parent == ch.short_dir()


class TestPrivateDir:
    def test_created_0700(self, tmp_path: Path) -> None:
        d = tmp_path / "s"
        ch.check_private_dir(d, create=True)
        assert d.stat().st_mode & 0o777 == 0o700

    def test_one_others_can_enter_is_refused(self, tmp_path: Path) -> None:
        d = tmp_path / "s"
        d.mkdir(mode=0o755)
        d.chmod(0o755)
        with pytest.raises(ch.ChannelError, match="not a private directory"):
            ch.check_private_dir(d, create=True)

    def test_a_symlink_is_refused(self, tmp_path: Path) -> None:
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        (tmp_path / "link").symlink_to(real)
        with pytest.raises(ch.ChannelError):
            ch.check_private_dir(tmp_path / "link", create=False)


class TestProtocol:
    def test_request_carries_the_payload_and_version(self) -> None:
        line = ch.request_line({"prompt": "héllo", "hook_event_name": "UserPromptSubmit"})
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert ch.parse_request(line) == {"prompt": "héllo", "hook_event_name": "UserPromptSubmit"}

    @pytest.mark.parametrize("line", [b"nope", b"[1]", b'{"prompt": "x"}', b'{"v": 2}', b"\xff\xfe"])
    def test_bad_requests_are_refused(self, line: bytes) -> None:
        with pytest.raises(ch.ChannelError):
            ch.parse_request(line)

    def test_replies_round_trip(self) -> None:
        for reply in (ch.Reply("ctx", ["#1", "#S2"], 42), ch.Reply(), ch.Reply(error="boom")):
            assert ch.Reply.parse(reply.line()) == reply
        assert ch.Reply.parse(b'{"context": "", "refs": [], "tokens": 0}').context is None

    def test_a_reply_of_the_wrong_shape_is_refused(self) -> None:
        with pytest.raises(ch.ChannelError):
            ch.Reply.parse(b'{"context": 3}')

    def test_hook_output_is_claude_codes_shape(self) -> None:
        import json

        assert json.loads(ch.hook_output("m")) == {
            "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "m"}}


@pytest.mark.parametrize(("raw", "off"), [("false", True), ("0", True), ("OFF", True), ("no", True), ("N", True),
                                          (False, True), ("true", False), ("1", False), (True, False), (None, False)])
def test_inject_off_as_pydantic_reads_it(raw: object, off: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ch.setting_off(raw) is off
    if isinstance(raw, str):
        monkeypatch.setenv("MEMSYNC_INJECT", raw)
        assert Settings().inject is not off


def test_the_client_reads_the_settings_defaults_the_model_has() -> None:
    """The client cannot import the settings model (pydantic): its copies must stay equal."""
    assert inject_client.DEFAULT_CONFIG_FILE == DEFAULT_CONFIG_FILE
    assert Settings.model_fields["data_dir"].default == inject_client.DEFAULT_DATA_DIR
    assert (inject_client.DEMO_DIR, inject_client.DEMO_DB_NAME) == (database_owner.DEMO_DIR,
                                                                    database_owner.DEMO_DB_NAME)


def test_the_client_finds_the_data_directory_as_the_settings_do(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[memsync]\ndata_dir = "{tmp_path / "from-file"}"\ninject = false\n')
    config = inject_client._config(str(cfg))
    assert inject_client._data_dir({}, config) == tmp_path / "from-file"
    monkeypatch.setenv("MEMSYNC_DATA_DIR", str(tmp_path / "from-env"))
    assert inject_client._data_dir({}, config) == tmp_path / "from-env"
    assert inject_client._data_dir({"data_dir": str(tmp_path / "flag")}, config) == tmp_path / "flag"
    demo_db = str(tmp_path / "flag" / "demo" / "claude-mem.db")
    flag_and_demo = {"data_dir": str(tmp_path / "flag"), "db": demo_db}
    assert inject_client._data_dir(flag_and_demo, config) == tmp_path / "flag" / "demo"
    assert ch.setting_off(config.get("inject"))
    assert inject_client._options(["--data-dir=/a", "--db", "/b", "--other", "--config"]) == {
        "data_dir": "/a", "db": "/b", "config": ""}
