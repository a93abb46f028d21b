"""How search answers are shown: the one owner of rendering, for people and for agents.

Two forms, different on purpose, built from the same pieces (the printed id from
``config.records``, the date, the type label, the mode and window in words, one-line text):

- plain text for the ``memsync`` command: a header line, then one line per result
  (:func:`result_line`, :func:`response_text`);
- compact markdown for the MCP tools. The ``index`` form is one table row per result (printed id,
  type, date, score and signals, title), about 30-60 tokens each (measured: docs/benchmarks.md), under a
  header that says how the answer was produced: the mode (and why it is degraded), the window and
  how many matches it excluded. The ``full`` form renders each record's fields as a short section.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memsync.config.claude_mem.schema import Kind
from memsync.config.records import format_ref

if TYPE_CHECKING:  # annotations only: the command imports this module before it needs the search library
    from memsync.search import Response, Result

FIELD_CHARS = 4000  # one field of a full record; longer text is cut with a note
TITLE_CHARS = 120  # a title in a result line or table row

# Fields of a full record, in reading order; anything else the row has follows them.
_SKIP = {"id", "kind", "created_at_epoch", "created_at", "discovery_tokens", "content_hash"}
_FIRST = ("project", "type", "title", "subtitle", "request", "prompt_text", "narrative", "text", "facts",
          "investigated", "learned", "completed", "next_steps", "notes", "concepts", "files_read",
          "files_modified", "files_edited")
# How a result's ``field`` marks it (the anchor of a timeline, a near-duplicate), per form.
_TEXT_MARKS = {"anchor": "  <- anchor", "near_duplicate": "  (near-duplicate)"}
_MARKDOWN_MARKS = {"anchor": " **◀ anchor**", "near_duplicate": " **(near-duplicate)**"}


# -- shared pieces -------------------------------------------------------------------------------
def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def one_line(text: Any, limit: int = TITLE_CHARS) -> str:
    """Whitespace collapsed, cut at ``limit`` characters."""
    return _cut(" ".join(str(text or "").split()), limit)


def cell(text: Any, limit: int) -> str:
    """A markdown table cell: one line, pipes escaped, cut at ``limit`` characters."""
    return _cut(" ".join(str(text or "").split()).replace("|", "\\|"), limit)


def when(epoch_ms: int | None) -> str:
    """A record's local date and time, minutes precision (``?`` when unknown)."""
    return datetime.fromtimestamp((epoch_ms or 0) / 1000).astimezone().strftime("%Y-%m-%d %H:%M") if epoch_ms else "?"


def utc_stamp(epoch_ms: int | None) -> str:
    """A moment of memsync's own (a sync), UTC to the second (``never`` when unset)."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if epoch_ms else "never"


def type_label(kind: Kind, type_: str | None) -> str:
    """What a record is: the observation's type, else its kind."""
    return type_ or kind.value


def mode_text(resp: Response) -> str:
    """The mode that answered, and why when it is degraded."""
    return resp.mode.value + (f" ({resp.reason})" if resp.reason else "")


def days_text(days: int) -> str:
    """A recency window of ``days`` in words (0 = all time)."""
    return f"last {days} days" if days else "all time"


def window_text(resp: Response) -> str:
    """The window applied, in words."""
    w = resp.window
    if w.source in ("all_time", "window"):
        return days_text(w.days)
    start = when(w.start_ms)[:10] if w.start_ms else "…"
    end = when(w.end_ms)[:10] if w.end_ms else "now"
    return f"{start} to {end}"


def excluded_text(resp: Response, hint: str) -> str:
    """How many matches the window left out, with how to include them; empty when none."""
    n = resp.excluded_by_window
    return f"{n} older matches outside the window ({hint})" if n else ""


def score_text(r: Result, digits: int = 2) -> str:
    """A result's score as shown: its confidence; a row without one (date order, past the depth the
    relevance model reads, a listing) shows its cosine as ``cos 0.61``, or ``-``."""
    if r.score is not None:
        return f"{r.score:.{digits}f}"
    return f"cos {r.similarity:.2f}" if r.similarity is not None else "-"


def cutoff_text(resp: Response, how: str) -> str:
    """How many results the confidence cutoff left out, and how to list them; empty when none."""
    return resp.below_note(how) or ""


# -- plain text (the memsync command) ------------------------------------------------------------
def result_line(r: Result) -> str:
    """One result as a line: score (the confidence), signals, id, date, project, type, title."""
    mark = _TEXT_MARKS.get(r.field or "", "")
    return (f"{score_text(r, 3):>5} {r.signals.value:<8} {format_ref(r.kind, r.id):<8} {when(r.created_at_epoch)}  "
            f"[{r.project or ''}] {type_label(r.kind, r.type)}: {one_line(r.title)}{mark}")


def explain_lines(r: Result) -> list[str]:
    """The raw signals behind a result's score (``search --explain``), one indented line."""
    signals = r.signals_json()
    return ["      " + " ".join(f"{k}={v}" for k, v in signals.items())]


def response_text(resp: Response, explain: bool = False) -> str:
    """A response for people: a header with mode, window, exclusions and the cutoff, then one line
    per result (``explain``: each followed by its raw signals; with full records, each record as a
    JSON line)."""
    head = f"mode {mode_text(resp)} · {window_text(resp)}"
    if resp.excluded_by_window:
        head += " · " + excluded_text(resp, "--window-days 0 shows them")
    if resp.below_cutoff:
        head += " · " + cutoff_text(resp, "--all")
    if not resp.results:
        return head + "\n(no results)"
    lines = [head]
    for r in resp.results:
        lines += [result_line(r), *(explain_lines(r) if explain else [])]
    if resp.results[0].record is not None:
        lines += ["", *(json.dumps(r.record, default=str, ensure_ascii=False) for r in resp.results)]
    return "\n".join(lines)


# -- markdown (the MCP tools) --------------------------------------------------------------------
def header(resp: Response, offset: int) -> str:
    """Mode, window, exclusions and the page shown."""
    parts = [f"mode: {mode_text(resp)}", f"window: {window_text(resp)}"]
    if resp.results:
        total = f" of {resp.total}" if resp.total is not None else ""
        parts.append(f"results {offset + 1}-{offset + len(resp.results)}{total}")
    if resp.excluded_by_window:
        parts.append(excluded_text(resp, "window_days=0 includes them"))
    if resp.below_cutoff:
        parts.append(cutoff_text(resp, "all=true"))
    return " · ".join(parts)


def table(results: Sequence[Result], scored: bool = True) -> list[str]:
    """Index rows: id, type, date, then score and signals (searches) or project (listings), title."""
    middle = "score | found by" if scored else "project"
    lines = [f"| id | type | date | {middle} | title |", "|---|---|---|---|---|" + ("---|" if scored else "")]
    for r in results:
        mark = _MARKDOWN_MARKS.get(r.field or "", "")
        if scored:
            score = score_text(r)
            if r.score is not None and r.similarity is not None:
                score += f" (cos {r.similarity:.2f})"
            cells = f"{score} | {r.signals.value}"
        else:
            cells = cell(r.project, 40)
        lines.append(f"| {format_ref(r.kind, r.id)} | {type_label(r.kind, r.type)} | {when(r.created_at_epoch)} | "
                     f"{cells} | {cell(r.title, TITLE_CHARS)}{mark} |")
    return lines


def search_markdown(resp: Response, offset: int, full: bool) -> str:
    """A search response for an agent."""
    head = header(resp, offset)
    if not resp.results:
        if resp.below_cutoff:
            return f"{head}\n\nNo results above the cutoff: all=true lists the weaker ones."
        return f"{head}\n\nNo results. Try fewer or other words, another kind, or window_days=0."
    if full:
        return "\n\n".join([head, *(record_markdown(r.record or {}, r) for r in resp.results)])
    more = ""
    if resp.total is None or offset + len(resp.results) < resp.total:
        more = f" More: offset={offset + len(resp.results)}."
    first = format_ref(resp.results[0].kind, resp.results[0].id)
    return "\n".join([head, "", *table(resp.results), "", f'Full records: get_observations(ids=["{first}", …]).{more}'])


def value_text(value: Any) -> str:
    """A field's value: lists as comma-separated or bullets, long text cut."""
    if isinstance(value, list):
        items = [str(v) for v in value if str(v).strip()]
        if sum(len(i) for i in items) < 200:
            return ", ".join(items)
        return "\n" + "\n".join(f"- {cell(i, 600)}" for i in items)
    if isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False)
    text = str(value).strip()
    return text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + f"… ({len(text) - FIELD_CHARS} more characters)"


def record_markdown(record: dict[str, Any], result: Result | None = None) -> str:
    """One full record as a short markdown section."""
    kind = Kind(record.get("kind", Kind.OBSERVATION.value))
    head = (f"## {format_ref(kind, int(record.get('id', 0)))} · {type_label(kind, record.get('type'))} · "
            f"{when(record.get('created_at_epoch'))}")
    if result is not None:
        head += f" · score {score_text(result)} ({result.signals.value})"
    keys = [k for k in _FIRST if k in record] + [k for k in record if k not in _FIRST and k not in _SKIP]
    lines = [head]
    for key in keys:
        value = record[key]
        if value is None or value == "" or value == []:
            continue
        lines.append(f"**{key}**: {value_text(value)}")
    return "\n".join(lines)


def records_markdown(records: Sequence[dict[str, Any]], missing: Sequence[str]) -> str:
    """Full records in the requested order, then the ids that do not exist."""
    parts = [record_markdown(r) for r in records]
    if missing:
        parts.append(f"Not found: {', '.join(missing)}")
    return "\n\n".join(parts) if parts else "Nothing found."


def timeline_markdown(results: Sequence[Result], anchor: tuple[Kind, int]) -> str:
    """Chronological records around the anchor, the anchor marked."""
    if not results:
        return "No records around that anchor."
    return "\n".join([f"Timeline around {format_ref(*anchor)} ({len(results)} records, oldest first)", "",
                      *table(results, scored=False)])


def similar_markdown(observation: str, results: Sequence[Result], mode: str, reason: str | None,
                     threshold: float) -> str:
    """Past work like an observation, near-duplicates flagged."""
    head = f"Similar to {observation} · mode: {mode}" + (f" ({reason})" if reason else "")
    dupes = sum(1 for r in results if r.field == "near_duplicate")
    if dupes:
        head += f" · {dupes} near-duplicate(s) at cosine ≥ {threshold:.2f}"
    if not results:
        return head + "\n\nNothing similar found."
    return "\n".join([head, "", *table(results)])


def recent_markdown(results: Sequence[Result], project: str | None) -> str:
    """The newest summaries and observations, newest first."""
    head = f"Recent context{f' for {project}' if project else ''} ({len(results)} records, newest first)"
    if not results:
        return head + "\n\nNo records yet."
    return "\n".join([head, "", *table(results, scored=False)])
