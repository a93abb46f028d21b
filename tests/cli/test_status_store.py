"""``memsync status`` tells the truth about the vector store without asking Chroma: the worker's
last count beside the sync records, missing documents as pending, and ``--check`` failing when the
two have differed for longer than one reconcile interval."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.config.settings import Settings
from memsync.main import main
from memsync.worker.checks.status import store_state
from tests.conftest import make_db, mixed_records

NOW = 1_800_000_000_000


def write_worker_json(data_dir: Path, **fields: object) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    status = {"pid": os.getpid(), "heartbeat_ms": int(time.time() * 1000), "chroma_reachable": True, **fields}
    (data_dir / "worker.json").write_text(json.dumps(status))


class TestStoreState:
    def test_unknown_before_the_worker_read_the_store(self) -> None:
        assert store_state({}, NOW, 600) == {"known": False}

    def test_a_store_that_lost_documents_reports_them_missing(self) -> None:
        state = store_state({"store_documents": 0, "records_documents": 5710, "store_read_at_ms": NOW,
                             "store_differs_since_ms": NOW - 1000}, NOW, 600)
        assert state["missing"] == 5710 and state["extra"] == 0 and not state["stuck"]

    def test_stuck_only_after_one_reconcile_interval(self) -> None:
        fields = {"store_documents": 90, "records_documents": 100, "store_read_at_ms": NOW}
        assert not store_state({**fields, "store_differs_since_ms": NOW - 599_000}, NOW, 600)["stuck"]
        assert store_state({**fields, "store_differs_since_ms": NOW - 601_000}, NOW, 600)["stuck"]
        assert not store_state({**fields, "store_differs_since_ms": None}, NOW, 600)["stuck"]


@pytest.mark.parametrize(("differs_for_s", "healthy"), [(None, True), (5, True), (900, False)])
def test_status_check_fails_only_when_store_and_records_differ_for_long(
        settings: Settings, differs_for_s: int | None, healthy: bool) -> None:
    make_db(settings.db, mixed_records(4))
    now = int(time.time() * 1000)
    write_worker_json(settings.data_dir, store_documents=3, records_documents=10, store_read_at_ms=now,
                      store_differs_since_ms=None if differs_for_s is None else now - differs_for_s * 1000)
    env = {"MEMSYNC_DB": str(settings.db), "MEMSYNC_DATA_DIR": str(settings.data_dir),
           "MEMSYNC_CHROMA_MODE": "embedded", "MEMSYNC_RECONCILE_INTERVAL_S": "600"}
    result = CliRunner().invoke(main, ["status", "--check", "--json", "--max-lag", "100000000"], env=env,
                                catch_exceptions=False)
    report = json.loads(result.stdout)
    assert report["healthy"] is healthy and (result.exit_code == 0) is healthy, result.stdout
    if not healthy:
        assert any("vector store holds 3 documents" in p for p in report["problems"])
    text = CliRunner().invoke(main, ["status"], env=env, catch_exceptions=False).stdout
    assert "store: 3 documents" in text and "7 missing (pending" in text


class TestIndexLoading:
    def test_loading_is_reported_while_the_worker_is_up_and_then_its_duration(self) -> None:
        fields = {"store_documents": 5, "records_documents": 5, "store_read_at_ms": NOW, "up": True}
        state = store_state({**fields, "index_loading_since_ms": NOW - 4000}, NOW, 600)
        assert state["index_loading_ms"] == 4000
        # A worker that died while the index loaded says nothing about it any more.
        assert store_state({**fields, "up": False, "index_loading_since_ms": NOW - 4000}, NOW, 600)[
            "index_loading_ms"] is None
        state = store_state({**fields, "index_loaded_in_ms": 5500}, NOW, 600)
        assert state["index_loading_ms"] is None and state["index_loaded_in_ms"] == 5500


def test_status_says_the_index_is_loading(settings: Settings) -> None:
    make_db(settings.db, mixed_records(2))
    now = int(time.time() * 1000)
    write_worker_json(settings.data_dir, store_documents=14, records_documents=14, store_read_at_ms=now,
                      index_loading_since_ms=now - 3000)
    env = {"MEMSYNC_DB": str(settings.db), "MEMSYNC_DATA_DIR": str(settings.data_dir),
           "MEMSYNC_CHROMA_MODE": "embedded"}
    text = CliRunner().invoke(main, ["status"], env=env, catch_exceptions=False).stdout
    assert "index loading for 3s (until it is loaded, searches without a window answer lexically" in text
    write_worker_json(settings.data_dir, store_documents=14, records_documents=14, store_read_at_ms=now,
                      index_loaded_in_ms=5500)
    text = CliRunner().invoke(main, ["status"], env=env, catch_exceptions=False).stdout
    assert "index loaded (in 5.5s)" in text
