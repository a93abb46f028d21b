"""Per-prompt injection: a Claude Code ``UserPromptSubmit`` hook payload in, the memory to put in
front of the agent out (or nothing), rendered in a frame that stored text cannot close or forge.

:func:`answer` is called by the worker's inject listener (``servers.inject_listener``) with its
warm :class:`Searcher`; it decides nothing itself beyond what is asked: the search, the current
session's rows left out, the session's earlier injections left out; which results go in and how
much of each is :func:`memsync.search.inject.choose`.

- Only ``UserPromptSubmit`` gets memory (a compaction's ``SessionStart`` only makes the worker
  forget, below); a prompt claude-mem would skip as private or as an internal message
  (``config.claude_mem.project_name``) gets nothing, and so does a prompt holding a ``<private>``
  block at all (private text is never a query; no prompt is logged). The rest is read as claude-mem
  stores it (system blocks removed); under 3 words left (a Han or Kana run: a word per 2 characters),
  nothing.
- The query: that text's first 2,000 characters and its last 500.
- The project: from ``cwd`` by claude-mem's own rule (``project_context_for_cwd``; the hook's
  ``CLAUDE_PROJECT_DIR`` first, when the client forwards it as ``claude_project_dir``); the project's whole
  memory is searched, every kind, no recency window. In a git worktree that is the worktree's own
  project (``parent/worktree``, what claude-mem records there) and its repository's (``parent``), as
  claude-mem's SessionStart context reads them: a new worktree starts with its repository's memory
  (upstream's own per-prompt injection reads the worktree's alone, empty until the worktree has
  sessions). Every project's memory only when ``inject_other_projects`` is on; a payload without a
  ``cwd`` gets nothing either way.
- Rows of the current session are already in the conversation: left out, matched by ``session_id``
  = ``sdk_sessions.content_session_id`` (prompts carry it; observations and summaries through
  their session's ``memory_session_id``).
- :class:`SessionMemory`: the refs injected per session (recorded by :func:`delivered` once the
  hook has read them), for the 1,000 most recently seen
  sessions, in the worker's memory only (lost when the worker restarts: a memory may then be
  injected once more in a session that goes on). Forgotten when Claude Code compacts the session's
  conversation (its ``SessionStart`` hook with source ``compact``, which swap also installs): the
  summary that replaces the conversation may have dropped them, so they may be injected again.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import structlog

from memsync.config.cjk import word_count
from memsync.config.claude_mem.project_name import (
    is_internal_protocol_payload,
    is_private_prompt,
    project_context_for_cwd,
    stored_prompt_text,
)
from memsync.config.claude_mem.schema import KINDS, SESSIONS_TABLE, SUMMARY_FIELDS, Kind
from memsync.config.inject_channel import PROJECT_DIR_ENV, PROJECT_DIR_FIELD, compacted
from memsync.config.records import format_ref
from memsync.config.settings import Settings
from memsync.config.tokens import count_tokens
from memsync.search import Searcher, SearchRequest
from memsync.search.inject import SHIPPED, Candidate, Chosen, choose
from memsync.search.models import Filters, Format, Result
from memsync.search.sql import SourceRows

log = structlog.get_logger("memsync.inject")

EVENT = "UserPromptSubmit"
MIN_WORDS = 3
QUERY_HEAD_CHARS = 2000
QUERY_TAIL_CHARS = 500
CANDIDATES = 20  # results the decision sees (current-session rows are removed from them first)
MAX_SESSIONS = 1000

TAG = "memsync-memory"
HEADER = (f"<{TAG}>\n"
          "Retrieved by memsync from the memory of earlier sessions, for the prompt above. "
          "It may be stale or wrong: check it before relying on it. Each line is one memory: its ref, "
          "date and project, then its text (cut to fit). Open a memory in full with the "
          "get_observations tool, e.g. get_observations(ids=[\"#123\"]) (S12 a summary, P5 a prompt).\n")
FOOTER = f"</{TAG}>"
# Any tag-like "<" in stored text ("<memsync-memory>", "</memsync-memory", "</system-reminder>", ...)
# becomes a look-alike that closes and opens nothing; "a < b" and "<=" stay.
_TAG_START = re.compile(r"<(?=[/!?]?[A-Za-z]|\s*/)")
_PRIVATE_TAG = re.compile(r"<private\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class InjectAnswer:
    """What the hook prints: the framed context (None: nothing), the refs in it, its tokens."""

    context: str | None
    refs: list[str] = field(default_factory=list)
    tokens: int = 0


NOTHING = InjectAnswer(None, [], 0)


class SessionMemory:
    """The refs already injected, per Claude Code session id, for the ``max_sessions`` most recently
    seen sessions (least recently used go first). Thread-safe: concurrent sessions are independent.
    Kept in memory only: lost when the worker restarts."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._refs: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, session_id: str) -> frozenset[str]:
        """The refs injected in ``session_id`` so far."""
        with self._lock:
            refs = self._refs.get(session_id)
            if refs is None:
                return frozenset()
            self._refs.move_to_end(session_id)
            return frozenset(refs)

    def add(self, session_id: str, refs: Iterable[str]) -> None:
        """Record ``refs`` as injected in ``session_id``."""
        with self._lock:
            self._refs.setdefault(session_id, set()).update(refs)
            self._refs.move_to_end(session_id)
            while len(self._refs) > self.max_sessions:
                self._refs.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """Forget what was injected in ``session_id`` (its conversation was compacted: those
        memories may be gone from it)."""
        with self._lock:
            self._refs.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._refs)


def query_of(prompt: str) -> str:
    """The search query of a prompt: its first ``QUERY_HEAD_CHARS`` characters and its last
    ``QUERY_TAIL_CHARS`` (a long prompt is mostly pasted output; its ask is at one end)."""
    if len(prompt) <= QUERY_HEAD_CHARS + QUERY_TAIL_CHARS:
        return prompt
    return prompt[:QUERY_HEAD_CHARS] + "\n" + prompt[-QUERY_TAIL_CHARS:]


def safe(text: str) -> str:
    """Stored text as it may appear inside the frame: one line (whitespace collapsed, so it cannot
    start a line of its own: a forged memory line or a closing tag), every tag-like ``<`` neutralised."""
    return _TAG_START.sub("‹", " ".join(text.split()))


def render(chosen: list[Chosen]) -> str:
    """The framed block of the chosen memories."""
    # Whitespace adds no token: the block's tokens are the frame's plus each chosen line's.
    return HEADER + "".join(f"{c.heading} {c.body}\n" for c in chosen) + FOOTER


@functools.cache  # a constant, counted on the first prompt (not at import: the tokenizer loads then)
def frame_tokens() -> int:
    """The tokens of the frame itself (header and footer)."""
    return count_tokens(HEADER + FOOTER)


def answer(payload: Mapping[str, Any], searcher: Searcher, settings: Settings,
           sessions: SessionMemory) -> InjectAnswer:
    """The injection for one hook payload (see the module docstring); NOTHING when nothing fits.
    Its refs count as injected in the session only once the hook has them (:func:`delivered`): an
    answer the hook gave up on reached no prompt."""
    if forgot(payload, sessions):
        return NOTHING
    ask = asked(payload)
    if ask is None:
        return NOTHING
    prompt, cwd, session = ask
    started = time.perf_counter()
    # The hook's own cwd decides, never the worker's environment (its CLAUDE_PROJECT_DIR, if any,
    # is another session's); HOME only expands "~".
    env = {"HOME": os.environ.get("HOME", "")}
    if isinstance(project_dir := payload.get(PROJECT_DIR_FIELD), str):
        env[PROJECT_DIR_ENV] = project_dir  # the hook's CLAUDE_PROJECT_DIR, which the client forwards
    projects = project_context_for_cwd(cwd, env).all_projects
    results = searcher.search(request_of(prompt, None if settings.inject_other_projects else projects)).results
    if session is not None:
        results = _outside_session(results, searcher.settings, session)
    seen = sessions.seen(session) if session is not None else frozenset()
    found = candidates(results)
    chosen = choose(found, settings.inject_budget_tokens - frame_tokens(), seen,
                    policy=replace(SHIPPED, max_memories=settings.inject_max_memories))
    if not chosen:
        log.debug("inject_none", candidates=len(found), ms=round((time.perf_counter() - started) * 1000, 1))
        return NOTHING
    refs = [c.ref for c in chosen]
    context = render(chosen)
    tokens = count_tokens(context)
    log.debug("inject", refs=refs, tokens=tokens, ms=round((time.perf_counter() - started) * 1000, 1))
    return InjectAnswer(context, refs, tokens)


def forgot(payload: Mapping[str, Any], sessions: SessionMemory) -> bool:
    """Whether the payload is a compaction (``config.inject_channel.compacted``); its session's refs
    are then forgotten: the summary that replaced the conversation may have dropped them."""
    if not compacted(payload):
        return False
    if isinstance(session := payload.get("session_id"), str) and session:
        sessions.forget(session)
        log.debug("inject_forgot_session", reason="compacted")
    return True


def delivered(payload: Mapping[str, Any], refs: Iterable[str], sessions: SessionMemory) -> None:
    """Record ``refs`` as injected in the payload's session (none: nothing to record)."""
    session = payload.get("session_id")
    if isinstance(session, str) and session:
        sessions.add(session, refs)


def asked(payload: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
    """(prompt, cwd, session id) of a payload that may get a memory; None for another event, a
    missing field, a private prompt or one of under ``MIN_WORDS`` words."""
    if payload.get("hook_event_name") != EVENT:
        return None
    prompt, cwd = payload.get("prompt"), payload.get("cwd")
    if not isinstance(prompt, str) or not isinstance(cwd, str) or not cwd:
        return None
    # Private text is never a query: a prompt holding a private block at all gets nothing (cutting
    # the block out is not enough: past claude-mem's 256 KiB cut an unclosed block stays).
    if _PRIVATE_TAG.search(prompt) or is_internal_protocol_payload(prompt) or is_private_prompt(prompt):
        return None
    text = stored_prompt_text(prompt)  # as claude-mem stores it: system blocks (reminders, ...) removed
    if word_count(text) < MIN_WORDS:
        return None
    session = payload.get("session_id")
    return text, cwd, session if isinstance(session, str) and session else None


def request_of(prompt: str, projects: str | tuple[str, ...] | None) -> SearchRequest:
    """The search of a prompt: its query, the projects' whole memory (every kind, all time; None:
    every project's), the full rows (their text is rendered), ``CANDIDATES`` of them."""
    return SearchRequest(query=query_of(prompt), kinds=KINDS, filters=Filters(project=projects), window_days=0,
                         limit=CANDIDATES, format=Format.FULL, show_all=True)  # the decision has its own gate


def candidates(results: list[Result]) -> list[Candidate]:
    """The results as the decision sees them (``search.inject.Candidate``), in their order."""
    return [_candidate(r) for r in results]


def _candidate(r: Result) -> Candidate:
    """A result as the decision sees it: ref, confidence (the relevance model's), signals, and its
    line's heading and text, made safe."""
    ref = format_ref(r.kind, r.id)
    date = ""
    if r.created_at_epoch is not None:
        date = datetime.fromtimestamp(r.created_at_epoch / 1000, UTC).date().isoformat()
    heading = "- " + " ".join(x for x in (ref, date, safe(r.project or "")) if x) + ":"
    return Candidate(ref, r.similarity, r.confidence, r.signals, heading, safe(_text(r)))


def _text(r: Result) -> str:
    """The memory's text: an observation's title and narrative (its text when it has none), a
    summary's fields in order, a prompt's words."""
    row = r.record or {}
    if r.kind is Kind.OBSERVATION:
        body = row.get("narrative") or row.get("text") or ""
        title = row.get("title") or row.get("subtitle") or ""
        return f"{title}. {body}" if title and body else str(title or body)
    if r.kind is Kind.SUMMARY:
        return " ".join(f"{f}: {row[f]}" for f in SUMMARY_FIELDS if row.get(f))
    return str(row.get("prompt_text") or r.title or "")


def _outside_session(results: list[Result], settings: Settings, session: str) -> list[Result]:
    """``results`` without the rows of the Claude Code session ``session`` (its
    ``content_session_id``): prompts by their own column, observations and summaries by the
    ``memory_session_id`` of that session's ``sdk_sessions`` rows."""
    rows = SourceRows.open(settings)
    try:
        content = rows.schema.column(SESSIONS_TABLE, "content_session_id")
        memory = rows.schema.column(SESSIONS_TABLE, "memory_session_id")
        memory_ids: set[str] = set()
        if content and memory:
            found = rows.query(f'SELECT "{memory}" FROM {SESSIONS_TABLE} WHERE "{content}" = ?', [session])
            memory_ids = {str(r[0]) for r in found if r[0] is not None}
    finally:
        rows.close()
    out = []
    for r in results:
        row = r.record or {}
        if r.kind is Kind.PROMPT:
            inside = row.get("content_session_id") == session
        else:
            inside = row.get("memory_session_id") in memory_ids
        if not inside:
            out.append(r)
    return out

