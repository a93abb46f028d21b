"""memsync's search for agents and programs: ``memsync mcp`` (Model Context Protocol, stdio or
streamable HTTP) and ``memsync serve`` (the HTTP API and the search page). Both refuse to start
without a database."""

from __future__ import annotations

from typing import Any

import click

from memsync.commands.options import (
    EXIT_USAGE,
    common_options,
    env_note,
    errors_as_exit,
    fail,
    setting_default,
    settings_from,
    settings_note,
)
from memsync.config.settings import Settings

SERVE_HELP = f"""The HTTP API and search page: http://{setting_default("serve_host")}:{setting_default("serve_port")}/
(API under /api, OpenAPI at /openapi.json).

GET /api/search, /api/timeline, /api/records/{{kind}}/{{id}}, /api/similar/{{id}}, /api/status,
/healthz, /metrics. With a token set (MEMSYNC_API_TOKEN), requests need
"Authorization: Bearer <token>". Requests naming another Host than 127.0.0.1, localhost,
::1 or the listen address get 421, from another web page's Origin 403 (DNS rebinding
protection); allow more with MEMSYNC_ALLOWED_HOSTS and MEMSYNC_ALLOWED_ORIGINS.
"""


def existing_db(settings: Settings) -> Settings:
    """The settings, after checking that the database exists (servers fail at start, not per request)."""
    if not settings.db.exists():
        fail(f"database not found: {settings.db} (set --db or MEMSYNC_DB; `make run` creates a demo database)",
             EXIT_USAGE)
    return settings


@click.command()
@common_options
@click.option("--http-port", type=click.IntRange(1, 65535), default=None,
              help=f"Serve MCP over streamable HTTP on PORT/mcp instead of stdio, at the address "
                   f"{env_note('serve_host')}; Host, Origin and MEMSYNC_API_TOKEN checked as by "
                   "`memsync serve` (anything but loopback needs the token).")
@click.option("--profile", type=click.Choice(["memsync", "claude-mem"]), default="memsync", show_default=True,
              help="Which tools: memsync's own, or claude-mem's three search tools (search, timeline, "
                   "get_observations) with claude-mem's parameters and answer shape, so that its mem-search "
                   "skill works unchanged.")
def mcp(http_port: int | None, profile: str, **kwargs: Any) -> None:
    """Serve memsync's search to agents over the Model Context Protocol (stdio by default).

    Tools: search, search_observations, search_sessions, search_user_prompts, find_by_concept,
    find_by_file, find_by_type, timeline, recent_context, get_observations, find_similar. With
    --profile claude-mem: claude-mem's search, timeline and get_observations instead. Works
    without the worker: when the vector store is not reachable, answers come from full-text
    search and say so. Register with Claude Code by the absolute path of the memsync in the
    virtual environment (Claude Code does not start it there), e.g.:
    claude mcp add memsync -- /path/to/memsync/.venv/bin/memsync mcp
    """
    settings = existing_db(settings_from(kwargs).settings)
    from memsync.servers.mcp_tools import serve as serve_mcp

    with errors_as_exit(settings):
        if http_port is not None:
            listening(settings, settings.serve_host, http_port, "mcp")
        serve_mcp(settings, http_port, profile)


def listening(settings: Settings, host: str, port: int, path: str = "") -> None:
    """Refuse an address beyond loopback without a token (ConfigError), else say where the server
    listens, and which names it answers when that is not loopback (stderr; stdout is MCP's)."""
    from memsync.servers.hosts import check_binding, is_loopback

    check_binding(host, settings)
    click.echo(f"memsync: serving http://{host}:{port}/{path} on {settings.db}", err=True)
    if not settings.allowed_hosts and not is_loopback(host):
        click.echo("memsync: clients reaching this server by another name than its address or a loopback "
                   "name get 421: list those names in MEMSYNC_ALLOWED_HOSTS", err=True)


@click.command(help=SERVE_HELP)
@common_options
@click.option("--host", default=None,
              help=f"Address to listen on {settings_note('serve_host')}; anything but loopback needs "
                   "MEMSYNC_API_TOKEN.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help=f"Port {settings_note('serve_port')}.")
def serve(host: str | None, port: int | None, **kwargs: Any) -> None:
    """``memsync serve``: its help is SERVE_HELP (the address's default read from the settings)."""
    settings = existing_db(settings_from(kwargs).settings)
    from memsync.servers.http_api import serve as serve_http

    with errors_as_exit(settings):
        listening(settings, host or settings.serve_host, port or settings.serve_port)
        serve_http(settings, host, port)
