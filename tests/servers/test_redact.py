"""servers.redact: what a client sees of a server message keeps no file path."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.config.settings import Settings
from memsync.servers.redact import public

SETTINGS = Settings(db=Path("/home/ann/.claude-mem/claude-mem.db"), data_dir=Path("/home/ann/.memsync"))


@pytest.mark.parametrize(("text", "shown"), [
    ("no managed Chroma server running for /home/ann/.memsync (is `memsync worker` up?)",
     "no managed Chroma server running for the data directory (is `memsync worker` up?)"),
    ("cannot read /home/ann/.memsync/chroma/server.json: gone", "cannot read DATA_DIR/chroma/server.json: gone"),
    ("stopped at /home/ann/.memsync.", "stopped at the data directory."),
    ("database not found: /home/ann/.claude-mem/claude-mem.db", "database not found: claude-mem.db"),
    ("a sibling /home/ann/.memsync-old and /etc/hosts", "a sibling <path> and <path>"),
    ("Chroma at http://10.0.0.5:8000/api/v2: refused", "Chroma at http://10.0.0.5:8000/api/v2: refused"),
])
def test_paths_are_named_or_hidden(text: str, shown: str) -> None:
    assert public(text, SETTINGS) == shown


def test_without_settings_every_path_is_hidden() -> None:
    assert public("no server for /home/ann/.memsync") == "no server for <path>"
    assert public(None) is None and public("") == ""


def test_a_relative_data_directory_is_not_matched_as_a_word() -> None:
    relative = SETTINGS.model_copy(update={"data_dir": Path("data")})
    assert public("the data in data/x is fine", relative) == "the data in data/x is fine"

