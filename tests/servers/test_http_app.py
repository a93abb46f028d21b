"""The HTTP app in process (no server, no network): one health verdict for ``memsync status
--check`` and ``/api/status``, and the page's default window from the server's setting (issue 28)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memsync.config.settings import Settings
from memsync.main import main
from tests.conftest import make_db, mixed_records
from tests.servers.conftest import ask

MAX_LAG = "100000000"  # the rows' age is not what these states are about


def write_worker_json(data_dir: Path, **fields: object) -> None:
    now = int(time.time() * 1000)
    data_dir.mkdir(parents=True, exist_ok=True)
    status = {"pid": os.getpid(), "heartbeat_ms": now, "chroma_reachable": True, "phase": "following",
              "store_documents": 10, "records_documents": 10, "store_read_at_ms": now, **fields}
    (data_dir / "worker.json").write_text(json.dumps(status))


def cli_verdict(settings: Settings) -> tuple[int, dict[str, Any]]:
    env = {"MEMSYNC_DB": str(settings.db), "MEMSYNC_DATA_DIR": str(settings.data_dir),
           "MEMSYNC_CHROMA_MODE": "embedded", "MEMSYNC_RECONCILE_INTERVAL_S": "600"}
    result = CliRunner().invoke(main, ["status", "--check", "--json", "--max-lag", MAX_LAG], env=env,
                                catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def api_verdict(settings: Settings) -> dict[str, Any]:
    response = ask(settings.model_copy(update={"reconcile_interval_s": 600}), "/api/status", max_lag=MAX_LAG)
    assert response.status_code == 200, response.text
    health: dict[str, Any] = response.json()["health"]
    return health


STATES: dict[str, dict[str, object] | None] = {
    "healthy": {},
    "worker down": None,
    "store stuck": {"store_documents": 3, "store_differs_since_ms": int(time.time() * 1000) - 900_000},
    "chroma refuses": {"chroma_refused": "Chroma at 127.0.0.1:8000 refused the token"},
}


@pytest.mark.parametrize("state", list(STATES))
def test_status_check_and_api_status_give_the_same_verdict(settings: Settings, state: str) -> None:
    make_db(settings.db, mixed_records(4))
    fields = STATES[state]
    if fields is not None:
        write_worker_json(settings.data_dir, **fields)
    code, cli = cli_verdict(settings)
    api = api_verdict(settings)
    assert (code == 0) is cli["healthy"] is api["healthy"] is (state == "healthy"), (cli, api)
    assert api["problems"] == cli["problems"]
    if state != "healthy":
        assert len(cli["problems"]) == 1, cli["problems"]


@pytest.mark.parametrize(("window_days", "label"), [(90, "last 90 days"), (7, "last 7 days"), (0, "all time")])
def test_the_page_offers_the_servers_window_as_its_default(settings: Settings, window_days: int, label: str) -> None:
    make_db(settings.db, mixed_records(1))
    page = ask(settings.model_copy(update={"window_days": window_days}), "/").text
    assert f'<option value="">{label} (default)</option>' in page and "{window_default}" not in page
