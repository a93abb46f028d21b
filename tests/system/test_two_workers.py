"""Two data directories, two workers, side by side: with ``chroma_port`` unset each managed server
takes a free port and records it in ``DATA_DIR/chroma-server.json``, where readers (verify, search)
find it. Real `memsync worker` processes and real `chroma run` servers."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsync.config.chroma.server import INFO_FILE, ServerInfo, heartbeat, pid_alive
from memsync.config.settings import Settings
from memsync.search import Mode, Searcher, SearchRequest
from memsync.worker.verify import verify
from tests.conftest import mixed_records
from tests.system.test_e2e import env_for
from tests.system.test_worker import WorkerProcess
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Settings, Settings]]:
    """Two agents' databases (10 and 20 rows of each kind) with a data directory each; managed
    mode, chroma_port not set."""
    pair = tuple(Settings(db=tmp_path / name / "claude-mem.db", data_dir=tmp_path / name / "data",
                          chroma_mode="managed") for name in ("a", "b"))
    for s, n in zip(pair, (10, 20), strict=True):
        written_db(s.db, mixed_records(n))
    yield pair[0], pair[1]
    for s in pair:  # never leave a server behind, even when the test failed
        info = ServerInfo.read(s.data_dir)
        if info and pid_alive(info.pid):
            os.kill(info.pid, signal.SIGKILL)


def test_two_workers_on_two_data_dirs_run_at_once(two: tuple[Settings, Settings]) -> None:
    assert all(s.chroma_port == 0 for s in two)
    assert all(env_for(s)["MEMSYNC_CHROMA_PORT"] == "0" for s in two)  # what the workers are given
    workers = [WorkerProcess(s) for s in two]
    try:
        for w in workers:
            w.wait_reconciles(1, timeout=240)
            w.wait_caught_up()
        infos = [i for i in (ServerInfo.read(s.data_dir) for s in two) if i is not None]
        assert len(infos) == 2
        assert infos[0].port != infos[1].port, "each server took its own free port"
        assert all(i.owner == w.proc.pid and heartbeat(i.host, i.port) for i, w in zip(infos, workers, strict=True))
        assert [Path(i.path) for i in infos] == [s.chroma_dir for s in two]
        assert all(w.status().get("mode") == "managed" and w.proc.poll() is None for w in workers)
        # Each worker synced its own database into its own store; readers find the port in the record.
        reports = [verify(s) for s in two]
        assert all(r.clean for r in reports) and [r.expected for r in reports] == [70, 140]
        assert [r.in_chroma for r in reports] == [70, 140]
        for s in two:
            engine = Searcher(s)
            try:
                resp = engine.search(SearchRequest(query="Narrative about caching", window_days=0))
                assert resp.mode is Mode.HYBRID, resp.reason
            finally:
                engine.close()
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0]
    assert all(not pid_alive(i.pid) for i in infos)  # each worker stopped the server it started
    assert all(not (s.data_dir / INFO_FILE).exists() for s in two)
