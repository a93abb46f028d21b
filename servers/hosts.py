"""Which ``Host`` and ``Origin`` the HTTP servers answer: the DNS rebinding guard of ``memsync serve``
and ``memsync mcp --http-port``.

A web page can point its own name at 127.0.0.1 and then read a loopback server through the
browser as if it were its own origin; the one thing it cannot forge is the ``Host`` header (its
own name). So both servers answer only requests whose ``Host`` is an allowed name: the loopback
names (``127.0.0.1``, ``localhost``, ``[::1]``), the listen address when it is another one, and
the names in the ``allowed_hosts`` setting; anything else gets 421. A request carrying an
``Origin`` must come from the server's own origin (``http://<allowed name>:<port>``) or one in
``allowed_origins``, else 403; a request without one (curl, scripts, MCP clients) is fine. This
is the MCP SDK's transport security rule (``TransportSecuritySettings``), and the MCP server is
given the same lists (:meth:`HostRule.sdk_hosts`, :meth:`HostRule.sdk_origins`).

The token rule of both servers is here too, so that it is one implementation: with a token set
(``Settings.bearer_token``), a request needs ``Authorization: Bearer <token>`` (:func:`bearer_ok`;
401 otherwise, ``HEAD`` included), and neither server listens beyond loopback without one
(:func:`check_binding`).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from memsync.config.errors import ConfigError
from memsync.config.settings import Settings

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
TOKEN_REFUSAL = "missing or wrong token: send Authorization: Bearer <token>"
REFUSAL_BODY = json.dumps({"detail": TOKEN_REFUSAL}).encode()  # the 401 body, the same every time


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, settings: Settings) -> None:
    """Refuse to listen beyond loopback without a token (raises ConfigError, exit 2 in the CLI)."""
    if not is_loopback(host) and settings.bearer_token is None:
        raise ConfigError(f"refusing to listen on {host} without a token: anyone who can reach it could read "
                          "the agent's memory. Set MEMSYNC_API_TOKEN (or api_token in the config file), or "
                          "listen on 127.0.0.1.")


def bearer_ok(authorization: str | None, token: str | None) -> bool:
    """Whether a request with this ``Authorization`` header may be answered: always when no token is
    set, else only with ``Bearer <token>``: the scheme in any case (``bearer``, as HTTP's auth
    schemes are case-insensitive, RFC 9110 §11.1) and one or more spaces after it (RFC 6750's
    ``1*SP``), the token exactly as set (compared in constant time)."""
    if token is None:
        return True
    scheme, _, credentials = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.lstrip(" ").encode(), token.encode())


def split_host(value: str) -> tuple[str, int | None]:
    """``name[:port]`` (``[v6]:port`` for IPv6) as (lower-case name, port or None).

    Raises ValueError for a value that is not a name with an optional numeric port.
    """
    value = value.strip().lower()
    if value.startswith("["):
        name, sep, rest = value.partition("]")
        name += sep
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"not a host: {value!r}")
        port_text = rest[1:] if rest else None
    elif value.count(":") == 1:
        name, port_text = value.split(":")
    else:
        name, port_text = value, None
    if not name or any(c in name for c in "/?#@ \t") or (":" in name and not name.startswith("[")):
        raise ValueError(f"not a host: {value!r}")
    if port_text is None:
        return name, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"not a port: {value!r}")
    return name, int(port_text)


def host_name(address: str) -> str | None:
    """The name clients use in ``Host`` for a listen address; None for a wildcard (0.0.0.0, ::)."""
    address = address.strip().lower()
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address
    if ip.is_unspecified:
        return None
    return f"[{ip}]" if ip.version == 6 else str(ip)


@dataclass(frozen=True)
class HostRule:
    """The names and origins one server answers.

    ``names`` are allowed with any port or none; ``name_ports`` exactly (``name:port``);
    ``origins`` are the allowed ``Origin`` values; ``cors`` the configured ones (CORS headers).
    """

    names: frozenset[str]
    name_ports: frozenset[tuple[str, int]]
    origins: frozenset[str]
    cors: tuple[str, ...]

    @classmethod
    def of(cls, settings: Settings, listen_host: str, port: int) -> HostRule:
        """The rule of a server listening on ``listen_host:port`` with ``settings``."""
        names = set(LOOPBACK_NAMES)
        own = host_name(listen_host)
        if own:
            names.add(own)
        name_ports: set[tuple[str, int]] = set()
        for entry in settings.allowed_hosts:
            name, given = split_host(entry)
            if given is None:
                names.add(name)
            else:
                name_ports.add((name, given))
        origins = {f"http://{n}:{port}" for n in names}
        origins |= {f"http://{n}:{p}" for n, p in name_ports}
        origins |= {f"http://{n}" for n, p in {*((n, port) for n in names), *name_ports} if p == 80}
        cors = tuple(o.lower().rstrip("/") for o in settings.allowed_origins)
        return cls(frozenset(names), frozenset(name_ports), frozenset(origins | set(cors)), cors)

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        try:
            name, port = split_host(host)
        except ValueError:
            return False
        return name in self.names or (port is not None and (name, port) in self.name_ports)

    def origin_allowed(self, origin: str | None) -> bool:
        return not origin or origin.strip().lower().rstrip("/") in self.origins

    def refusal(self, host: str | None, origin: str | None) -> tuple[int, str] | None:
        """None when a request with these headers may be answered, else (status, reason)."""
        if not self.host_allowed(host):
            shown = repr(host[:100]) if host else "missing"
            return 421, (f"Host {shown} is not a name this server answers to (DNS rebinding protection); "
                         "allow it with the allowed_hosts setting (MEMSYNC_ALLOWED_HOSTS)")
        if not self.origin_allowed(origin):
            return 403, (f"Origin {(origin or '')[:100]!r} is not allowed (DNS rebinding protection); "
                         "allow it with the allowed_origins setting (MEMSYNC_ALLOWED_ORIGINS)")
        return None

    def sdk_hosts(self) -> list[str]:
        """The allowed hosts in the MCP SDK's syntax (``name``, ``name:*``, ``name:port``)."""
        return sorted({*self.names, *(f"{n}:*" for n in self.names), *(f"{n}:{p}" for n, p in self.name_ports)})

    def sdk_origins(self) -> list[str]:
        """The allowed origins in the MCP SDK's syntax (exact values)."""
        return sorted(self.origins)


class HostGuard:
    """ASGI middleware: refuse (421/403, a one-line JSON ``detail``) what :class:`HostRule` refuses."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = origin = None
        for key, value in reversed(scope.get("headers") or []):  # the first of a repeated header wins
            if key == b"host":
                host = value
            elif key == b"origin":
                origin = value
        refused = self.rule.refusal(host.decode("latin-1") if host is not None else None,
                                    origin.decode("latin-1") if origin is not None else None)
        if refused is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        status, reason = refused
        body = json.dumps({"detail": reason}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class TokenGuard:
    """ASGI middleware: every request without the bearer token (:func:`bearer_ok`) gets 401 with a
    one-line JSON ``detail`` and ``WWW-Authenticate: Bearer``, whatever its method (``HEAD`` too)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.token is None:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers") or [] if k == b"authorization"), None)
        if bearer_ok(given.decode("latin-1") if given is not None else None, self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = b"" if scope["method"] == "HEAD" else REFUSAL_BODY
        length = len(REFUSAL_BODY)
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(length).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})
