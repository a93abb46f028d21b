"""`memsync serve` as a subprocess: every endpoint, bad parameters (400/422 with a message, never
500), the token rule, and a schemathesis fuzz of the served OpenAPI document."""

from __future__ import annotations

import http.client
import json
import subprocess
from typing import Any

import httpx
import pytest

from memsync.config.settings import Settings
from tests.conftest import free_port
from tests.servers.conftest import MEMSYNC, ROOT, HttpServer, server_env

pytestmark = pytest.mark.slow


def get(server: HttpServer, path: str, **params: Any) -> httpx.Response:
    return httpx.get(server.url + path, params=params, timeout=60)


def test_search_returns_the_json_contract(http_server: HttpServer) -> None:
    r = get(http_server, "/api/search", q="upload retries", limit=3)
    assert r.status_code == 200
    data = r.json()
    assert data["mode"] == "hybrid" and data["window"]["days"] == 90 and data["limit"] == 3
    assert 1 <= len(data["results"]) <= 3
    first = data["results"][0]
    assert {"kind", "id", "score", "signals", "title", "date"} <= set(first) and 0 <= first["score"] <= 1

    old = get(http_server, "/api/search", q="billing exports nightly").json()
    assert all(x["id"] != 5 or x["kind"] != "observation" for x in old["results"]) and old["excluded_by_window"] >= 1
    every = get(http_server, "/api/search", q="billing exports nightly", window_days=0).json()
    assert (every["results"][0]["kind"], every["results"][0]["id"]) == ("observation", 5)

    filtered = get(http_server, "/api/search", q="dark", kind="observations", project="beta", type="feature",
                   concept="pattern", file="theme.css", window_days=0).json()
    assert [(x["kind"], x["id"]) for x in filtered["results"]] == [("observation", 2)]
    full = get(http_server, "/api/search", q="retry budget", limit=1, full="true").json()
    assert full["results"][0]["record"]["narrative"].startswith("The retry budget")
    dated = get(http_server, "/api/search", order="newest", limit=2, date_from="2000-01-01").json()
    assert dated["window"]["source"] == "date_range" and len(dated["results"]) == 2


def test_timeline_records_similar_status_health_metrics(http_server: HttpServer) -> None:
    tl = get(http_server, "/api/timeline", anchor="S1", before=1, after=1).json()
    assert tl["anchor"] == {"kind": "summary", "id": 1, "ref": "#S1"}
    assert [x.get("field") for x in tl["results"]].count("anchor") == 1 and len(tl["results"]) == 3
    by_query = get(http_server, "/api/timeline", q="dark mode colors", before=0, after=0).json()
    assert by_query["anchor"]["ref"] == "#2"

    rec = get(http_server, "/api/records/prompt/1").json()
    assert rec["prompt_text"] == "why do uploads fail after three retries" and rec["project"] == "alpha"
    assert get(http_server, "/api/records/observation/999").status_code == 404

    sim = get(http_server, "/api/similar/4", limit=3).json()
    assert sim["mode"] == "semantic" and sim["results"] and all(
        (x["kind"], x["id"]) != ("observation", 4) for x in sim["results"])
    assert get(http_server, "/api/similar/999").status_code == 404

    status = get(http_server, "/api/status").json()
    assert status["chroma"]["reachable"] is True and status["totals"]["observations"]["rows"] == 5
    assert status["totals"]["observations"]["documents"] > 0 and "lag_ms" in status and "worker" in status

    assert get(http_server, "/healthz").json() == {"ok": True}
    assert get(http_server, "/api/search", q="retry").status_code == 200  # counted below, whatever ran before
    metrics = get(http_server, "/metrics").text
    assert 'memsync_http_requests_total{route="/api/search",status="200"}' in metrics
    assert 'memsync_search_answers_total{mode="hybrid"}' in metrics
    spec = get(http_server, "/openapi.json").json()
    assert {"/api/search", "/api/timeline", "/api/records/{kind}/{record_id}", "/api/similar/{observation_id}",
            "/api/status", "/healthz", "/metrics"} <= set(spec["paths"])
    page = get(http_server, "/")
    assert page.status_code == 200 and 'id="search-form"' in page.text


@pytest.mark.parametrize(("path", "params", "status", "fragment"), [
    ("/api/search", {"limit": 0}, 422, "greater than or equal to 1"),
    ("/api/search", {"limit": "ten"}, 422, "valid integer"),
    ("/api/search", {"offset": -1}, 422, "greater than or equal to 0"),
    ("/api/search", {"kind": "emails"}, 422, "'all', 'observations', 'summaries' or 'prompts'"),
    ("/api/search", {"order": "up"}, 422, "relevance"),
    ("/api/search", {"window_days": -1}, 422, "greater than or equal to 0"),
    ("/api/search", {"date_from": "soon"}, 400, "date_from must be an ISO date"),
    ("/api/search", {"type": "nonsense"}, 400, "unknown observation type 'nonsense'"),
    ("/api/search", {"q": "y" * 4001}, 400, "the limit is 4000"),
    ("/api/timeline", {}, 400, "give an anchor"),
    ("/api/timeline", {"anchor": "#999"}, 400, "no observation with id 999"),
    ("/api/timeline", {"anchor": "1", "before": 99}, 422, "less than or equal to 50"),
    ("/api/records/email/1", {}, 422, "'observation', 'summary' or 'prompt'"),
    ("/api/records/observation/abc", {}, 422, "valid integer"),
    ("/api/similar/0", {}, 422, "greater than or equal to 1"),
    ("/api/similar/" + "9" * 30, {}, 422, "less than or equal to 9223372036854775807"),
    ("/api/records/observation/" + "9" * 30, {}, 422, "less than or equal to 9223372036854775807"),
    ("/api/timeline", {"anchor": "0"}, 400, "record id '0' is out of range"),
    ("/api/timeline", {"anchor": "S0"}, 400, "record id 'S0' is out of range"),
    ("/api/timeline", {"anchor": "P-1"}, 400, "record id 'P-1' is out of range"),
    ("/api/timeline", {"anchor": "9" * 20}, 400, "is out of range"),
])
def test_bad_parameters_are_refused_with_a_message(http_server: HttpServer, path: str, params: dict[str, Any],
                                                   status: int, fragment: str) -> None:
    r = get(http_server, path, **params)
    assert r.status_code == status, r.text
    assert fragment in r.text and "Traceback" not in r.text


def test_hostile_query_strings_never_fail(http_server: HttpServer) -> None:
    for q in ['"unbalanced', "a AND OR NOT", "NEAR(x y", "col:value", "*", "^start", "(((", "\u0000nul",
              "emoji 🚀 and 漢字", "'; DROP TABLE observations; --"]:
        r = get(http_server, "/api/search", q=q, window_days=0)
        assert r.status_code == 200, (q, r.text)
        assert r.json()["mode"] in ("hybrid", "lexical")


def test_token_required_when_configured(served: Settings) -> None:
    with HttpServer(served, MEMSYNC_API_TOKEN="s3cret-token") as server:
        assert get(server, "/api/search", q="x").status_code == 401
        assert "Bearer" in get(server, "/api/status").json()["detail"]
        wrong = httpx.get(server.url + "/api/status", headers={"Authorization": "Bearer nope"}, timeout=60)
        assert wrong.status_code == 401
        ok = httpx.get(server.url + "/api/search", params={"q": "uploads"},
                       headers={"Authorization": "Bearer s3cret-token"}, timeout=60)
        assert ok.status_code == 200 and ok.json()["results"]
        assert get(server, "/metrics").status_code == 401
        assert httpx.head(server.url + "/api/status", timeout=60).status_code == 401  # HEAD is guarded as GET
        assert get(server, "/healthz").status_code == 200 and get(server, "/").status_code == 200


@pytest.mark.parametrize("token", [None, "", " ", "\t"], ids=["unset", "empty", "blank", "tab"])
def test_listening_beyond_loopback_needs_a_token(served: Settings, token: str | None) -> None:
    """An empty or blank MEMSYNC_API_TOKEN is no token (it used to open every interface)."""
    env = server_env(served) if token is None else server_env(served, MEMSYNC_API_TOKEN=token)
    r = subprocess.run([MEMSYNC, "serve", "--host", "0.0.0.0", "--port", str(free_port())], env=env,
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "refusing to listen on 0.0.0.0 without a token" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_real_token_guards_a_server_beyond_loopback(served: Settings) -> None:
    with HttpServer(served, host="0.0.0.0", MEMSYNC_API_TOKEN=" s3cret-token ") as server:
        assert get(server, "/api/records/observation/1").status_code == 401
        ok = httpx.get(server.url + "/api/records/observation/1", headers={"Authorization": "Bearer s3cret-token"},
                       timeout=60)
        assert ok.status_code == 200 and ok.json()["id"] == 1


def test_a_blank_token_on_loopback_leaves_authentication_off(served: Settings) -> None:
    """Blank is unset everywhere: on loopback the server runs without a token, as with none set."""
    with HttpServer(served, MEMSYNC_API_TOKEN=" ") as server:
        assert get(server, "/api/records/observation/1").status_code == 200


def test_missing_database_fails_at_start(served: Settings, tmp_path: Any) -> None:
    gone = served.model_copy(update={"db": tmp_path / "nope.db"})
    for cmd in (["serve", "--port", str(free_port())], ["mcp"]):
        r = subprocess.run([MEMSYNC, *cmd], env=server_env(gone), capture_output=True, text=True, timeout=60,
                           cwd=ROOT, stdin=subprocess.DEVNULL)
        assert r.returncode == 2 and "database not found" in r.stderr, (cmd, r.stderr)


def test_search_degrades_to_lexical_when_chroma_is_down(served: Settings, tmp_path: Any) -> None:
    down = served.model_copy(update={"data_dir": tmp_path / "no-server", "chroma_port": free_port()})
    with HttpServer(down) as server:
        data = get(server, "/api/search", q="upload retries", window_days=0).json()
        assert data["mode"] == "lexical_fallback" and "no managed Chroma server" in data["reason"]
        assert data["results"] and str(tmp_path) not in data["reason"] and "the data directory" in data["reason"]
        status = get(server, "/api/status")
        assert status.json()["chroma"]["reachable"] is False and status.json()["worker"]["up"] is False
        assert str(tmp_path) not in status.text


def test_a_vanished_database_is_503_without_paths(served: Settings, tmp_path: Any) -> None:
    import shutil

    copy = tmp_path / "copy.db"
    shutil.copy(served.db, copy)
    # Another database: a data directory of its own (the served one belongs to the served database).
    with HttpServer(served.model_copy(update={"db": copy, "data_dir": tmp_path / "data"})) as server:
        assert get(server, "/api/search", q="uploads").status_code == 200
        copy.unlink()
        for path in ("/api/search", "/api/status", "/api/records/observation/1", "/api/timeline"):
            r = get(server, path, q="uploads", anchor="1")
            assert r.status_code == 503, (path, r.text)
            assert "database not found" in r.json()["detail"] and str(tmp_path) not in r.text


def test_api_fuzz_finds_no_server_errors(http_server: HttpServer) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_url(http_server.url + "/openapi.json")
    failures: list[str] = []
    calls: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            response = case.call(base_url=http_server.url, timeout=60)
            calls[case.path] = calls.get(case.path, 0) + 1
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} {case.query}: {response.status_code} "
                                f"{response.text[:200]}")

        check()
    assert not failures, "\n".join(failures[:10])
    assert len(calls) >= 7 and calls["/api/search"] >= 50, calls  # every operation was exercised


def test_oversized_requests_are_refused_before_reading(http_server: HttpServer) -> None:
    r = httpx.get(http_server.url + "/api/search", params={"q": "x" * 60_000}, timeout=60)
    assert r.status_code == 414 and "query string longer" in r.json()["detail"]
    # Past 64 KB uvicorn's parser refused the URL with a plain-text 400 (before servers.wire).
    # httpx refuses such a URL itself: the standard library's client sends it.
    conn = http.client.HTTPConnection("127.0.0.1", http_server.port, timeout=60)
    try:
        conn.request("GET", "/api/search?q=" + "x" * 66_000)
        answer = conn.getresponse()
        assert answer.status == 414 and answer.getheader("content-type") == "application/json"
        assert json.loads(answer.read()) == {"detail": "URL longer than 65535 bytes; a query string may have at "
                                                       "most 57344"}
    finally:
        conn.close()
    r = httpx.request("GET", http_server.url + "/api/search", content=b"x" * 70_000, timeout=60)
    assert r.status_code == 413 and "body larger" in r.json()["detail"]


def test_head_answers_wherever_get_does(http_server: HttpServer) -> None:
    """``HEAD /`` used to be 405. HEAD gets the GET's status and headers, without the body."""
    for path in ("/", "/healthz", "/openapi.json", "/api/records/observation/1", "/api/search?q=uploads",
                 "/api/status", "/metrics"):
        head = httpx.head(http_server.url + path, timeout=60)
        got = httpx.get(http_server.url + path, timeout=60)
        assert head.status_code == got.status_code == 200, (path, head.status_code)
        assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"], path
        if path in ("/", "/healthz", "/openapi.json", "/api/records/observation/1"):  # the same body each time
            assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content)), path
    assert httpx.head(http_server.url + "/api/records/observation/999", timeout=60).status_code == 404
    assert httpx.head(http_server.url + "/nowhere", timeout=60).status_code == 404
    assert httpx.post(http_server.url + "/", timeout=60).status_code == 405  # only HEAD joins GET
