"""Which agent recorded a session: claude-mem's ``platform_source``, normalised as upstream does.

claude-mem (``src/shared/platform-source.ts``) stores a session's platform as the hook reported
it and normalises it when reading: trimmed, lower case, runs of white space to one dash;
``transcript`` and anything containing ``codex`` is ``codex``, then ``cursor``, then ``claude``;
empty or missing is ``claude``. memsync applies the same rule to the stored values and to a
filter's value, so a filter on ``claude`` also finds rows recorded before upstream normalised
(``Claude Code``, ``claude-desktop``), and a row whose session is missing counts as ``claude``.
"""

from __future__ import annotations

import functools
import re

DEFAULT_PLATFORM = "claude"
_SPACES = re.compile(r"\s+")


@functools.lru_cache(maxsize=1024)  # the SQL function calls it per scanned row; values are few
def normalize_platform(value: object) -> str:
    """The platform a stored ``platform_source`` (or a filter's value) stands for."""
    if not isinstance(value, str):
        return DEFAULT_PLATFORM
    source = _SPACES.sub("-", value.strip().lower())
    if not source:
        return DEFAULT_PLATFORM
    if source == "transcript" or "codex" in source:
        return "codex"
    if "cursor" in source:
        return "cursor"
    if "claude" in source:
        return "claude"
    return source
