"""``memsync status`` compares its database with the data directory's and with the one the worker
follows: another database is refused in one line (no lag computed from another database's records),
and a worker that follows another database is not up for this one."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from memsync.config.formats.database_owner import OWNER_FILE, DatabaseIdentity, claim, recorded
from memsync.config.settings import Settings
from memsync.main import main
from tests.cli.test_status_phase import env_of
from tests.cli.test_status_store import write_worker_json
from tests.conftest import make_db, mixed_records


def test_another_database_is_refused_in_one_line(settings: Settings, tmp_path: Path) -> None:
    make_db(settings.db, mixed_records(2))
    claim(settings, create=True)
    other = settings.model_copy(update={"db": make_db(tmp_path / "other.db", mixed_records(1))})
    for args in (["status"], ["status", "--check"], ["search", "anything"], ["timeline", "1"]):
        r = CliRunner().invoke(main, args, env=env_of(other), catch_exceptions=False)
        assert r.exit_code == 2, (args, r.output)
        assert r.stderr.strip() == (f"memsync: the data directory {settings.data_dir} belongs to the database "
                                    f"{settings.db}, not {other.db}: give this database a data directory of its "
                                    "own (--data-dir or MEMSYNC_DATA_DIR)"), args


def test_a_worker_following_another_database_is_down_for_this_one(settings: Settings, tmp_path: Path) -> None:
    make_db(settings.db, mixed_records(2))
    claim(settings, create=True)
    write_worker_json(settings.data_dir, db=str(tmp_path / "shop.db"), phase="following")
    runner = CliRunner()
    shown = runner.invoke(main, ["status"], env=env_of(settings), catch_exceptions=False).stdout
    assert f"worker: down (it follows another database, {tmp_path / 'shop.db'})" in shown
    checked = runner.invoke(main, ["status", "--check", "--json"], env=env_of(settings), catch_exceptions=False)
    report = json.loads(checked.stdout)
    assert checked.exit_code == 1 and report["worker"]["follows_other"] == str(tmp_path / "shop.db")
    assert f"worker down (it follows another database, {tmp_path / 'shop.db'})" in report["problems"]


def test_a_read_only_look_at_another_database_claims_nothing(settings: Settings, tmp_path: Path) -> None:
    """`status` for one database on a new data directory (it leaves state.db), a one-off `search`
    given another database, then `status` for the first: nothing records the directory, so the
    third is not refused, and the directory still goes to its first writer."""
    make_db(settings.db, mixed_records(2))
    shop = settings.model_copy(update={"db": make_db(tmp_path / "shop.db", mixed_records(1))})
    runner = CliRunner()
    steps = ((settings, ["status"]), (shop, ["search", "pool"]), (settings, ["status"]))
    for s, args in steps:
        r = runner.invoke(main, args, env=env_of(s), catch_exceptions=False)
        assert r.exit_code != 2, (args, r.output)
    assert (settings.data_dir / "state.db").exists() and not (settings.data_dir / OWNER_FILE).exists()
    claim(settings, create=True)  # what the worker does first
    assert recorded(settings.data_dir) == DatabaseIdentity.of(settings.db)
