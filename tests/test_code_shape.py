"""The code's shape stays readable: no function in the daemon, the search library or the servers
runs over ``MAX_LINES`` lines (``scripts/code_shape.py`` measures it: ``def`` to its last statement).

A function that long does several things a reader has to hold at once; a change to one of them
then means reading all of them. The CLI and config/ are not held to it (click commands and the
settings table read top to bottom), though they mostly keep it too.
"""

from __future__ import annotations

from scripts.code_shape import Function, functions, too_long

MAX_LINES = 80
HELD = ("worker", "search", "servers")


def test_no_function_in_the_daemon_search_or_servers_is_over_the_limit() -> None:
    found = too_long(functions(), MAX_LINES, HELD)
    assert not found, "functions over {} lines (split them by what each part does):\n{}".format(
        MAX_LINES, "\n".join(f"  {f.lines} lines  {f.where}" for f in found))


def test_the_check_finds_a_long_function() -> None:
    """The check is not vacuous: a function one line over the limit in a held folder is found, one
    at the limit or outside the held folders is not."""
    sample = [Function("worker/x.py:1 long", 0, MAX_LINES + 1), Function("search/y.py:1 fits", 0, MAX_LINES),
              Function("cli/z.py:1 elsewhere", 0, MAX_LINES + 50)]
    assert [f.where for f in too_long(sample, MAX_LINES, HELD)] == ["worker/x.py:1 long"]
