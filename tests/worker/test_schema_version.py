"""status names the migration level claude-mem recorded in the database (``schema_versions``),
and says nothing of it for a file without that table."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from memsync.config.settings import Settings
from memsync.main import main
from memsync.worker.checks.status import status
from memsync.worker.rows.source import SourceReader
from tests.conftest import write


def test_status_names_the_schema_version_claude_mem_recorded(settings: Settings, source_db: Path) -> None:
    with SourceReader.open(settings) as reader:
        assert reader.schema_version() is None
    assert status(settings).as_dict()["schema_version"] is None
    write(source_db, "CREATE TABLE schema_versions (id INTEGER PRIMARY KEY, version INTEGER UNIQUE NOT NULL, "
                     "applied_at TEXT NOT NULL)")
    for version in (4, 52, 51):
        write(source_db, "INSERT INTO schema_versions (version, applied_at) VALUES (?, '2026-11-25')", version)
    assert status(settings).as_dict()["schema_version"] == 52
    env = {"MEMSYNC_DB": str(settings.db), "MEMSYNC_DATA_DIR": str(settings.data_dir),
           "MEMSYNC_CHROMA_MODE": "embedded"}
    out = CliRunner().invoke(main, ["status"], env=env, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0].endswith("; claude-mem schema version 52)"), out.output
