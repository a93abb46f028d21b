"""The ``memsync`` executable's entry point (and ``python -m memsync``'s).

``memsync claude-code inject`` is Claude Code's per-prompt hook: a new process per prompt, where
loading the click group and its commands (about 0.9 s of imports) would cost more than the whole
answer. So it goes to the standard-library client (:mod:`memsync.inject_client`) before anything
else loads; with ``--help`` it goes to the click command like every other command.
"""

from __future__ import annotations

import sys

HOOK = ["claude-code", "inject"]


def main() -> None:
    """Run the command line in ``sys.argv``."""
    args = sys.argv[1:]
    if args[:2] == HOOK and not {"-h", "--help"} & set(args[2:]):
        from memsync.inject_client import main as hook

        sys.exit(hook(args[2:]))
    from memsync.main import main as cli

    cli(prog_name="memsync")
