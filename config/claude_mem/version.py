"""Which claude-mem a user runs, and the newest database schema memsync is tested with.

The installed version is read as upstream reads its own (``src/shared/worker-utils.ts``,
``resolveWorkerScript``, its "version oracle"; ``src/shared/paths.ts``): in Claude Code's config
directory (``CLAUDE_CONFIG_DIR``, else ``~/.claude``), each ``plugins/cache/thedotmack/claude-mem/<v>``
directory (a name starting with a digit, not stamped ``.orphaned_at``) and the marketplace clone
``plugins/marketplaces/thedotmack`` are candidates when their worker script exists
(``plugin/scripts/worker-service.cjs``, or ``scripts/worker-service.cjs`` in a cache directory);
the highest version wins: a cache directory's name, the marketplace clone's ``package.json``.
Without one, the running worker is asked (``GET /api/health`` on loopback, its
``version``) on claude-mem's port: ``CLAUDE_MEM_WORKER_PORT`` in the environment, else in
claude-mem's ``settings.json``, else upstream's default ``37700 + uid % 100``. Else ``unknown``.

Only read, never written; the worker is asked once, with a short timeout.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memsync.config.claude_code.registrations import config_dir
from memsync.config.claude_mem.user_settings import claude_mem_setting, default_worker_port

# The newest claude-mem schema (``schema_versions`` max) memsync is tested with: what the pinned
# release (tests/upstream/versions.json, claude-mem 13.25.3) writes. tests/system/test_real_claude_mem
# asserts the real worker writes exactly this; moving the pin moves it.
TESTED_SCHEMA_VERSION = 52
TESTED_RELEASE = "13.25.3"

PORT_KEY = "CLAUDE_MEM_WORKER_PORT"
UNKNOWN = "unknown"
_WORKER_SCRIPT = ("scripts", "worker-service.cjs")


@dataclass(frozen=True, slots=True)
class ClaudeMemVersion:
    """A claude-mem version and where it was read (``unknown`` and why when nowhere)."""

    version: str
    source: str

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"version": self.version, "source": self.source}


def _package_version(path: Path) -> str | None:
    try:
        version = json.loads(path.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        return None
    return version if isinstance(version, str) and version else None


def _has_worker(root: Path) -> bool:
    plugin = root / "plugin" if (root / "plugin" / "scripts").exists() else root
    return plugin.joinpath(*_WORKER_SCRIPT).is_file()


def _version_key(version: str) -> tuple[int, int, int, int, str]:
    """Upstream's ``compareVersionsDescending``, as an ascending key: major.minor.patch, a release
    above its prereleases, then the text."""
    parts = [int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in version.split("-")[0].split(".")[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2], 0 if "-" in version else 1, version


def installed_version(environ: Mapping[str, str] | None = None) -> ClaudeMemVersion | None:
    """The claude-mem plugin Claude Code runs, by upstream's rule (module docstring); None when
    none is installed."""
    env = os.environ if environ is None else environ
    plugins = config_dir(env) / "plugins"
    candidates: list[tuple[str, Path]] = []
    cache = plugins / "cache" / "thedotmack" / "claude-mem"
    try:
        entries = sorted(cache.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        if entry.name[:1].isdigit() and entry.is_dir() and not (entry / ".orphaned_at").exists() and _has_worker(entry):
            candidates.append((entry.name, entry))  # upstream names a cache install by its directory
    marketplace = plugins / "marketplaces" / "thedotmack"
    version = _package_version(marketplace / "package.json")
    if version is not None and _has_worker(marketplace / "plugin"):
        candidates.append((version, marketplace / "package.json"))
    if not candidates:
        return None
    version, where = max(candidates, key=lambda c: _version_key(c[0]))
    return ClaudeMemVersion(version, str(where))


def worker_port(environ: Mapping[str, str] | None = None) -> int:
    """claude-mem's worker port: the environment, else its settings.json, else upstream's default."""
    value = claude_mem_setting(PORT_KEY, "", environ).strip()
    return int(value) if value.isdigit() and 0 < int(value) < 65536 else default_worker_port()


def worker_version(port: int, timeout_s: float, host: str = "127.0.0.1") -> str | None:
    """The version the claude-mem worker on ``host``:``port`` reports (``GET /api/health``; the
    body counts on an error status too, as upstream reads it), or None when none answers."""
    url = f"http://{'127.0.0.1' if host == 'localhost' else host}:{port}/api/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (fixed loopback URL)
            body = response.read(65536)
    except urllib.error.HTTPError as exc:
        body = exc.read(65536)
    except (OSError, ValueError, http.client.HTTPException):
        # HTTPException: something other than an HTTP server answered, or the probe connected to
        # itself (a loopback connect to a free port in the ephemeral range can pick that same port
        # as its source and read back its own request); either way no worker answers there.
        return None
    try:
        version = json.loads(body).get("version")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) and version else None


def claude_mem_version(timeout_s: float, environ: Mapping[str, str] | None = None) -> ClaudeMemVersion:
    """The installed plugin's version, else the running worker's, else ``unknown``."""
    installed = installed_version(environ)
    if installed is not None:
        return installed
    port = worker_port(environ)
    running = worker_version(port, timeout_s)
    if running is not None:
        return ClaudeMemVersion(running, f"the worker on 127.0.0.1:{port} (/api/health)")
    return ClaudeMemVersion(UNKNOWN, f"no plugin installed, no worker on 127.0.0.1:{port}")


def schema_warning(schema_version: int | None) -> str | None:
    """A warning when the database's schema is newer than the newest memsync is tested with."""
    if schema_version is None or schema_version <= TESTED_SCHEMA_VERSION:
        return None
    return (f"the database's claude-mem schema version {schema_version} is newer than the newest memsync is "
            f"tested with ({TESTED_SCHEMA_VERSION}, claude-mem {TESTED_RELEASE}); check memsync's release notes")
