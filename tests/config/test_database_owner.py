"""A data directory belongs to one database (``DATA_DIR/database.json``): recorded on first use,
refused to any other database, kept through a rewrite of the file at its path and a move of the
file; an older directory adopts the database its last worker followed; the demo database works in
a data directory of its own."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from memsync.config.formats.database_owner import (
    OWNER_FILE,
    DatabaseIdentity,
    DatabaseMismatch,
    claim,
    data_dir_for,
    demo_db_path,
    for_database,
    is_demo,
    recorded,
)
from memsync.config.formats.worker_status import WorkerStatus, worker_state
from memsync.config.settings import Settings
from tests.conftest import make_db, mixed_records


def at(tmp_path: Path, db: str, data: str = "data") -> Settings:
    """Settings for the database ``db`` (created) in the data directory ``data`` under ``tmp_path``."""
    path = tmp_path / db
    if not path.exists():
        make_db(path, mixed_records(1))
    return Settings(db=path, data_dir=tmp_path / data, chroma_mode="embedded")


class TestClaim:
    def test_a_writer_records_the_database_and_another_is_refused_naming_both(self, tmp_path: Path) -> None:
        shop, other = at(tmp_path, "shop.db"), at(tmp_path, "other.db")
        assert claim(shop, create=True) == DatabaseIdentity.of(shop.db)
        assert recorded(shop.data_dir) == DatabaseIdentity.of(shop.db)
        with pytest.raises(DatabaseMismatch) as info:
            claim(other)
        line = str(info.value)
        assert "\n" not in line and str(shop.db) in line and str(other.db) in line and "--data-dir" in line
        assert claim(shop) is not None  # its own database still passes

    def test_a_reader_neither_creates_nor_records_a_directory(self, tmp_path: Path) -> None:
        shop = at(tmp_path, "shop.db")
        assert claim(shop) is None and not shop.data_dir.exists()
        shop.data_dir.mkdir()
        assert claim(shop) is None and recorded(shop.data_dir) is None  # nor an existing unrecorded one

    def test_a_look_at_another_database_never_claims_the_directory(self, tmp_path: Path) -> None:
        """`status` for demo.db on a new directory (it leaves state.db, no record), a one-off `search`
        given shop.db, then `status` or a worker for demo.db: both still pass, and the worker records
        demo.db."""
        demo, shop = at(tmp_path, "demo.db"), at(tmp_path, "shop.db")
        shop.data_dir.mkdir()
        (shop.data_dir / "state.db").touch()  # what the first `status` leaves
        assert claim(shop) is None and recorded(shop.data_dir) is None
        assert claim(demo) is None
        assert claim(demo, create=True) == DatabaseIdentity.of(demo.db) == recorded(demo.data_dir)
        with pytest.raises(DatabaseMismatch):
            claim(shop)

    def test_a_missing_database_is_left_to_fail_by_itself(self, tmp_path: Path) -> None:
        claim(at(tmp_path, "shop.db"), create=True)
        gone = Settings(db=tmp_path / "nope.db", data_dir=tmp_path / "data", chroma_mode="embedded")
        assert claim(gone) is None

    def test_vacuum_and_a_rewrite_at_the_same_path_are_the_same_database(self, tmp_path: Path) -> None:
        shop = at(tmp_path, "shop.db")
        claim(shop, create=True)
        with sqlite3.connect(shop.db) as conn:
            conn.execute("VACUUM")
        assert claim(shop) is not None
        fresh = tmp_path / "restored.db"
        make_db(fresh, mixed_records(2))
        os.replace(fresh, shop.db)  # a restore, or a rewrite then rename: a new inode at the path
        assert claim(shop) == DatabaseIdentity.of(shop.db) != recorded(shop.data_dir)  # a reader writes nothing
        assert claim(shop, create=True) == DatabaseIdentity.of(shop.db) == recorded(shop.data_dir)

    def test_a_moved_database_is_followed_by_its_inode(self, tmp_path: Path) -> None:
        shop = at(tmp_path, "shop.db")
        claim(shop, create=True)
        moved = tmp_path / "moved" / "shop.db"
        moved.parent.mkdir()
        os.rename(shop.db, moved)
        there = shop.model_copy(update={"db": moved})
        assert claim(there) == DatabaseIdentity.of(moved) != recorded(shop.data_dir)  # a reader writes nothing
        assert claim(there, create=True) == DatabaseIdentity.of(moved) == recorded(shop.data_dir)

    def test_the_same_inode_at_a_new_path_while_the_old_path_lives_is_another_database(self, tmp_path: Path) -> None:
        shop = at(tmp_path, "shop.db")
        claim(shop, create=True)
        link = tmp_path / "hard-link.db"
        os.link(shop.db, link)
        with pytest.raises(DatabaseMismatch):
            claim(shop.model_copy(update={"db": link}))

    def test_a_symlink_is_its_target(self, tmp_path: Path) -> None:
        shop = at(tmp_path, "shop.db")
        claim(shop, create=True)
        (tmp_path / "alias.db").symlink_to(shop.db)
        assert claim(shop.model_copy(update={"db": tmp_path / "alias.db"})) is not None


class TestUpgrade:
    """A directory from a version without the record."""

    def test_it_adopts_the_database_its_last_worker_followed(self, tmp_path: Path) -> None:
        shop, other = at(tmp_path, "shop.db"), at(tmp_path, "other.db")
        shop.data_dir.mkdir()
        WorkerStatus(1, 0, "managed", str(shop.db)).write(shop.data_dir)
        for create in (False, True):  # a reader compares with worker.json too, and records nothing
            with pytest.raises(DatabaseMismatch, match="belongs to the database .*shop.db, not .*other.db"):
                claim(other, create=create)
            assert recorded(shop.data_dir) == (DatabaseIdentity.of(shop.db) if create else None)
        assert claim(shop) == DatabaseIdentity.of(shop.db)

    def test_a_vanished_database_or_the_old_demo_layout_leaves_it_to_the_one_in_use(self, tmp_path: Path) -> None:
        for name, followed in (("gone", tmp_path / "gone.db"), ("demo", None)):
            s = at(tmp_path, "shop.db", data=name)
            s.data_dir.mkdir()
            WorkerStatus(1, 0, "managed", str(followed or demo_db_path(s.data_dir))).write(s.data_dir)
            if followed is None:
                make_db(demo_db_path(s.data_dir), mixed_records(1))
            assert claim(s) is None, name
            assert claim(s, create=True) == DatabaseIdentity.of(s.db), name

    def test_without_a_worker_the_first_writer_records_its_own_database(self, tmp_path: Path) -> None:
        s = at(tmp_path, "shop.db")
        s.data_dir.mkdir()
        claim(s)
        assert not (s.data_dir / OWNER_FILE).exists()
        claim(s, create=True)
        assert recorded(s.data_dir) == DatabaseIdentity.of(s.db)


class TestDemo:
    def test_the_demo_database_works_in_a_data_directory_of_its_own(self, tmp_path: Path) -> None:
        base = tmp_path / "data"
        demo = demo_db_path(base)
        assert data_dir_for(base, demo) == base / "demo"
        assert data_dir_for(base / "demo", demo) == base / "demo"  # idempotent
        assert data_dir_for(base, tmp_path / "shop.db") == base
        s = for_database(Settings(db=demo, data_dir=base, chroma_mode="embedded"))
        assert s.data_dir == base / "demo" and is_demo(s) and for_database(s) == s
        assert not is_demo(Settings(db=tmp_path / "shop.db", data_dir=base, chroma_mode="embedded"))

    def test_a_real_database_and_the_demo_each_keep_their_directory(self, tmp_path: Path) -> None:
        shop = at(tmp_path, "shop.db")
        claim(shop, create=True)
        demo_db = demo_db_path(shop.data_dir)
        make_db(demo_db, mixed_records(1))
        demo = for_database(shop.model_copy(update={"db": demo_db}))
        assert claim(demo, create=True) == DatabaseIdentity.of(demo_db)
        assert recorded(shop.data_dir) == DatabaseIdentity.of(shop.db)


def test_worker_state_of_a_worker_following_another_database_is_not_up(tmp_path: Path) -> None:
    now = 1_800_000_000_000
    WorkerStatus(os.getpid(), now, "managed", str(tmp_path / "shop.db"), heartbeat_ms=now).write(tmp_path)
    assert worker_state(tmp_path, now, tmp_path / "shop.db")["up"]
    state = worker_state(tmp_path, now, tmp_path / "other.db")
    assert not state["up"] and state["follows_other"] == str(tmp_path / "shop.db")
    assert state["reason"] == f"it follows another database, {tmp_path / 'shop.db'}"
