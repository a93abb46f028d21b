"""config.diskspace: a full disk told from other failures by class and code, and the directory named."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from memsync.config import diskspace
from memsync.config.errors import StoreDamaged, StoreUnavailable
from memsync.config.settings import Settings


def sqlite_full(tmp_path: Path) -> sqlite3.Error:
    """A real SQLITE_FULL: a database capped at its current size by max_page_count."""
    conn = sqlite3.connect(tmp_path / "capped.db")
    try:
        conn.execute("CREATE TABLE t (x BLOB)")
        conn.execute("PRAGMA max_page_count = 2")
        with pytest.raises(sqlite3.Error) as caught:
            conn.execute("INSERT INTO t VALUES (zeroblob(100000))")
        return caught.value
    finally:
        conn.close()


class TestIsNoSpace:
    def test_enospc_and_edquot_are_a_full_disk(self) -> None:
        assert diskspace.is_no_space(OSError(errno.ENOSPC, "No space left on device"))
        assert diskspace.is_no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))

    def test_sqlite_full_is_a_full_disk(self, tmp_path: Path) -> None:
        assert diskspace.is_no_space(sqlite_full(tmp_path))

    def test_other_errors_are_not(self, tmp_path: Path) -> None:
        assert not diskspace.is_no_space(OSError(errno.EACCES, "Permission denied"))
        assert not diskspace.is_no_space(sqlite3.OperationalError("no such table: t"))
        assert not diskspace.is_no_space(ValueError("no space left on device"))  # the message is not read

    def test_a_cause_counts(self) -> None:
        try:
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as exc:
                raise StoreUnavailable("write failed") from exc
        except StoreUnavailable as wrapped:
            assert diskspace.is_no_space(wrapped)


class TestNoSpace:
    def test_names_the_directory_of_the_failed_file(self, settings: Settings) -> None:
        exc = OSError(errno.ENOSPC, "No space left on device", str(settings.data_dir / "vectors" / "x.bin"))
        found = diskspace.no_space(exc, settings)
        assert found is not None
        assert str(found).startswith(f"no space left on {settings.data_dir} (DATA_DIR, ")
        assert "MEMSYNC_DATA_DIR" in str(found)

    def test_names_the_chroma_path_when_the_file_is_there(self, settings: Settings, tmp_path: Path) -> None:
        s = settings.model_copy(update={"chroma_path": tmp_path / "elsewhere"})
        exc = OSError(errno.ENOSPC, "No space left on device", str(s.chroma_dir / "chroma.sqlite3"))
        found = diskspace.no_space(exc, s)
        assert found is not None and "(the Chroma path, " in str(found) and "MEMSYNC_CHROMA_PATH" in str(found)

    def test_an_io_error_with_room_to_spare_is_not_explained_as_a_full_disk(self, settings: Settings) -> None:
        io = sqlite3.OperationalError("disk I/O error")
        io.sqlite_errorcode = 10  # type: ignore[attr-defined]
        roomy = settings.model_copy(update={"low_space_mb": 0})
        assert diskspace.no_space(io, roomy) is None
        low = settings.model_copy(update={"low_space_mb": 10**9})  # every disk is "low" below a petabyte
        assert diskspace.no_space(io, low) is not None

    def test_explain_names_a_low_disk_and_keeps_a_damaged_store(self, settings: Settings) -> None:
        down = StoreUnavailable("managed Chroma server did not become healthy")
        assert diskspace.explain(down, settings.model_copy(update={"low_space_mb": 0})) is down
        low = settings.model_copy(update={"low_space_mb": 10**9})
        assert str(diskspace.explain(down, low)).startswith("no space left on ")
        damaged = StoreDamaged("cannot read", "memsync-g1")
        assert diskspace.explain(damaged, low) is damaged
        remote = low.model_copy(update={"chroma_mode": "http"})
        assert diskspace.explain(down, remote) is down  # a remote server's disk is not measured here
