"""``memsync status`` while the worker makes its first pass: up, with its phase and the
rows done so far; ``--check`` does not count the history the pass works off as lag, but a worker
degraded in its first pass fails it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.config.settings import Settings
from memsync.main import main
from tests.cli.test_status_store import write_worker_json
from tests.conftest import make_db, mixed_records

OLD_MS = 1_000_000  # rows written long ago: a lag of decades if they were pending after the first pass


def env_of(settings: Settings) -> dict[str, str]:
    return {"MEMSYNC_DB": str(settings.db), "MEMSYNC_DATA_DIR": str(settings.data_dir),
            "MEMSYNC_CHROMA_MODE": "embedded"}


def check(settings: Settings) -> tuple[int, dict[str, object], str]:
    """(exit code, JSON report, text line) of ``status --check``."""
    runner = CliRunner()
    as_json = runner.invoke(main, ["status", "--check", "--json"], env=env_of(settings), catch_exceptions=False)
    text = runner.invoke(main, ["status", "--check"], env=env_of(settings), catch_exceptions=False)
    return as_json.exit_code, json.loads(as_json.stdout), text.stdout.strip()


@pytest.fixture
def old_rows(settings: Settings) -> Path:
    return make_db(settings.db, [{**r, "created_at_epoch": OLD_MS} for r in mixed_records(3)])


def test_first_pass_is_healthy_and_shows_its_progress(settings: Settings, old_rows: Path) -> None:
    write_worker_json(settings.data_dir, phase="first pass", pass_rows_done=1234)
    code, report, line = check(settings)
    assert code == 0 and report["problems"] == [], report
    assert line == "healthy: first pass in progress, 1234 rows done (lag not checked until it ends)"
    shown = CliRunner().invoke(main, ["status"], env=env_of(settings), catch_exceptions=False).stdout
    assert "worker: up (first pass in progress, 1234 rows done)" in shown


def test_starting_worker_is_up(settings: Settings, old_rows: Path) -> None:
    write_worker_json(settings.data_dir, phase="starting")
    code, report, _ = check(settings)
    assert code == 0 and report["worker"]["up"] is True  # type: ignore[index]


def test_degraded_during_the_first_pass_fails_the_check(settings: Settings, old_rows: Path) -> None:
    write_worker_json(settings.data_dir, phase="first pass", degraded=True, last_error="file is not a database")
    code, report, _ = check(settings)
    assert code == 1 and report["problems"] == ["worker degraded in its first pass: file is not a database"]


@pytest.mark.parametrize("phase", [{"phase": "following"}, {}])  # {}: a worker.json from before phases
def test_after_the_first_pass_the_lag_counts_again(settings: Settings, old_rows: Path, phase: dict[str, str]) -> None:
    write_worker_json(settings.data_dir, **phase)
    code, report, _ = check(settings)
    assert code == 1 and str(report["problems"][0]).startswith("lag ")  # type: ignore[index]
