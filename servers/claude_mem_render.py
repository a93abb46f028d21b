"""Answers in claude-mem's shape, for the claude-mem profile of the MCP server.

claude-mem 13.25.3's search tools answer in markdown that its ``mem-search`` skill teaches an
agent to read: a ``Found N result(s) matching "q" (a obs, b sessions, c prompts)`` line, then
``### <day>`` sections with ``| ID | Time | T | Title | Read |`` tables whose ids are ``#123``,
``#S12`` and ``#P5``. The profile prints the same, so the skill's workflow works unchanged, with
two additions an agent can read past: a line under the first saying how memsync answered (its
mode, the window, what the window left out), and, in relevance order, the best match first.

claude-mem groups a page by day (oldest day first) and then by first file; memsync keeps that
grouping for date orders only, since in relevance order it would hide which result is best: there
the page is one table in rank order, each row's Time with its date (a day heading per row would
repeat the table header for nearly every row: relevance order jumps between days). The type icons
are those of claude-mem's default ``code`` mode (``plugin/modes/code.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from memsync.config.claude_mem.schema import Kind
from memsync.config.records import format_ref
from memsync.search import Response, Result
from memsync.servers.render import cell, cutoff_text, excluded_text, mode_text, window_text

# claude-mem's code mode: observation type -> icon (ModeManager.getTypeIcon; '📝' for any other).
TYPE_ICONS = {"bugfix": "●", "feature": "◆", "refactor": "↻", "change": "✓", "discovery": "○", "decision": "⚖",
              "security_alert": "⚠", "security_note": "⚷", "sensitive": "⊘"}
OTHER_ICON = "📝"
SUMMARY_ICON = "🎯"
PROMPT_ICON = "💬"
DITTO = "″"  # claude-mem's mark for a time equal to the row above, in a search
TIMELINE_DITTO = '"'  # and in a timeline
PROMPT_TITLE_CHARS = 60  # claude-mem cuts a prompt to 57 characters and "..."
TITLE_CHARS = 120
CHARS_PER_TOKEN = 4  # claude-mem's estimate of the tokens a record costs to read

SEARCH_HEADER = ["| ID | Time | T | Title | Read |", "|----|------|---|-------|------|"]
TIMELINE_HEADER = ["| ID | Time | T | Title | Tokens |", "|----|------|---|-------|--------|"]


def _local(epoch_ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch_ms / 1000).astimezone() if epoch_ms else None


def day(epoch_ms: int | None) -> str:
    """``Nov 25, 2026``, as claude-mem's ``formatDate``."""
    t = _local(epoch_ms)
    return f"{t:%b} {t.day}, {t.year}" if t else "Unknown date"


def clock(epoch_ms: int | None) -> str:
    """``6:54 AM``, as claude-mem's ``formatTime``."""
    t = _local(epoch_ms)
    return f"{t.hour % 12 or 12}:{t:%M} {t:%p}" if t else "?"


def dated_clock(epoch_ms: int | None) -> str:
    """``Nov 25, 2026 6:54 AM``: the Time column of a page in relevance order."""
    return f"{day(epoch_ms)} {clock(epoch_ms)}" if epoch_ms else "?"


def day_and_clock(epoch_ms: int | None) -> str:
    """``Nov 25, 6:54 AM``, as claude-mem's ``formatDateTime``."""
    t = _local(epoch_ms)
    return f"{t:%b} {t.day}, {clock(epoch_ms)}" if t else "?"


def icon(result: Result) -> str:
    """The ``T`` column: the observation type's icon, or the summary or prompt mark."""
    if result.kind is Kind.SUMMARY:
        return SUMMARY_ICON
    if result.kind is Kind.PROMPT:
        return PROMPT_ICON
    return TYPE_ICONS.get(result.type or "", OTHER_ICON)


def title(result: Result) -> str:
    """The ``Title`` column: an observation's title (``Untitled``), a summary's request, a prompt cut at
    60 characters as claude-mem cuts it."""
    text = " ".join(str(result.title or "").split())
    if result.kind is Kind.PROMPT and len(text) > PROMPT_TITLE_CHARS:
        text = text[:PROMPT_TITLE_CHARS - 3] + "..."
    return cell(text or ("Untitled" if result.kind is Kind.OBSERVATION else "-"), TITLE_CHARS)


def read_tokens(result: Result) -> str:
    """The ``Read`` column: ``~N`` tokens for an observation (title, subtitle, narrative, facts), ``-``
    for the others, as claude-mem estimates it."""
    record = result.record or {}
    if result.kind is not Kind.OBSERVATION:
        return "-"
    size = sum(len(_text(record.get(k))) for k in ("title", "subtitle", "narrative", "facts"))
    return f"~{-(-size // CHARS_PER_TOKEN)}"


def narrative_tokens(result: Result) -> str:
    """The ``Tokens`` column of a timeline: ``~N`` for the observation's narrative, as claude-mem
    estimates it there."""
    return f"~{-(-len(_text((result.record or {}).get('narrative'))) // CHARS_PER_TOKEN)}"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else str(value)


def first_file(result: Result) -> str:
    """The file section of an observation: its first modified file, else its first read one, else
    ``General`` (claude-mem's ``extractFirstFile``)."""
    record = result.record or {}
    if result.kind is Kind.OBSERVATION:
        for key in ("files_modified", "files_read"):
            files = record.get(key)
            if isinstance(files, list) and files and str(files[0]).strip():
                return str(files[0])
    return "General"


def _rows(results: Iterable[Result], anchor: tuple[Kind, int] | None = None,
          when: Callable[[int | None], str] = clock) -> list[str]:
    """Table rows: a search's (Read column) or, with an ``anchor``, a timeline's (Tokens column);
    ``when`` writes the Time column."""
    lines: list[str] = []
    last = ""
    ditto, tokens = (DITTO, read_tokens) if anchor is None else (TIMELINE_DITTO, narrative_tokens)
    for r in results:
        time = when(r.created_at_epoch)
        mark = " <- **ANCHOR**" if anchor == r.key else ""
        lines.append(f"| {format_ref(r.kind, r.id)} | {ditto if time == last else time} | {icon(r)} | "
                     f"{title(r)}{mark} | {tokens(r)} |")
        last = time
    return lines


def how_answered(resp: Response) -> str:
    """memsync's line under claude-mem's first: the mode, the window and what it left out."""
    parts = [f"memsync {mode_text(resp)}", f"window: {window_text(resp)}"]
    if resp.excluded_by_window:
        parts.append(excluded_text(resp, "a dateStart before them includes them"))
    if resp.below_cutoff:
        parts.append(cutoff_text(resp, "all=true"))
    return "_" + " · ".join(parts) + "_"


def search_text(resp: Response, query: str, by_date: bool) -> str:
    """A search page in claude-mem's shape; ``by_date`` groups it by day and file as claude-mem
    does, else it is one table in rank order with each row's date in its Time column."""
    if not resp.results:
        shown = query if query else "undefined"  # claude-mem prints a missing query as JavaScript does
        return f'No results found matching "{shown}"\n{how_answered(resp)}'
    counts = {k: sum(1 for r in resp.results if r.kind is k) for k in Kind}
    total = resp.total if resp.total is not None else len(resp.results)
    lines = [f'Found {total} result(s) matching "{query if query else "undefined"}" ({counts[Kind.OBSERVATION]} obs, '
             f"{counts[Kind.SUMMARY]} sessions, {counts[Kind.PROMPT]} prompts)", how_answered(resp), ""]
    if by_date:
        days: dict[str, list[Result]] = {day(e): [] for e in sorted(r.created_at_epoch or 0 for r in resp.results)}
        for r in resp.results:  # days oldest first; within a day, the page's own (date) order
            days[day(r.created_at_epoch or 0)].append(r)
        for name, members in days.items():
            lines += [f"### {name}", ""]
            by_file: dict[str, list[Result]] = {}
            for r in members:
                by_file.setdefault(first_file(r), []).append(r)
            for file, rows in by_file.items():
                lines += [f"**{cell(file, 200)}**", *SEARCH_HEADER, *_rows(rows), ""]
        return "\n".join(lines).rstrip() + "\n"
    lines += ["### Best match first", "", *SEARCH_HEADER, *_rows(resp.results, when=dated_clock)]
    return "\n".join(lines).rstrip() + "\n"


def _runs(results: Sequence[Result], key: Any) -> list[tuple[str, list[Result]]]:
    """Consecutive results with the same ``key``, in order."""
    runs: list[tuple[str, list[Result]]] = []
    for r in results:
        k = key(r)
        if runs and runs[-1][0] == k:
            runs[-1][1].append(r)
        else:
            runs.append((k, [r]))
    return runs


def timeline_text(results: Sequence[Result], anchor: tuple[Kind, int], query: str | None,
                  depth_before: int, depth_after: int) -> str:
    """A timeline in claude-mem's shape: observations in per-file tables, summaries and prompts as
    their own lines, oldest first, the anchor marked."""
    found = next((r for r in results if r.key == anchor), None)
    if query:
        lines = [f'# Timeline for query: "{query}"']
        if found is not None:
            lines.append(f"**Anchor:** {_anchor_name(found)}")
    else:
        lines = [f"# Timeline around anchor: {format_ref(*anchor).lstrip('#')}"]
    lines += [f"**Window:** {depth_before} records before -> {depth_after} records after | **Items:** {len(results)}",
              ""]
    for name, members in _runs(results, lambda r: day(r.created_at_epoch)):
        lines += [f"### {name}", ""]
        for kind_file, rows in _runs(members, lambda r: first_file(r) if r.kind is Kind.OBSERVATION else ""):
            if kind_file:
                lines += [f"**{cell(kind_file, 200)}**", *TIMELINE_HEADER, *_rows(rows, anchor=anchor), ""]
                continue
            for r in rows:
                lines += [*_other_lines(r, anchor), ""]
    return "\n".join(lines).rstrip() + "\n"


def _anchor_name(result: Result) -> str:
    names = {Kind.OBSERVATION: "Observation", Kind.SUMMARY: "Session summary", Kind.PROMPT: "User prompt"}
    return f"{names[result.kind]} {format_ref(result.kind, result.id)} - {title(result)}"


def _other_lines(result: Result, anchor: tuple[Kind, int]) -> list[str]:
    mark = " <- **ANCHOR**" if anchor == result.key else ""
    when = day_and_clock(result.created_at_epoch)
    if result.kind is Kind.SUMMARY:
        return [f"**{SUMMARY_ICON} {format_ref(result.kind, result.id)}** {title(result)} ({when}){mark}"]
    text = str((result.record or {}).get("prompt_text") or result.title or "")
    return [f"**{PROMPT_ICON} User Prompt {format_ref(result.kind, result.id)}** ({when}){mark}",
            *(f"> {line}" for line in (text.splitlines() or [""]))]


def records_text(records: Sequence[dict[str, Any]], missing: Sequence[str]) -> str:
    """Full records as claude-mem's ``get_observations`` returns them: a JSON array of rows; ids that
    do not exist are named after it (claude-mem leaves them out silently)."""
    text = json.dumps([{k: v for k, v in r.items()} for r in records], ensure_ascii=False, indent=2)
    if missing:
        text += f"\n\nNot found: {', '.join(missing)}"
    return text
