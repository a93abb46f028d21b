"""One data directory, one database, with real `memsync` processes in both orders: a worker
following shop.db keeps its store while a resync, status, search or second worker given another
database refuses with one line naming both (and `memsync demo` works in the demo's own data
directory); a directory a resync recorded refuses a worker of another database."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from memsync.commands.db import make_demo_db
from memsync.config.formats.database_owner import DatabaseIdentity, demo_db_path, recorded
from memsync.config.settings import Settings
from memsync.worker.checks.verify import verify
from tests.conftest import mixed_records
from tests.system.test_e2e import MEMSYNC, ROOT, env_for, memsync
from tests.system.test_worker import WorkerProcess
from tests.upstream.written import written_db

pytestmark = pytest.mark.slow


def refused(result: subprocess.CompletedProcess[str], owner: Path, other: Path, data_dir: Path) -> None:
    """Exit 2 and one line: the directory, both databases, and what to do."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert (f"the data directory {data_dir} belongs to the database {owner.resolve()}, not {other.resolve()}"
            in lines[0] and "--data-dir" in lines[0]), lines[0]


@pytest.fixture
def shop(tmp_path: Path) -> Settings:
    s = Settings(db=tmp_path / "shop.db", data_dir=tmp_path / "data", chroma_mode="embedded")
    written_db(s.db, mixed_records(4))
    return s


def test_a_worker_keeps_its_store_while_commands_of_another_database_refuse(shop: Settings, tmp_path: Path) -> None:
    other = written_db(tmp_path / "other.db", mixed_records(2, projects=("gamma",)))
    as_other = shop.model_copy(update={"db": other})
    worker = WorkerProcess(shop)
    try:
        worker.wait_reconciles(1)
        for args in (["resync"], ["status"], ["status", "--check"], ["verify"], ["search", "flaky"]):
            refused(memsync(as_other, *args), shop.db, other, shop.data_dir)
        # A second worker on the same database is refused by the lock, naming what the holder follows.
        second = memsync(shop, "worker", "--once")
        assert second.returncode == 2, second.stderr
        assert (f"another worker (pid {worker.proc.pid}, following {shop.db.resolve()}) already runs for "
                f"{shop.data_dir}") in second.stderr
        # The demo (no database configured) works in a data directory of its own.
        make_demo_db(demo_db_path(shop.data_dir), sessions=2)  # small: the demo's own flow is not the point
        env = {k: v for k, v in env_for(shop).items() if k != "MEMSYNC_DB"}
        demo = subprocess.run([*MEMSYNC, "demo"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert demo.returncode == 0, demo.stderr
        assert recorded(shop.data_dir / "demo") == DatabaseIdentity.of(demo_db_path(shop.data_dir))
        # As after `make run` on the demo: status without a database reads the demo's directory.
        shown = subprocess.run([*MEMSYNC, "status", "--json"], env=env, capture_output=True, text=True, timeout=120,
                               cwd=ROOT)
        assert shown.returncode == 0, shown.stderr
        demo_status = json.loads(shown.stdout)
        assert demo_status["database"]["path"] == str(demo_db_path(shop.data_dir))
        assert demo_status["database"]["chosen_by"].startswith("the demo database")
        assert demo_status["pending_rows"] == 0 and demo_status["collection"]
        status = json.loads(memsync(shop, "status", "--json").stdout)
        assert status["worker"]["up"] and status["worker"]["follows_other"] is None
        assert worker.proc.poll() is None
    finally:
        assert worker.stop() == 0
    assert recorded(shop.data_dir) == DatabaseIdentity.of(shop.db)
    report = verify(shop)
    assert report.clean and report.expected == report.in_chroma > 0


def test_a_directory_a_resync_recorded_refuses_a_worker_of_another_database(shop: Settings, tmp_path: Path) -> None:
    first = memsync(shop, "resync", "--dry-run")
    assert first.returncode == 0 and recorded(shop.data_dir) is None  # a dry run records nothing
    first = memsync(shop, "resync")
    assert first.returncode == 0, first.stderr
    other = written_db(tmp_path / "other.db", mixed_records(2, projects=("gamma",)))
    as_other = shop.model_copy(update={"db": other})
    for args in (["worker"], ["worker", "--once"], ["resync", "--rebuild"]):
        refused(memsync(as_other, *args), shop.db, other, shop.data_dir)
    own = memsync(as_other, "resync", **{"MEMSYNC_DATA_DIR": str(tmp_path / "other-data")})
    assert own.returncode == 0, own.stderr  # what the line says to do
    assert verify(shop).clean
