"""What a client of the servers sees of a server-side message: no file paths. The data directory
is named (``the data directory``, ``DATA_DIR/chroma/...``), the agent's database by its file name,
and any other absolute path stands as ``<path>``: the message stays useful to an agent or a
remote caller and tells neither where memsync's files are nor whose home they are in.
The server's own log keeps the whole message."""

from __future__ import annotations

import re
from pathlib import Path

from memsync.config.settings import Settings

# An absolute, home or relative (./, ../) path, not one inside a word or URL.
_PATH = re.compile(r"(?<![\w.:/])(?:~|\.{1,2})?(?:/[^\s/:'\"(),;]+)+/?")


def _named(text: str, path: Path, name: str, inside: str | None) -> str:
    """``text`` with ``path`` as ``name`` and any path under it as ``inside/rest`` (an absolute
    path only: a relative one could be any word)."""
    if not path.is_absolute() or str(path) == "/":
        return text
    where = re.escape(str(path).rstrip("/"))
    if inside is not None:
        text = re.sub(rf"(?<![\w.]){where}/(?=[^\s/])", inside + "/", text)
    return re.sub(rf"(?<![\w./]){where}/?(?![\w-]|\.\w)", name, text)  # a sentence's full stop may follow


def public(text: str | None, settings: Settings | None = None) -> str | None:
    """A message fit for a client: with ``settings``, the data directory as ``the data directory``
    (``DATA_DIR/...`` beneath it) and the database as its file name; other paths as ``<path>``."""
    if not text:
        return text
    if settings is not None:
        text = _named(text, settings.db, settings.db.name, None)
        text = _named(text, settings.data_dir, "the data directory", "DATA_DIR")
    return _PATH.sub("<path>", text)
