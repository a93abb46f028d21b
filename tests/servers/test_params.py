"""search.request and servers.params: the one validator of CLI, batch, MCP and HTTP input (more of
it is driven through both servers in test_mcp.py and test_http.py, and the CLI in test_cli_search.py)."""

from __future__ import annotations

import pytest

from memsync.search.request import BadRequest, bounded


def test_a_bound_check_describes_a_number_too_large_to_print() -> None:
    """repr() of an int past 4,300 digits would raise instead of refusing it."""
    with pytest.raises(BadRequest, match="limit must be an integer from 1 to 100, got a larger number"):
        bounded(10**5000, "limit", 1, 100)
    with pytest.raises(BadRequest, match="got 1000000000000000000000000000000$"):
        bounded(10**30, "limit", 1, 100)
