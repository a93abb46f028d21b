"""The agent's database on a read-only file system (a read-only bind mount in a private mount
namespace): memsync reads it, syncs it, searches it and keeps up with later writes, and the
operating system itself refuses any write through that path."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import mixed_records
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MEMSYNC = str(Path(sys.executable).parent / "memsync")

# Runs inside `unshare -m`: the bind mount exists only in that namespace and vanishes with it.
DRIVER = r'''
import json, os, sqlite3, subprocess, sys, time
from pathlib import Path
memsync, src, ro, data = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
subprocess.run(["mount", "--bind", str(src), str(ro)], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
env.update(MEMSYNC_DB=str(ro / "claude-mem.db"), MEMSYNC_DATA_DIR=str(data), MEMSYNC_CHROMA_MODE="embedded")
out = {}
def run(*args):
    r = subprocess.run([memsync, *args], env=env, capture_output=True, text=True, timeout=300)
    return [r.returncode, r.stdout, r.stderr[-2000:]]
def status(deadline):
    while True:
        code, stdout, stderr = run("status", "--json")
        if code == 0:
            return json.loads(stdout)
        assert time.monotonic() < deadline, stderr
        time.sleep(0.2)
try:
    with open(ro / "claude-mem.db", "r+b"):
        out["os_write"] = "allowed"
except OSError as exc:
    out["os_write"] = exc.strerror
out["resync"] = run("resync", "--json")
out["verify"] = run("verify", "--json")
out["search"] = run("search", "caching", "--json", "--window-days", "0")
out["sha256_before_writer"] = __import__("hashlib").sha256((src / "claude-mem.db").read_bytes()).hexdigest()
out["side_files"] = sorted(p.name for p in src.iterdir())
# The worker on the snapshot, while rows are written through the writable path, by a writer that
# keeps its connection open (as claude-mem's own worker does).
worker = subprocess.Popen([memsync, "worker", "--poll-interval", "0.2"], env=env, stdout=subprocess.DEVNULL,
                          stderr=open(data / "worker.log", "w"))
try:
    deadline = time.monotonic() + 120
    while status(deadline)["worker"].get("up") is not True:
        assert time.monotonic() < deadline and worker.poll() is None, (data / "worker.log").read_text()[-2000:]
        time.sleep(0.2)
    writer = sqlite3.connect(src / "claude-mem.db")
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("INSERT INTO user_prompts (session_db_id, content_session_id, prompt_number, prompt_text, "
                   "created_at, created_at_epoch) SELECT session_db_id, content_session_id, 99, "
                   "'written after the snapshot opened', created_at, created_at_epoch FROM user_prompts LIMIT 1")
    writer.commit()
    while True:
        now = status(deadline)
        prompts = now["totals"]["prompts"]
        if prompts["rows"] == prompts["synced_rows"] and now["pending_rows"] == 0 and prompts["rows"] > 6:
            break
        assert time.monotonic() < deadline and worker.poll() is None, (data / "worker.log").read_text()[-2000:]
        time.sleep(0.2)
    out["after_write"] = prompts
    writer.close()
finally:
    worker.terminate()
    out["worker_exit"] = worker.wait(60)
out["verify_after"] = run("verify", "--json")
print(json.dumps(out))
'''


def test_a_read_only_database_is_read_synced_searched_and_followed(tmp_path: Path) -> None:
    if not shutil.which("unshare") or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs `unshare -m` (a private mount namespace) to make a read-only bind mount")
    src, ro, data = tmp_path / "src", tmp_path / "ro", tmp_path / "data"
    ro.mkdir()
    data.mkdir()
    db = written_db(src / "claude-mem.db", mixed_records(6))
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, str(driver), MEMSYNC,
                        str(src), str(ro), str(data)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])

    assert out["os_write"] == "Read-only file system"  # the OS refuses: not only memsync's politeness
    assert out["resync"][0] == 0 and json.loads(out["resync"][1])["added"] > 0, out["resync"]
    assert out["verify"][0] == 0 and json.loads(out["verify"][1])["missing"] == 0, out["verify"]
    found = json.loads(out["search"][1])
    assert out["search"][0] == 0 and found["mode"] == "hybrid" and found["results"], out["search"]
    assert out["after_write"]["rows"] == 7 and out["after_write"]["synced_rows"] == 7
    assert out["worker_exit"] == 0
    assert out["verify_after"][0] == 0, out["verify_after"]
    # Until the test's own writer ran, the file was byte for byte the same and had no side files.
    assert out["sha256_before_writer"] == before and out["side_files"] == ["claude-mem.db"]
