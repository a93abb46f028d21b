"""Who writes the upstream-readable store: memsync (``upstream_store`` on), claude-mem's
own worker (its Chroma sync pointed at that store), or both. Said by ``memsync status``.

claude-mem 13.25.3 reads its settings as ``SettingsDefaultsManager`` does: the environment
variable, else the key in ``DATA_DIR/settings.json`` (flat, or under ``env``), else its default.
Its Chroma sync runs unless ``CLAUDE_MEM_CHROMA_ENABLED`` is ``false``; it writes a server only in
``remote`` mode (the default, ``local``, is a store in claude-mem's own data directory), at
``CLAUDE_MEM_CHROMA_HOST``/``_PORT`` (default 127.0.0.1:8000), tenant and database (default
``default_tenant``/``default_database``), always into ``cm__claude-mem``. Whether its worker runs
is its ``/api/health`` on ``CLAUDE_MEM_WORKER_HOST``/``_PORT`` (default 127.0.0.1 and
37700 + uid % 100), asked only when its settings point at this store.

Both at once coexist exactly (measured by ``tests/system/test_two_writers.py``; figures in
docs/claude-mem.md): same ids and values, claude-mem never deletes or rewrites what it wrote, and
memsync leaves what is already right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from memsync.config.claude_mem.user_settings import claude_mem_setting, default_worker_port
from memsync.config.claude_mem.version import worker_version

CLAUDE_MEM_COLLECTION = "cm__claude-mem"  # ChromaSync("claude-mem"): the only collection 13.x writes
DEFAULTS = {"CLAUDE_MEM_CHROMA_ENABLED": "true", "CLAUDE_MEM_CHROMA_MODE": "local",
            "CLAUDE_MEM_CHROMA_HOST": "127.0.0.1", "CLAUDE_MEM_CHROMA_PORT": "8000",
            "CLAUDE_MEM_CHROMA_TENANT": "default_tenant", "CLAUDE_MEM_CHROMA_DATABASE": "default_database",
            "CLAUDE_MEM_WORKER_HOST": "127.0.0.1"}
LOOPBACK = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
HEALTH_TIMEOUT_S = 0.5  # a loopback answer; status must not hang on a stuck port

Probe = Callable[[str, int], bool]


def claude_mem_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """claude-mem's Chroma and worker settings, as its worker resolves them (module docstring)."""
    defaults = {**DEFAULTS, "CLAUDE_MEM_WORKER_PORT": str(default_worker_port())}
    return {key: claude_mem_setting(key, default, environ) for key, default in defaults.items()}


def health(host: str, port: int) -> bool:
    """claude-mem's worker answers ``/api/health`` there (with a version)."""
    return worker_version(port, HEALTH_TIMEOUT_S, host) is not None


def _same_host(a: str, b: str) -> bool:
    return a == b or (a in LOOPBACK and b in LOOPBACK)


def upstream_writers(upstream_store: bool, store: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                     probe: Probe = health) -> dict[str, Any]:
    """Who writes the upstream-readable store at ``store`` (``host``, ``port``, ``tenant``,
    ``database``, ``collection``, as ``worker.checks.status.upstream_state`` gives them): ``writing``
    lists ``memsync`` and/or ``claude-mem``; ``claude_mem`` says where claude-mem's Chroma sync
    writes and whether its worker answers; ``line`` is the sentence ``memsync status`` prints."""
    cm = claude_mem_settings(environ)
    enabled = cm["CLAUDE_MEM_CHROMA_ENABLED"] != "false"
    remote = cm["CLAUDE_MEM_CHROMA_MODE"] == "remote"
    port = int(cm["CLAUDE_MEM_CHROMA_PORT"]) if cm["CLAUDE_MEM_CHROMA_PORT"].isdigit() else None
    server = (_same_host(cm["CLAUDE_MEM_CHROMA_HOST"], str(store.get("host"))) and port == store.get("port")
              and cm["CLAUDE_MEM_CHROMA_TENANT"] == store.get("tenant", "default_tenant")
              and cm["CLAUDE_MEM_CHROMA_DATABASE"] == store.get("database", "default_database"))
    here = enabled and remote and server and store.get("collection") == CLAUDE_MEM_COLLECTION
    worker_port = int(cm["CLAUDE_MEM_WORKER_PORT"]) if cm["CLAUDE_MEM_WORKER_PORT"].isdigit() else None
    running = bool(here and worker_port is not None and probe(cm["CLAUDE_MEM_WORKER_HOST"], worker_port))
    writing = ["memsync"] * upstream_store + ["claude-mem"] * running
    target = ("off (CLAUDE_MEM_CHROMA_ENABLED=false)" if not enabled else
              f"its own local store (CLAUDE_MEM_CHROMA_MODE={cm['CLAUDE_MEM_CHROMA_MODE']})" if not remote else
              "this store" if here else
              f"{CLAUDE_MEM_COLLECTION} on this server, not this store" if server else
              f"another server ({cm['CLAUDE_MEM_CHROMA_HOST']}:{cm['CLAUDE_MEM_CHROMA_PORT']})")
    if running:
        who = "memsync and claude-mem (both write the same ids and values; they coexist)" if upstream_store \
            else "claude-mem"
    elif here:
        who = f"{' and '.join(writing) or 'nobody'}; claude-mem's settings point its Chroma sync here, but its " \
              f"worker does not answer on {cm['CLAUDE_MEM_WORKER_HOST']}:{cm['CLAUDE_MEM_WORKER_PORT']}"
    else:
        who = f"{' and '.join(writing) or 'nobody'}; claude-mem's Chroma sync: {target}"
    worker = f"{cm['CLAUDE_MEM_WORKER_HOST']}:{cm['CLAUDE_MEM_WORKER_PORT']}"
    return {"writing": writing, "line": f"upstream store writers: {who}",
            "claude_mem": {"chroma": target, "targets_this_store": here, "running": running, "worker": worker}}
