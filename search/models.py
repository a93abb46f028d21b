"""The search library's types: what a caller asks (filters, window, order) and what it gets back.

Every result names its kind and id together (ids are unique only within a kind), its score (the
relevance model's confidence: the calibrated chance that it is relevant, ``search.relevance``) and
the signals that found it; every response names the mode that answered and why, the window
applied, how many matches the window excluded, how many the confidence cutoff left out, and
per-stage timings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from memsync.config.claude_mem.schema import Kind
from memsync.config.errors import InvalidRequest
from memsync.config.filters import Filters as Filters  # where the search library's callers import it

Key = tuple[Kind, int]  # a row's identity outside SQLite: ids are unique only within a kind


class SearchError(InvalidRequest):
    """A request the engine cannot answer (bad anchor, unknown id); the message says why."""


class Mode(StrEnum):
    """Which retrieval answered."""

    HYBRID = "hybrid"
    SEMANTIC = "semantic"
    LEXICAL = "lexical"
    LEXICAL_FALLBACK = "lexical_fallback"


class Order(StrEnum):
    """Result order: fused relevance, or by date."""

    RELEVANCE = "relevance"
    NEWEST = "newest"
    OLDEST = "oldest"


class Format(StrEnum):
    """``index``: compact lines; ``full``: the hydrated row."""

    INDEX = "index"
    FULL = "full"


class Signal(StrEnum):
    """Which retrieval found a result."""

    SEMANTIC = "semantic"
    LEXICAL = "lexical"
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Window:
    """The epoch-millisecond range applied: ``days`` = 0 means all time."""

    days: int
    start_ms: int | None
    end_ms: int | None
    source: str  # "window" | "date_range" | "all_time"


def make_window(days: int | None, default_days: int, date_from: datetime | None = None,
                date_to: datetime | None = None, now: datetime | None = None) -> Window:
    """The window applied: a date range replaces the recency window; 0 days = all time."""
    if date_from or date_to:
        return Window(0, int(date_from.timestamp() * 1000) if date_from else None,
                      int(date_to.timestamp() * 1000) if date_to else None, "date_range")
    d = default_days if days is None else days
    if d < 0:
        raise SearchError("window_days must be 0 (all time) or positive")
    if d == 0:
        return Window(0, None, None, "all_time")
    now = now or datetime.now(UTC)
    return Window(d, int((now - timedelta(days=d)).timestamp() * 1000), None, "window")


@dataclass(frozen=True, slots=True)
class Scope:
    """The rows a search may return: its filters and the window applied (None: all time). The
    full-text sources also take ``after_id``: only rows with a larger id (the rows newer than the
    text index's watermark)."""

    filters: Filters = Filters()
    window: Window | None = None
    after_id: int = 0


@dataclass(slots=True)
class Result:
    """One row found. ``score`` is its confidence, the chance that it is relevant (relevance order,
    within the fused top ``relevance.DEPTH``); None in date order, in a listing, or past that depth."""

    kind: Kind
    id: int
    score: float | None
    signals: Signal  # which sides found it
    similarity: float | None = None  # cosine of the best field document, when semantic found it
    fused: float | None = None  # the fused RRF value (relevance order): the order before the relevance model
    explain: Mapping[str, float] | None = None  # the raw signals the relevance model read (``relevance.explain``)
    created_at_epoch: int | None = None
    project: str | None = None
    type: str | None = None
    title: str | None = None
    field: str | None = None  # the field document that matched best (semantic)
    record: dict[str, Any] | None = None  # the full row (format=full)

    @property
    def key(self) -> Key:
        """(kind, id): the identity of a row outside SQLite."""
        return (self.kind, self.id)

    @property
    def confidence(self) -> float | None:
        """The chance that the result is relevant: its score."""
        return self.score

    def signals_json(self) -> dict[str, Any]:
        """The raw signals: which sides found it, the fused value, the cosine, and the relevance
        model's ingredients (ranks are 1-based)."""
        out: dict[str, Any] = {"found_by": self.signals.value}
        if self.fused is not None:
            out["fused"] = round(self.fused, 4)
        if self.similarity is not None:
            out["similarity"] = round(self.similarity, 4)
        for name, value in (self.explain or {}).items():
            out.setdefault(name, round(value, 4) if isinstance(value, float) else value)
        return out

    def to_json(self) -> dict[str, Any]:
        """The stable JSON shape of a result (see docs/search.md, "The --json contract")."""
        out = {k: v for k, v in asdict(self).items()
               if (v is not None or k in ("score", "similarity")) and k not in ("fused", "explain")}
        out["kind"] = self.kind.value
        out["signals"] = self.signals_json()
        out["score"] = None if self.score is None else round(self.score, 4)
        if self.similarity is not None:
            out["similarity"] = round(self.similarity, 4)
        if self.created_at_epoch is not None:
            out["date"] = datetime.fromtimestamp(self.created_at_epoch / 1000).astimezone().isoformat(
                timespec="seconds")
        return out


@dataclass(frozen=True, slots=True)
class Coverage:
    """The semantic side of a search saw only part of its scope."""

    newest_missing_ms: int  # the newest row of the scope not embedded yet: complete after it
    missing_rows: int
    scope_rows: int

    @property
    def missing_share(self) -> float:
        """The share of the scope's rows that may lack documents (an upper bound: rows a pass
        stopped earlier had synced are counted until this pass passes them again)."""
        return self.missing_rows / self.scope_rows if self.scope_rows else 0.0

    @property
    def from_date(self) -> str:
        """From when on (ISO 8601, UTC, the next whole second after the newest row missing) every
        row of the scope is searchable by meaning."""
        when = datetime.fromtimestamp(self.newest_missing_ms // 1000 + 1, UTC)
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")

    def to_json(self) -> dict[str, Any]:
        """The response's ``coverage`` field."""
        return {"from_date": self.from_date, "missing_share": round(self.missing_share, 4),
                "missing_rows": self.missing_rows}

    def note(self, lexical: bool) -> str:
        """What the response's reason says (``lexical``: the full-text side searched every row)."""
        return (f"first sync in progress: by meaning, rows after {self.from_date} only; "
                f"{self.missing_share:.0%} of the rows searched ({self.missing_rows}) are not embedded yet"
                + (", full-text covers them" if lexical else ""))


@dataclass(slots=True)
class Response:
    """A search answer: results plus how it was produced."""

    mode: Mode
    results: list[Result]
    window: Window
    excluded_by_window: int = 0
    reason: str | None = None  # why the mode is degraded (lexical_fallback), or what stood in for a damaged index
    total: int | None = None  # matches that passed the cutoff, before offset/limit (relevance order: a lower bound)
    timings_ms: dict[str, float] = field(default_factory=dict)
    query: str = ""
    coverage: Coverage | None = None  # what the semantic side could not see yet (a first sync); None: all
    below_cutoff: int = 0  # matches left out for a confidence under ``min_confidence`` (0 with show_all)
    min_confidence: float | None = None  # the cutoff applied; None when none was (show_all, date order, no model)

    def below_note(self, how: str) -> str | None:
        """What an answer says of the results the cutoff left out (``how``: the front end's way to
        list them, ``--all`` or ``all=true``); None when it left none out."""
        if not self.below_cutoff:
            return None
        return f"{self.below_cutoff} below the cutoff; {how} to show"

    def to_json(self) -> dict[str, Any]:
        """The stable JSON contract: ``{"mode", "results": [...], ...}``."""
        return {
            "query": self.query,
            "mode": self.mode.value,
            "reason": self.reason,
            "window": {"days": self.window.days, "start_ms": self.window.start_ms, "end_ms": self.window.end_ms,
                       "source": self.window.source},
            "excluded_by_window": self.excluded_by_window,
            "coverage": None if self.coverage is None else self.coverage.to_json(),
            "total": self.total,
            "cutoff": {"min_confidence": self.min_confidence, "below": self.below_cutoff},
            "results": [r.to_json() for r in self.results],
            "timings_ms": {k: round(v, 2) for k, v in self.timings_ms.items()},
        }
