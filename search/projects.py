"""The projects of the agent's database with their row counts, for a project list people browse.

Counted read-only from the source database (``search.sql.SourceRows``), all time, per kind. A
project counts the rows a project filter finds (``SourceRows.where``): its own rows and the rows
merged into it (``merged_into_project``); prompts count under their session's project. Excluded
projects are not listed; rows without a project are not either (no filter selects them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memsync.config.claude_mem.schema import KINDS, SESSIONS_TABLE, TABLES, Kind
from memsync.config.kinds import plural
from memsync.search.sql import ALIAS, SourceRows


@dataclass(frozen=True, slots=True)
class ProjectCount:
    """One project: its rows in all, and per kind (plural kind names)."""

    project: str
    count: int
    kinds: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"project", "count", "kinds": {"observations": n, ...}}``."""
        return {"project": self.project, "count": self.count, "kinds": dict(self.kinds)}


def kind_counts(rows: SourceRows, kind: Kind) -> dict[str, int]:
    """Rows of ``kind`` per project (one statement, bounded by the connection's time limit)."""
    table = TABLES[kind]
    hidden = f" AND {rows.not_excluded(kind)}"
    if kind is Kind.PROMPT:  # a join, not project_expr's lookup per row: one pass over both tables
        match = rows.schema.session_match(kind, ALIAS, "s")
        own = f"SELECT s.project AS p FROM {table} {ALIAS} JOIN {SESSIONS_TABLE} s ON {match} WHERE 1{hidden}"
    else:
        own = f"SELECT {ALIAS}.project AS p FROM {table} {ALIAS} WHERE 1{hidden}"
    merged = None if kind is Kind.PROMPT else rows.col(kind, "merged_into_project")
    if merged:  # a row merged into another project is found under both names
        own += (f" UNION ALL SELECT {merged} AS p FROM {table} {ALIAS} WHERE {merged} IS NOT NULL "
                f"AND {merged} != '' AND {merged} IS NOT {ALIAS}.project{hidden}")
    sql = f"SELECT p, count(*) FROM ({own}) WHERE p IS NOT NULL AND p != '' GROUP BY p"
    return {str(r[0]): int(r[1]) for r in rows.query(sql)}


def project_counts(rows: SourceRows) -> list[ProjectCount]:
    """Every project with its rows, most rows first (then by name)."""
    per_kind = {kind: kind_counts(rows, kind) for kind in KINDS}
    names = {p for counts in per_kind.values() for p in counts}
    out = [ProjectCount(p, sum(per_kind[k].get(p, 0) for k in KINDS),
                        {plural(k): per_kind[k].get(p, 0) for k in KINDS}) for p in names]
    return sorted(out, key=lambda c: (-c.count, c.project))
