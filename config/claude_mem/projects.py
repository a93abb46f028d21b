"""Excluded projects: claude-mem's setting, with its semantics, plus memsync's own of the same meaning.

claude-mem (``src/utils/project-filter.ts``) reads ``CLAUDE_MEM_EXCLUDED_PROJECTS``: comma-separated
glob patterns (``*`` within a path segment, ``**`` across segments, ``?`` one character, a leading
``~`` for the home directory), matched against a project's *path* and its base name; the
environment variable wins over claude-mem's ``settings.json`` (in its data directory; keys may sit
under ``env``). memsync adds ``excluded_projects`` (same syntax); both apply.

memsync only sees the project *name* claude-mem stored (the git root's base name), not the path. So
each pattern is matched against the name as a whole and, when it has a directory part, through its
last segment: ``~/work/secret-*`` excludes ``secret-api``. A pattern whose last segment is only
wildcards (``~/clients/**``) names a directory, whose projects a name cannot tell: it is ignored,
and listed as such (``ProjectExclusion.ignored``, said by ``memsync status``).

A row is excluded when its project, or the project it was merged into, is. Excluded rows are
neither synced nor searchable: the sync derives no documents for them (a reconcile removes what
was stored before the setting named them), and every search's SQL leaves them out.

claude-mem's own project, ``observer-sessions`` (``INTERNAL_PROJECTS``), is always excluded, with no
pattern naming it: it holds claude-mem's observer agent's messages, not the user's memory.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from memsync.config.claude_mem.user_settings import SETTINGS_FILE, data_dir_choice, read_settings_file

EXCLUDED_KEY = "CLAUDE_MEM_EXCLUDED_PROJECTS"
SQL_FUNCTION = "memsync_excluded"  # (project, merged_into_project) -> 1 when excluded

# claude-mem's observer agent runs in DATA_DIR/observer-sessions, and the base name of that folder
# is its project (``OBSERVER_SESSIONS_PROJECT``, ``src/shared/paths.ts``). Versions from 12.1.2
# (upstream #2104 names 12.1.2 to 12.3.9) stored that agent's own system prompt, continuation
# prompts and tool-event XML as user prompts of this project (upstream #2104, #2093: 65% of one
# user's prompts). Later versions record nothing there (session-init's ``shouldTrackProject``), and
# a one-time migration ("v12.4.3 cleanup") deletes those sessions with their rows. It leaves them
# where it does not run: a database outside claude-mem's data directory,
# ``CLAUDE_MEM_SKIP_CLEANUP_V12_4_3=1``, too little disk for its backup, a copy. Such rows are never
# a memory of the user's work: always excluded.
INTERNAL_PROJECTS = ("observer-sessions",)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """upstream's ``globToRegex``: ``**`` any characters, ``*`` any but ``/``, ``?`` one but ``/``."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        ch = pattern[i]
        out.append("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch))
        i += 1
    return re.compile("".join(out))


def split_patterns(value: str) -> tuple[str, ...]:
    """The patterns of a comma-separated setting, trimmed, blanks dropped."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass(frozen=True)
class ProjectExclusion:
    """The effective patterns and how a project name is matched (see the module docstring)."""

    patterns: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()  # patterns that name a directory only (see the module docstring)
    _regexes: tuple[re.Pattern[str], ...] = field(default=(), repr=False, compare=False)

    @classmethod
    @functools.lru_cache(maxsize=16)
    def of(cls, patterns: tuple[str, ...]) -> ProjectExclusion:
        """The exclusion of these patterns (one instance per pattern list: every search opens its
        connections with it, and the worker looks at it every step)."""
        regexes: list[re.Pattern[str]] = []
        ignored: list[str] = []
        for raw in patterns:
            pattern = raw.replace("\\", "/")
            last = pattern.rstrip("/").rsplit("/", 1)[-1]
            if "/" in pattern.rstrip("/") and not last.strip("*"):
                ignored.append(raw)
                continue
            regexes.append(_glob_regex(last if "/" in pattern else pattern))
        return cls(tuple(patterns), tuple(ignored), tuple(regexes))

    @property
    def patterned(self) -> bool:
        """Whether a pattern can exclude a project (without one, only ``INTERNAL_PROJECTS`` are)."""
        return bool(self._regexes)

    def excluded(self, project: object, merged: object = None) -> bool:
        """Whether a row of ``project`` (merged into ``merged``) is excluded."""
        return self._matches(project) or self._matches(merged)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - instances are few (see ``of``); called per scanned row
    def _matches(self, name: object) -> bool:
        return isinstance(name, str) and bool(name) and (
            name in INTERNAL_PROJECTS or any(r.fullmatch(name) for r in self._regexes))

    def sql(self, project: object, merged: object) -> int:
        """``excluded`` as the SQL function ``memsync_excluded`` (registered on a connection), given
        the names as blobs (``condition`` casts them: text that is not UTF-8 cannot fail the call)."""
        return 1 if self.excluded(_text(project), _text(merged)) else 0

    def condition(self, project: str, merged: str = "NULL") -> str:
        """SQL that is 1 when a row whose project is the SQL expression ``project`` (merged into
        ``merged``, an expression or NULL) is excluded, else 0. Without patterns, plain SQL on
        claude-mem's own project name: no Python call per row (a count or a scan stays SQLite's
        own loop). With patterns, the function ``SQL_FUNCTION`` (registered by the connection's
        owner), which matches both."""
        if self.patterned:
            return f"{SQL_FUNCTION}(CAST({project} AS BLOB), CAST({merged} AS BLOB))"
        tests = [f"coalesce({self.named(e)}, 0)" for e in (project, merged) if e != "NULL"]
        return "(" + " OR ".join(tests or ["0"]) + ")"

    def named(self, project: str) -> str:
        """SQL true when the project expression ``project`` is excluded, NULL for a NULL project:
        without patterns a plain ``IN`` on claude-mem's own project name, which an index on the
        column can answer (a subquery of excluded sessions is then a lookup, not a scan)."""
        if self.patterned:
            return f"{SQL_FUNCTION}(CAST({project} AS BLOB), NULL)"
        return f"{project} IN ({', '.join(_sql_text(n) for n in INTERNAL_PROJECTS)})"


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _text(value: object) -> object:
    """A name as the SQL function gets it (a blob) as text; anything else as it is."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def claude_mem_patterns(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """claude-mem's ``CLAUDE_MEM_EXCLUDED_PROJECTS``: the environment's, else its settings file's."""
    env = os.environ if environ is None else environ
    if EXCLUDED_KEY in env:
        return split_patterns(env[EXCLUDED_KEY])
    return split_patterns(read_settings_file(data_dir_choice(env).path / SETTINGS_FILE).get(EXCLUDED_KEY, ""))


def exclusion(own: str, environ: Mapping[str, str] | None = None) -> ProjectExclusion:
    """memsync's ``excluded_projects`` (``own``) and claude-mem's setting, together."""
    return ProjectExclusion.of(split_patterns(own) + claude_mem_patterns(environ))
