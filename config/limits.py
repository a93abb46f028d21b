"""What every front end accepts in a search request (the CLI and its ``--batch`` lines, the HTTP API,
the MCP tools): one policy, applied by the one parser (``search.request``). Its own module so that
the CLI's options can show the bounds without loading the search library.
"""

from __future__ import annotations

MAX_LIMIT = 100  # results per page; agents should start small and page with offset
MAX_OFFSET = 10_000
MAX_WINDOW_DAYS = 36_500
MAX_FILTER_VALUES = 20  # types / concepts / files per request
MAX_PLATFORM_CHARS = 100  # platform names are short (claude, codex, cursor, ...)
# Records on each side of a timeline's anchor. One bound for every front end: the CLI allowed 200,
# the servers 50. 50 keeps a whole timeline (50 + anchor + 50) about the size of the largest search
# page (MAX_LIMIT), the answer an agent's context is sized for.
MAX_DEPTH = 50
MAX_IDS = 100  # records per get (get_observations): an agent opens the few it needs
MAX_KEPT = 10_000  # claude-mem's get_observations limit, which it takes unbounded: the records kept of those fetched
