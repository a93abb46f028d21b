"""Which port a Chroma server is on: ``chroma_port`` unset (0) means a free port in managed mode,
recorded in ``DATA_DIR/chroma-server.json``, and 8765 in http mode; a port that is set is used as
given. Real `chroma run` servers."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.chroma import collections as stores
from memsync.chroma import server as chroma_server
from memsync.chroma.server import INFO_FILE, ManagedServer, ServerInfo, heartbeat
from memsync.config.errors import ConfigError
from memsync.config.settings import HTTP_DEFAULT_PORT, Settings, load_settings
from tests.conftest import free_port, kill_managed_server


@pytest.fixture
def managed(tmp_path: Path) -> Iterator[Settings]:
    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="managed")
    yield s
    kill_managed_server(s.data_dir)


def test_port_default_per_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().chroma_port == 0  # managed: a free port
    assert Settings(chroma_mode="http").chroma_port == HTTP_DEFAULT_PORT == 8765  # existing http configs
    assert Settings(chroma_mode="http", chroma_port=9001).chroma_port == 9001
    assert Settings(chroma_port=9001).chroma_port == 9001
    cfg = tmp_path / "memsync.toml"
    cfg.write_text('chroma_mode = "http"\n')
    loaded = load_settings(config_file=cfg)
    assert loaded.settings.chroma_port == 8765 and loaded.origins["chroma_port"] == "default"
    monkeypatch.setenv("MEMSYNC_CHROMA_PORT", "9002")
    assert load_settings(config_file=cfg).settings.chroma_port == 9002
    assert Settings().chroma_port == 9002
    with pytest.raises(ValueError, match="chroma_port"):
        Settings(chroma_port=-1)


def test_http_reader_uses_8765_by_default() -> None:
    assert stores.reader_address(Settings(chroma_mode="http")) == ("127.0.0.1", 8765)
    # a copy that switched the mode without validation still gets the http default
    assert stores.reader_address(Settings().model_copy(update={"chroma_mode": "http"})) == ("127.0.0.1", 8765)


@pytest.mark.slow
def test_unset_port_takes_a_free_one_kept_on_adoption_and_reused_after_a_crash(managed: Settings) -> None:
    first = ManagedServer(managed)
    info = first.ensure()
    try:
        assert first.started and info.port not in (0, HTTP_DEFAULT_PORT) and heartbeat(info.host, info.port)
        assert ServerInfo.read(managed.data_dir) == info
        assert stores.reader_address(managed) == (info.host, info.port)
        adopter = ManagedServer(managed)
        assert adopter.ensure() == info and not adopter.started  # adopted on its recorded port
    finally:
        first.stop()
    assert not (managed.data_dir / INFO_FILE).exists()
    # A crash leaves the record of a dead server: the next start takes the same port while it is
    # free, so readers that hold it keep working.
    ServerInfo(info.pid, info.host, info.port, info.path, owner=info.owner).write(managed.data_dir)
    again = ManagedServer(managed)
    try:
        assert again.ensure().port == info.port and again.started
    finally:
        again.stop()


@pytest.mark.slow
def test_a_free_port_taken_before_the_server_binds_it_is_replaced(managed: Settings,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = int(taken.getsockname()[1])
        real, handed = chroma_server.free_port, list[int]()

        def first_busy(host: str) -> int:
            handed.append(busy if not handed else real(host))
            return handed[-1]

        monkeypatch.setattr(chroma_server, "free_port", first_busy)
        server = ManagedServer(managed)
        try:
            info = server.ensure()
            assert handed[0] == busy and info.port == handed[1] != busy and heartbeat(info.host, info.port)
        finally:
            server.stop()


@pytest.mark.slow
def test_an_explicit_port_is_used_as_given(managed: Settings) -> None:
    port = free_port()
    s = managed.model_copy(update={"chroma_port": port})
    server = ManagedServer(s)
    try:
        assert server.ensure().port == port and ServerInfo.read(s.data_dir).port == port  # type: ignore[union-attr]
        assert heartbeat("127.0.0.1", port)
    finally:
        server.stop()


@pytest.mark.slow
def test_a_fixed_port_moves_a_running_server_nobody_answers_for(managed: Settings) -> None:
    """A server left on a free port (its worker stopped before upstream_store or chroma_port was
    set) is moved to the fixed port, where claude-mem looks for it."""
    first = ManagedServer(managed)
    info = first.ensure()
    gone = subprocess.Popen(["true"])
    gone.wait()
    ServerInfo(info.pid, info.host, info.port, info.path, owner=gone.pid).write(managed.data_dir)
    fixed = managed.model_copy(update={"chroma_port": free_port()})
    mover = ManagedServer(fixed)
    try:
        moved = mover.ensure()
        assert moved.port == fixed.chroma_port and mover.started and heartbeat(moved.host, moved.port)
        assert not heartbeat(info.host, info.port, timeout_s=0.5)
    finally:
        mover.stop()
        first.stop()


@pytest.mark.slow
def test_a_fixed_port_never_takes_a_server_from_a_live_memsync_process(managed: Settings) -> None:
    first = ManagedServer(managed)
    info = first.ensure()
    owner = subprocess.Popen(["sleep", "60"])  # stands for a live `memsync serve` that started it
    try:
        ServerInfo(info.pid, info.host, info.port, info.path, owner=owner.pid).write(managed.data_dir)
        fixed = managed.model_copy(update={"chroma_port": free_port()})
        with pytest.raises(ConfigError, match=f"started by memsync process {owner.pid}"):
            ManagedServer(fixed).ensure()
        assert heartbeat(info.host, info.port)  # left running
    finally:
        owner.kill()
        owner.wait()
        first.stop()


def test_a_fixed_port_held_by_another_program_is_a_clear_error(managed: Settings) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = int(taken.getsockname()[1])
        s = managed.model_copy(update={"chroma_port": port, "upstream_store": True})
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is taken by another program.*"
                                              "CLAUDE_MEM_CHROMA_PORT"):
            ManagedServer(s).ensure()
