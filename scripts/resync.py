"""``scripts/resync``: a thin wrapper for ``memsync resync`` (same flags, same exit codes)."""

from __future__ import annotations

import sys

from scripts.cli import main as cli_main


def main(argv: list[str] | None = None) -> None:
    """Run ``memsync resync`` with these arguments."""
    cli_main(["resync", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
