"""The servers' layout stays one a newcomer can extend: every tool and endpoint family module is
in its registration table (no function grows back into a factory of everything: tests/test_code_shape.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import pytest

from memsync.servers import endpoints, tools

SERVERS = Path(__file__).resolve().parents[2] / "servers"


@pytest.mark.parametrize(("package", "families", "helpers"), [
    ("tools", tools.FAMILIES, {"args", "kit"}),
    ("endpoints", endpoints.FAMILIES, {"kit"}),
])
def test_every_family_module_is_registered(package: str, families: tuple[Callable[..., None], ...],
                                           helpers: set[str]) -> None:
    """A module of tools/ or endpoints/ (but the shared helpers) is a family whose ``register`` is in FAMILIES."""
    names = {p.stem for p in (SERVERS / package).glob("*.py")} - {"__init__"} - helpers
    modules = {name: importlib.import_module(f"memsync.servers.{package}.{name}") for name in names}
    assert {name for name, module in modules.items() if module.register in families} == names
    assert len(families) == len(names)

