"""The HTTP app in process (no server, no network): one health verdict for ``memsync status
--check`` and ``/api/status``, the page's default window from the server's setting,
search snippets, the project list, and a page script that never parses data as HTML."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memsync.config.settings import Settings
from memsync.main import main
from tests.conftest import make_db, mixed_records, obs
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


def test_search_with_snippets_marks_the_query_words_and_keeps_records_out(settings: Settings) -> None:
    make_db(settings.db, [*mixed_records(3), obs(9, narrative="<img src=x onerror=alert(1)> upload stalled")])
    body = ask(settings, "/api/search", q="upload", snippets="true", window_days="0").json()
    hit = next(r for r in body["results"] if "onerror" in r["snippet"]["text"])
    snip = hit["snippet"]
    assert snip["text"] == "<img src=x onerror=alert(1)> upload stalled" and snip["field"] == "narrative"
    assert [snip["text"][a:b] for a, b in snip["highlights"]] == ["upload"]
    assert all("record" not in r for r in body["results"])  # full was not asked for


def test_snippets_of_the_newest_records_show_their_first_field(settings: Settings) -> None:
    make_db(settings.db, mixed_records(2))
    body = ask(settings, "/api/search", q="", snippets="true", full="true", window_days="0").json()
    assert body["results"] and all(r["snippet"]["text"] and r["snippet"]["highlights"] == [] for r in body["results"])
    assert all("record" in r for r in body["results"])
    plain = ask(settings, "/api/search", q="", window_days="0").json()
    assert all("snippet" not in r for r in plain["results"])


def test_projects_lists_each_project_with_its_rows_most_first(settings: Settings) -> None:
    """Counted per kind from the database; a prompt counts under its session's project."""
    make_db(settings.db, [*mixed_records(3), obs(7, project="gamma"),
                          obs(8, project="old", merged_into_project="beta")])
    body = ask(settings, "/api/projects").json()
    assert body == [
        {"project": "alpha", "count": 6, "kinds": {"observations": 2, "summaries": 2, "prompts": 2}},
        {"project": "beta", "count": 4, "kinds": {"observations": 2, "summaries": 1, "prompts": 1}},
        {"project": "gamma", "count": 1, "kinds": {"observations": 1, "summaries": 0, "prompts": 0}},
        {"project": "old", "count": 1, "kinds": {"observations": 1, "summaries": 0, "prompts": 0}},
    ]  # the merged row counts where a project filter finds it: under both names
    merged = ask(settings, "/api/search", q="", project="beta", kind="observations", window_days="0").json()
    assert merged["total"] == body[1]["kinds"]["observations"]
    hidden = ask(settings.model_copy(update={"excluded_projects": "gam*"}), "/api/projects").json()
    assert [p["project"] for p in hidden] == ["alpha", "beta", "old"]


def test_snippets_mark_chinese_words_found_inside_a_run(settings: Settings) -> None:
    """A CJK query's words are marked inside text written without spaces (bigrams, as the index cuts it)."""
    chinese = obs(9, title="退款", narrative="我们修复了退款金额的舍入错误，并补了测试。")
    make_db(settings.db, [*mixed_records(2), chinese])
    body = ask(settings, "/api/search", q="退款金额", snippets="true", window_days="0").json()
    snip = next(r["snippet"] for r in body["results"] if "舍入" in r["snippet"]["text"])
    assert [snip["text"][a:b] for a, b in snip["highlights"]] == ["退款金额"], snip


def test_the_page_never_parses_data_as_html(settings: Settings) -> None:
    """The page builds what it shows from text nodes (the browser test shows a memory holding HTML
    as text); no assignment to innerHTML or outerHTML, no insertAdjacentHTML or document.write."""
    make_db(settings.db, mixed_records(1))
    page = ask(settings, "/").text
    assert "Array.from(snip.text)" in page  # highlights are sliced by code point
    assert not re.search(r"\.(inner|outer)HTML\s*[+]?=|insertAdjacentHTML|document\.write", page)
