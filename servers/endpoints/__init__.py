"""The HTTP API's endpoints, one module per family; ``FAMILIES`` is the registration table, in the
order the OpenAPI document lists the paths.

To add an endpoint: define it in its family's ``register`` (or a new module with its own
``register``, added here) with ``dependencies=api.guarded`` unless it must answer without the
token, its values validated through ``servers.params`` (bounds from ``config.limits``); test it
beside the family's tests, and write the schema snapshots again (``tests/servers/test_schemas.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from memsync.servers.endpoints import own, records, search, status
from memsync.servers.endpoints.kit import ApiKit, Metrics, token_required

FAMILIES: tuple[Callable[[ApiKit], None], ...] = (own.register, search.register, records.register, status.register)

__all__ = ["FAMILIES", "ApiKit", "Metrics", "token_required"]
