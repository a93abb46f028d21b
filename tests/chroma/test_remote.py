"""A Chroma server someone else runs: a non-default tenant and database, token auth and
TLS, against a real ``chroma run`` behind the test's own header-checking reverse proxy (a thread
that forwards to the server only when ``Authorization: Bearer <token>`` is right, else 401), with
a self-signed certificate for the TLS case. Secrets never show in settings output or errors."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import re
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from memsync.chroma import collections as stores
from memsync.chroma.remote import Endpoint, auth_headers, endpoint
from memsync.chroma.server import ManagedServer, ServerInfo, chroma_cli
from memsync.config.errors import StoreRefused
from memsync.config.settings import DEFAULT_DATABASE, DEFAULT_TENANT, Settings, describe, load_settings
from memsync.main import main
from memsync.search import Searcher, SearchRequest
from memsync.worker.loop.daemon import Worker
from memsync.worker.pipeline.resync import resync
from tests.conftest import FakeEmbedder, free_port, make_db, mixed_records

TOKEN = "right-token"
TENANT, DATABASE = "acme", "memories"


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real `chroma run` with the tenant ``acme`` and its database ``memories``; its port."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    port = free_port()
    proc = subprocess.Popen(chroma_cli("run", "--path", str(tmp_path_factory.mktemp("remote")),
                             "--host", "127.0.0.1", "--port", str(port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = Settings(chroma_start_timeout_s=60)
        assert ManagedServer(s)._wait_healthy(ServerInfo(proc.pid, "127.0.0.1", port, ""), proc)
        admin = chromadb.AdminClient(ChromaSettings(chroma_api_impl="chromadb.api.fastapi.FastAPI",
                                                    chroma_server_host="127.0.0.1", chroma_server_http_port=port,
                                                    anonymized_telemetry=False))
        admin.create_tenant(TENANT)
        admin.create_database(DATABASE, tenant=TENANT)
        yield port
    finally:
        proc.kill()
        proc.wait(10)


class _Proxy(http.server.BaseHTTPRequestHandler):
    """Forwards to the Chroma server only with the right bearer token; 401 otherwise."""

    protocol_version = "HTTP/1.1"
    upstream: httpx.Client

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._answer(401, {"content-type": "text/plain"}, b"unauthorized")
            return
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "content-length", "connection", "authorization")}
        resp = self.upstream.request(self.command, self.path, content=body, headers=headers)
        self._answer(resp.status_code, resp.headers, resp.content)

    def _answer(self, status: int, headers: Any, body: bytes) -> None:
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _serve(chroma_port: int, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    upstream = httpx.Client(base_url=f"http://127.0.0.1:{chroma_port}", timeout=30)
    handler = type("Proxy", (_Proxy,), {"upstream": upstream})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        upstream.close()


@pytest.fixture(scope="module")
def proxy(chroma: int) -> Iterator[int]:
    """The header-checking proxy (plain HTTP) in front of the server; its port."""
    yield from _serve(chroma)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, made with cryptography."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memsync test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def tls_proxy(chroma: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """The same proxy over HTTPS with a self-signed certificate; its port and the certificate."""
    cert, key = _self_signed(tmp_path_factory.mktemp("tls"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    for port in _serve(chroma, ctx):
        yield port, cert


def _settings(tmp_path: Path, port: int, **extra: Any) -> Settings:
    values: dict[str, Any] = {"chroma_api_key": TOKEN, "chroma_tenant": TENANT, "chroma_database": DATABASE,
                              **extra}
    # One collection per test: the server (and its tenant) is shared by the module's tests.
    return Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="http",
                    chroma_port=port, window_days=0, collection=f"c-{tmp_path.name}", **values)


def _cli(monkeypatch: pytest.MonkeyPatch, s: Settings, *args: str) -> tuple[int, str]:
    env = {"DB": str(s.db), "DATA_DIR": str(s.data_dir), "CHROMA_MODE": "http", "CHROMA_PORT": str(s.chroma_port),
           "CHROMA_TENANT": s.chroma_tenant, "CHROMA_DATABASE": s.chroma_database, "CHROMA_SSL": str(s.chroma_ssl)}
    if s.chroma_api_key is not None:
        env["CHROMA_API_KEY"] = s.chroma_api_key.get_secret_value()
    else:
        monkeypatch.delenv("MEMSYNC_CHROMA_API_KEY", raising=False)
    if s.chroma_ca_file is not None:
        env["CHROMA_CA_FILE"] = str(s.chroma_ca_file)
    else:
        monkeypatch.delenv("MEMSYNC_CHROMA_CA_FILE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(f"MEMSYNC_{key}", value)
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stderr


def _assert_one_line(err: str, *needles: str) -> None:
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    assert TOKEN not in err and "wrong-token" not in err  # never a secret in a message


class TestSettings:
    def test_tenant_and_database_default_to_chromadbs(self) -> None:
        from chromadb.config import DEFAULT_DATABASE as CHROMA_DATABASE
        from chromadb.config import DEFAULT_TENANT as CHROMA_TENANT

        assert (DEFAULT_TENANT, DEFAULT_DATABASE) == (CHROMA_TENANT, CHROMA_DATABASE)
        s = Settings()
        assert (s.chroma_tenant, s.chroma_database, s.chroma_ssl, s.chroma_api_key) == (
            DEFAULT_TENANT, DEFAULT_DATABASE, False, None)

    def test_secrets_are_never_printed(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MEMSYNC_CHROMA_API_KEY", "s3cret-token")
        monkeypatch.setenv("MEMSYNC_CHROMA_HEADERS", '{"X-Gateway-Key": "gw-s3cret"}')
        loaded = load_settings()
        rows = {r["key"]: r for r in describe(loaded)}
        assert rows["chroma_api_key"]["value"] == "set" and rows["chroma_headers"]["value"] == "set"
        result = CliRunner().invoke(main, ["settings", "--json"], catch_exceptions=False)
        shown = result.stdout + repr(loaded.settings) + repr(endpoint(
            loaded.settings.model_copy(update={"chroma_mode": "http"}), "h", 1))
        assert "s3cret" not in shown and '"set"' in result.stdout

    def test_token_goes_in_the_header_chroma_reads(self) -> None:
        s = Settings(chroma_api_key="tok", chroma_headers={"X-Org": "acme", "authorization": "other"})
        assert auth_headers(s) == {"X-Org": "acme", "Authorization": "Bearer tok"}
        s = Settings(chroma_api_key="tok", chroma_auth_header="X-Chroma-Token")
        assert auth_headers(s) == {"X-Chroma-Token": "tok"}

    def test_bad_values_name_the_key_not_the_secret(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from memsync.config.settings import SettingsError

        monkeypatch.setenv("MEMSYNC_CHROMA_HEADERS", '{"X-Key": "line\\nbreak-s3cret"}')
        with pytest.raises(SettingsError, match="chroma_headers") as info:
            load_settings()
        assert "s3cret" not in str(info.value)
        monkeypatch.delenv("MEMSYNC_CHROMA_HEADERS")
        monkeypatch.setenv("MEMSYNC_CHROMA_API_KEY", "has space s3cret")
        with pytest.raises(SettingsError, match="chroma_api_key") as info:
            load_settings()
        assert "s3cret" not in str(info.value)

    def test_the_managed_server_is_reached_plainly(self) -> None:
        s = Settings(chroma_api_key="tok", chroma_ssl=True, chroma_tenant="acme")
        assert endpoint(s, "127.0.0.1", 1) == Endpoint("127.0.0.1", 1)


@pytest.mark.slow
class TestTenantAndDatabase:
    def test_sync_and_search_use_only_the_configured_tenant_and_database(
            self, tmp_path: Path, proxy: int, chroma: int, fake_embedder: FakeEmbedder) -> None:
        import chromadb

        s = _settings(tmp_path, proxy)
        make_db(s.db, mixed_records(6))
        result = resync(s, embedder=fake_embedder)
        assert result.added > 0
        searcher = Searcher(s, embedder=fake_embedder)
        try:
            resp = searcher.search(SearchRequest(query="observation 3"))
        finally:
            searcher.close()
        assert resp.mode.value == "hybrid" and resp.results, resp.to_json()
        assert any(r.similarity for r in resp.results)  # the vectors answered, through the proxy

        direct = chromadb.HttpClient(host="127.0.0.1", port=chroma, tenant=TENANT, database=DATABASE)
        default = chromadb.HttpClient(host="127.0.0.1", port=chroma)
        names = {c.name for c in direct.list_collections() if c.name.startswith(s.collection)}
        assert s.collection in names and sum(direct.get_collection(n).count() for n in names) == result.added
        assert not [c for c in default.list_collections() if c.name.startswith(s.collection)]
        assert stores.store_location(s) == f"http://127.0.0.1:{proxy} (tenant {TENANT}, database {DATABASE})"

    @pytest.mark.parametrize(("setting", "value", "words"), [
        ("chroma_tenant", "nobody", "has no tenant nobody"),
        ("chroma_database", "nothing", "has no database nothing (tenant acme)"),
    ])
    def test_a_missing_tenant_or_database_is_one_line_and_exit_2(
            self, tmp_path: Path, proxy: int, monkeypatch: pytest.MonkeyPatch, setting: str, value: str,
            words: str) -> None:
        s = _settings(tmp_path, proxy, **{setting: value})
        make_db(s.db, mixed_records(2))
        with pytest.raises(StoreRefused, match=re.escape(words)):
            stores.connect(s)
        for command in (["resync"], ["search", "observation"], ["worker", "--once"]):
            code, err = _cli(monkeypatch, s, *command)
            assert code == 2, (command, err)
            _assert_one_line(err, words, setting)


@pytest.mark.slow
class TestToken:
    def test_a_wrong_token_is_refused_clearly_and_the_right_one_works(
            self, tmp_path: Path, proxy: int, monkeypatch: pytest.MonkeyPatch, fake_embedder: FakeEmbedder) -> None:
        wrong = _settings(tmp_path, proxy, chroma_api_key="wrong-token")
        make_db(wrong.db, mixed_records(2))
        for command in (["resync"], ["search", "observation"], ["worker", "--once"]):
            code, err = _cli(monkeypatch, wrong, *command)
            assert code == 2, (command, err)
            _assert_one_line(err, "refused", "HTTP 401", "chroma_api_key")
        code, err = _cli(monkeypatch, wrong.model_copy(update={"chroma_api_key": None}), "resync")
        assert code == 2 and "no token" in err
        assert resync(_settings(tmp_path, proxy), embedder=fake_embedder).added > 0

    def test_the_worker_keeps_retrying_a_refusal_and_says_why(self, tmp_path: Path, proxy: int) -> None:
        """The daemon does not exit on a refused token: it backs off, reports the reason in
        worker.json (``chroma_refused``) and logs it once; a search answers lexically, saying why."""
        s = _settings(tmp_path, proxy, chroma_api_key="wrong-token", poll_interval_s=0.01)
        make_db(s.db, mixed_records(2))
        worker = Worker(s)
        worker._start()
        try:
            first = worker.step()
            second = worker.step()
            status = worker.health.status
            assert status.degraded and status.consecutive_errors == 2 and second > first
            assert status.chroma_refused is not None and "HTTP 401" in status.chroma_refused
            assert "wrong-token" not in (status.chroma_refused + str(status.last_error))
        finally:
            worker._shutdown()
        searcher = Searcher(s)
        try:
            resp = searcher.search(SearchRequest(query="observation 1"))
        finally:
            searcher.close()
        assert resp.mode.value == "lexical_fallback" and "HTTP 401" in (resp.reason or ""), resp.to_json()


@pytest.mark.slow
class TestTLS:
    def test_https_with_the_servers_ca_works_and_without_it_is_refused(
            self, tmp_path: Path, tls_proxy: tuple[int, Path], monkeypatch: pytest.MonkeyPatch,
            fake_embedder: FakeEmbedder) -> None:
        port, cert = tls_proxy
        s = _settings(tmp_path, port, chroma_ssl=True, chroma_ca_file=cert)
        make_db(s.db, mixed_records(2))
        assert resync(s, embedder=fake_embedder).added > 0
        assert stores.store_location(s).startswith(f"https://127.0.0.1:{port} ")
        code, err = _cli(monkeypatch, s.model_copy(update={"chroma_ca_file": None}), "resync")
        assert code == 2, err
        _assert_one_line(err, "certificate did not verify", "chroma_ca_file")
