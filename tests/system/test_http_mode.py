"""Past one machine: `http` mode against a separately started `chroma run` (the same API as
Chroma's distributed deployment and Chroma Cloud). The worker writes to it while a writer process
appends rows, and two `memsync serve` processes read from it at the same time."""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from memsync.chroma.server import ServerInfo, pid_alive
from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from tests.conftest import free_port, mixed_records
from tests.servers.conftest import MEMSYNC, ROOT, HttpServer, server_env
from tests.system.test_worker import write_rows
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow
LAST_OBSERVATION = 50  # 20 from mixed_records, then every tenth of the 300 written rows


def test_worker_and_two_search_servers_share_one_remote_chroma(tmp_path: Path) -> None:
    port = free_port()
    # The `chroma` command itself, as a user starts their own server (memsync's managed server runs
    # the same Rust CLI without the script's imports: chroma_cli).
    chroma = subprocess.Popen([str(Path(sys.executable).parent / "chroma"), "run", "--path", str(tmp_path / "remote"),
                               "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http", chroma_port=port,
                 chroma_start_timeout_s=60)
    written_db(s.db, mixed_records(20))
    worker: subprocess.Popen[bytes] | None = None
    servers: list[HttpServer] = []
    s.data_dir.mkdir(parents=True)
    log = (s.data_dir / "worker.log").open("w")
    try:
        from memsync.chroma.server import ManagedServer

        assert ManagedServer(s)._wait_healthy(ServerInfo(chroma.pid, "127.0.0.1", port, ""), chroma)
        worker = subprocess.Popen([MEMSYNC, "worker", "--poll-interval", "0.2"], env=server_env(s), cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=log)
        # The search servers have their own data directories: nothing is shared but the database
        # file and the remote Chroma (as with servers on other machines reading one deployment).
        for i in range(2):
            reader = s.model_copy(update={"data_dir": tmp_path / f"reader{i}"})
            # Hundreds of searches while the worker writes to the same server: on a loaded 2-core
            # machine one Chroma call past the default 1.5 s deadline would answer lexically.
            servers.append(HttpServer(reader, MEMSYNC_DATA_DIR=str(reader.data_dir),
                                      MEMSYNC_SEARCH_TIMEOUT_MS="20000").__enter__())
        writer = write_rows(s.db, 300, 10, start=5000)

        def read_until_synced(server: HttpServer) -> tuple[int, set[str]]:
            """Search continuously until the last written observation has its vectors in the remote
            store (similar() answers from them, not from its lexical fallback); modes seen."""
            modes: set[str] = set()
            deadline = time.monotonic() + 180
            n = 0
            while time.monotonic() < deadline:
                r = httpx.get(server.url + "/api/search", params={"q": "problem 5299", "window_days": 0, "limit": 3},
                              timeout=60)
                assert r.status_code == 200, r.text
                modes.add(r.json()["mode"])
                n += 1
                if writer.poll() is not None:
                    sim = httpx.get(server.url + f"/api/similar/{LAST_OBSERVATION}", timeout=60)
                    if sim.status_code == 200 and sim.json()["mode"] == "semantic":
                        return n, modes
            raise AssertionError(f"{server.url}: the last row never reached the remote store; modes {modes}")

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(read_until_synced, servers))
        assert writer.wait(60) == 0
        for n, modes in results:
            assert n >= 1 and modes == {"hybrid"}, modes  # both read the remote store all along

        # Both servers answer from the same remote vectors: the same similar-rows list.
        sims = [httpx.get(srv.url + f"/api/similar/{LAST_OBSERVATION}", params={"limit": 5}, timeout=60).json()
                for srv in servers]
        assert sims[0]["mode"] == "semantic" and sims[0]["results"] == sims[1]["results"]

        deadline = time.monotonic() + 120
        while not verify(s).clean:  # the worker catches up with the last batch; poll with a deadline
            assert time.monotonic() < deadline and worker.poll() is None, (s.data_dir / "worker.log").read_text()
            time.sleep(0.5)
        report = verify(s)
        assert report.clean and report.duplicates == 0
    finally:
        # Stop everything before asserting on how it stopped: a failed assertion here must not
        # leave the Chroma server running (it once did, when the worker had crashed).
        for srv in servers:
            srv.close()
        worker_code = None
        if worker is not None:
            worker.terminate()
            worker_code = worker.wait(60)
        chroma_survived = chroma.poll() is None
        chroma.terminate()
        chroma.wait(30)
        log.close()
    assert worker_code == 0, (s.data_dir / "worker.log").read_text()[-3000:]
    assert chroma_survived  # http mode never stops a server it did not start
    assert not pid_alive(chroma.pid) and all(srv.proc.poll() is not None for srv in servers)
