"""Rows → what a caller gets: full records (logical column names, JSON lists parsed) and results.

A page is a list of :class:`PageEntry` in final order; hydration asks SQLite once per kind
(``IN`` lists) and keeps that order, dropping rows deleted since they were found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from memsync.config.claude_mem.schema import SUMMARY_FIELDS, TABLES, Kind
from memsync.config.claude_mem.values import LIST_COLUMNS, parse_list
from memsync.config.inlists import chunks
from memsync.search.models import Format, Key, Result, Signal
from memsync.search.sql import ALIAS, SourceRows
from memsync.search.vectorstore import RowHit

TITLE_CHARS = 120


class PageEntry(NamedTuple):
    """One row of a page: its key, its fused score (or, in date order, its cosine), which sides found
    it, its confidence, and the raw signals the relevance model read."""

    key: Key
    score: float
    semantic: bool
    lexical: bool
    confidence: float | None = None  # the relevance model's chance that the row is relevant
    explain: Mapping[str, float] | None = None  # the model's ingredients (``relevance.explain``)


def records(rows: SourceRows, kind: Kind, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Full rows by id (one ``IN`` query per chunk; logical column names; JSON lists parsed;
    prompts carry their session's project); rows of excluded projects are left out."""
    if not ids:
        return {}
    table = TABLES[kind]
    select = rows.schema.select_list(table, ALIAS)
    extra = f", {rows.project_expr(kind)} AS project" if kind is Kind.PROMPT else ""
    # Rows of excluded projects do not exist for a search, whichever index still holds them.
    hidden = f" AND {rows.not_excluded(kind)}"
    out: dict[int, dict[str, Any]] = {}
    for chunk in chunks(list(dict.fromkeys(ids))):
        sql = (f"SELECT {select}{extra} FROM {table} {ALIAS} WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))})"
               f"{hidden}")
        for r in rows.query(sql, chunk):
            row = {k: r[k] for k in r.keys()}  # noqa: SIM118 - iterating a Row yields values
            for key in LIST_COLUMNS & row.keys():
                if row[key] is not None:
                    row[key] = parse_list(row[key])
            row["kind"] = kind.value
            out[int(row["id"])] = row
    return out


def results(rows: SourceRows, page: Sequence[PageEntry], similarity: Mapping[Key, RowHit],
            format: Format, fused: bool = True) -> list[Result]:
    """The page's rows as results, in page order; ``similarity`` holds the semantic hits (cosine
    and best field) of the rows the vector side found; ``fused``: the entries' scores are fused
    RRF values (relevance order), kept as each result's ``fused`` signal."""
    by_kind: dict[Kind, list[int]] = {}
    for (kind, i), *_ in page:
        by_kind.setdefault(kind, []).append(i)
    found = {k: records(rows, k, ids) for k, ids in by_kind.items()}
    out: list[Result] = []
    for entry in page:
        row = found.get(entry.key[0], {}).get(entry.key[1])
        if row is None:
            continue  # deleted since it was indexed
        out.append(_result(entry, row, similarity.get(entry.key), format, fused))
    return out


def title_of(kind: Kind, row: dict[str, Any]) -> str:
    """A one-line title: the observation's title, or the first line of the main text."""
    if kind is Kind.OBSERVATION:
        text = row.get("title") or row.get("subtitle") or row.get("narrative") or row.get("text") or ""
    elif kind is Kind.SUMMARY:
        text = next((row.get(f) for f in SUMMARY_FIELDS if row.get(f)), "") or ""
    else:
        text = row.get("prompt_text") or ""
    line = " ".join(str(text).split())
    return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 3] + "..."


def _result(entry: PageEntry, row: dict[str, Any], hit: RowHit | None, format: Format, fused: bool) -> Result:
    kind, sem, lex = entry.key[0], entry.semantic, entry.lexical
    signal = Signal.BOTH if sem and lex else Signal.SEMANTIC if sem else Signal.LEXICAL
    return Result(
        kind=kind, id=int(row["id"]), score=entry.confidence, signals=signal,
        fused=float(entry.score) if fused else None, explain=entry.explain,
        similarity=hit.similarity if hit else None,
        created_at_epoch=int(row["created_at_epoch"]) if row.get("created_at_epoch") is not None else None,
        project=row.get("project"), type=row.get("type") if kind is Kind.OBSERVATION else None,
        title=title_of(kind, row), field=hit.field if hit else None,
        record=row if format is Format.FULL else None,
    )
