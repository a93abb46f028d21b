"""The ``memsync`` command: a thin click layer over the worker and search libraries.

This module is the group and its registry; the subcommands live in :mod:`memsync.commands`, one
module per family, on the shared helpers of :mod:`memsync.commands.options`. Results go to
stdout (``--json`` for machines), messages and logs to stderr. Exit codes: 0 ok, 1 failure or
drift found, 2 bad usage or configuration (a bad setting names its key).
"""

from __future__ import annotations

import click

from memsync.commands.claude_code import claude_code
from memsync.commands.db import db, demo
from memsync.commands.search import search, timeline
from memsync.commands.serve import mcp, serve
from memsync.commands.sync import resync, settings_cmd, status, verify, worker


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="memsync")
def main() -> None:
    """memsync: semantic search over an AI coding agent's memory (claude-mem SQLite → Chroma).

    Settings come from flags, MEMSYNC_* environment variables, a TOML file, then defaults;
    `memsync settings` shows the effective values and where each came from.
    """


for command in (settings_cmd, resync, verify, status, worker, search, timeline, mcp, serve, claude_code, db, demo):
    main.add_command(command)


if __name__ == "__main__":
    main()
