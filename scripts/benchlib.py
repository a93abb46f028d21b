"""What every benchmark script does at the end: print an aligned table and write its JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def report(rows: list[tuple[str, str]], result: dict[str, Any], out: Path) -> None:
    """Print ``rows`` as a two-column table and write ``result`` to ``out`` as JSON."""
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")
