"""memsync's MCP tools, one module per family; ``FAMILIES`` is the registration table, in the
order a client lists the tools.

To add a tool: define it in its family's ``register`` (or a new module with its own ``register``,
added here), typed with the shared arguments of ``tools.args``, validated through
``servers.params`` and answered with ``ToolKit.answer``; test it beside the family's tests, and
write the schema snapshots again (``tests/servers/test_schemas.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from memsync.servers.tools import context, find, records, search
from memsync.servers.tools.kit import ToolKit

FAMILIES: tuple[Callable[[ToolKit], None], ...] = (search.register, find.register, context.register, records.register)

__all__ = ["FAMILIES", "ToolKit"]
