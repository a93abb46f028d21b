"""claude-mem databases written by the real claude-mem worker: ``written_db(path, records)``
takes the import records of ``make_db`` (tests/conftest.py: kind, project, session and the row's
fields) and has claude-mem's own worker (scripts/real_claude_mem.py) write them through its
``POST /api/import``, so the file at ``path`` has claude-mem's schema, migrations, triggers and FTS
tables as a user's has, not memsync's demo DDL.

The conversion keeps what memsync's importer would write: rows of a kind keep their order, so their
ids (each kind its own autoincrement) are the same; a session is created on first use (content id
``session``, memory id ``memory_session_id`` or ``mem-<session>``, platform ``claude`` unless given);
list fields become the JSON text claude-mem stores. One difference: claude-mem's import keeps one
summary per memory session (it skips the others), so a session's second summary gets a session of
its own, ``<session>#2`` (memory ``mem-<session>#2``), same project and platform. What the import
cannot write as given (an explicit id, ``merged_into_project``, a platform it normalises, text that
is not UTF-8, a row it would skip as a duplicate) raises ``Unwritable``: such tests keep ``make_db``.

Starting the worker costs a second or two, so each distinct record set is written once per test
session and copied: the worker is stopped first (SIGTERM checkpoints its WAL into the file), so the
copy is the whole database, with no ``-wal`` beside it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memsync.config.claude_mem.platform import normalize_platform
from memsync.config.records import iso_from_ms, ms_from_iso
from scripts.real_claude_mem import CLAUDE_MEM_VERSION, ClaudeMemWorker
from tests.conftest import free_port

# The fields /api/import writes, per kind, besides the session (INSERT column lists of claude-mem's
# importObservation, importSessionSummary and importUserPrompt).
OBSERVATION_FIELDS = ("text", "type", "title", "subtitle", "facts", "narrative", "concepts", "files_read",
                      "files_modified", "prompt_number", "discovery_tokens")
SUMMARY_FIELDS = ("request", "investigated", "learned", "completed", "next_steps", "files_read", "files_edited",
                  "notes", "prompt_number", "discovery_tokens")
PROMPT_FIELDS = ("prompt_number", "prompt_text")
LIST_FIELDS = frozenset({"facts", "concepts", "files_read", "files_modified", "files_edited"})
COMMON = frozenset({"kind", "project", "session", "memory_session_id", "platform_source", "created_at",
                    "created_at_epoch"})
FIELDS = {"observation": OBSERVATION_FIELDS, "summary": SUMMARY_FIELDS, "prompt": PROMPT_FIELDS}

_written: dict[str, Path] = {}
_cache_dir: Path | None = None


class Unwritable(ValueError):
    """claude-mem's ``/api/import`` cannot write this record as given: build that database with
    ``make_db`` (memsync's demo DDL) and say why beside it."""


def _text(value: Any, what: str) -> Any:
    """``value``, refused when it is a string that is not UTF-8 (JSON would carry it rewritten)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise Unwritable(f"{what}: not UTF-8, which /api/import's JSON cannot carry unchanged") from exc
    return value


def _times(rec: Mapping[str, Any]) -> tuple[str, int]:
    """created_at and created_at_epoch as memsync's importer derives them."""
    if rec.get("created_at_epoch") is not None:
        ms = int(rec["created_at_epoch"])
        return str(rec.get("created_at") or iso_from_ms(ms)), ms
    if rec.get("created_at"):
        return str(rec["created_at"]), ms_from_iso(str(rec["created_at"]))
    raise Unwritable("a record needs created_at or created_at_epoch")


class _Payload:
    """The four lists of one ``/api/import`` request, built record by record."""

    def __init__(self) -> None:
        self.sessions: list[dict[str, Any]] = []
        self.siblings: list[dict[str, Any]] = []  # after the others: those keep make_db's session ids
        self.observations: list[dict[str, Any]] = []
        self.summaries: list[dict[str, Any]] = []
        self.prompts: list[dict[str, Any]] = []
        self.by_name: dict[str, dict[str, Any]] = {}
        self.summarised: set[str] = set()  # memory sessions that have their summary
        self.seen: set[tuple[Any, ...]] = set()  # the keys claude-mem skips duplicates by

    def session(self, name: str, rec: Mapping[str, Any], created_at: str, ms: int,
                sibling: bool = False) -> dict[str, Any]:
        if name in self.by_name:
            found = self.by_name[name]
            if rec.get("memory_session_id") not in (None, found["memory_session_id"]):
                raise Unwritable(f"session {name!r} named with two memory session ids")
            return found
        platform = rec.get("platform_source") or "claude"
        if normalize_platform(platform) != platform:
            raise Unwritable(f"platform_source {platform!r}: claude-mem stores it normalised")
        made = {"content_session_id": _text(name, "session"),
                "memory_session_id": _text(str(rec.get("memory_session_id") or f"mem-{name}"), "memory_session_id"),
                "project": _text(str(rec.get("project") or ""), "project"), "platform_source": platform,
                "user_prompt": None, "started_at": created_at, "started_at_epoch": ms, "completed_at": None,
                "completed_at_epoch": None, "status": "completed"}
        self.by_name[name] = made
        (self.siblings if sibling else self.sessions).append(made)
        return made

    def add(self, n: int, rec: Mapping[str, Any]) -> None:
        kind = rec.get("kind")
        if kind not in FIELDS:
            raise Unwritable(f"record {n}: kind {kind!r}")
        extra = set(rec) - COMMON - set(FIELDS[kind])
        if extra:
            raise Unwritable(f"record {n}: /api/import does not write {', '.join(sorted(extra))}")
        created_at, ms = _times(rec)
        name = str(rec.get("session") or "default")
        sess = self.session(name, rec, created_at, ms)
        row: dict[str, Any] = {"created_at": created_at, "created_at_epoch": ms}
        for key in FIELDS[kind]:
            value = rec.get(key)
            row[key] = _text(json.dumps(value) if key in LIST_FIELDS and isinstance(value, list) else value,
                             f"record {n}: {key}")
        if kind == "prompt":
            if not rec.get("prompt_text"):
                raise Unwritable(f"record {n}: a prompt needs prompt_text")
            row.update(content_session_id=sess["content_session_id"], prompt_number=int(rec.get("prompt_number") or 1))
            self.unique(n, ("prompt", name, row["prompt_number"]))
            self.prompts.append(row)
            return
        if kind == "summary" and sess["memory_session_id"] in self.summarised:
            # claude-mem's import keeps one summary per memory session: this one gets its own.
            k = 2
            while f"{name}#{k}" in self.by_name:
                k += 1
            sibling = {"memory_session_id": f"{sess['memory_session_id']}#{k}", "project": sess["project"],
                       "platform_source": sess["platform_source"]}
            sess = self.session(f"{name}#{k}", sibling, created_at, ms, sibling=True)
        row.update(memory_session_id=sess["memory_session_id"], project=_text(str(rec.get("project") or ""), "project"))
        if kind == "observation":
            row["type"] = row["type"] or "discovery"
            self.unique(n, ("observation", row["memory_session_id"], row["title"], ms))
            self.observations.append(row)
        else:
            self.summarised.add(sess["memory_session_id"])
            self.summaries.append(row)

    def unique(self, n: int, key: tuple[Any, ...]) -> None:
        if key in self.seen:
            raise Unwritable(f"record {n}: /api/import would skip it as a duplicate of an earlier one ({key})")
        self.seen.add(key)

    def request(self) -> dict[str, list[dict[str, Any]]]:
        return {"sessions": self.sessions + self.siblings, "summaries": self.summaries,
                "observations": self.observations, "prompts": self.prompts}


def import_payload(records: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The ``/api/import`` request body that writes ``records`` (``Unwritable`` when it cannot)."""
    payload = _Payload()
    for n, rec in enumerate(records, start=1):
        payload.add(n, rec)
    return payload.request()


def _write(records: Sequence[Mapping[str, Any]], home: Path) -> Path:
    """A fresh worker under ``home`` writes ``records``; stopped; its database file."""
    body = import_payload(records)
    worker = ClaudeMemWorker(home, free_port()).start()
    try:
        stats = worker.import_rows(**body)
    finally:
        worker.stop()
    expected = {"sessions": len(body["sessions"]), "summaries": len(body["summaries"]),
                "observations": len(body["observations"]), "prompts": len(body["prompts"])}
    wanted = {f"{k}{what}": (v if what == "Imported" else 0) for k, v in expected.items()
              for what in ("Imported", "Skipped")}
    if stats != wanted:  # nothing lost silently: every row written, none skipped
        raise AssertionError(f"claude-mem's import wrote {stats}, not {wanted}: {worker.log_tail()}")
    wal = worker.db.with_name(worker.db.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        raise AssertionError(f"claude-mem's worker stopped with rows still in its WAL ({wal})")
    return worker.db


def written_db(path: Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """A claude-mem database at ``path`` with these records, written by the real claude-mem worker
    (``make_db``'s call shape, for the current schema). Refuses an existing file, as ``make_db``."""
    global _cache_dir
    if path.exists():
        raise FileExistsError(f"{path} exists")
    key = hashlib.sha256(json.dumps([CLAUDE_MEM_VERSION, list(records)], sort_keys=True).encode()).hexdigest()
    if key not in _written:
        if _cache_dir is None:
            _cache_dir = Path(tempfile.mkdtemp(prefix="memsync-written-"))
            atexit.register(shutil.rmtree, _cache_dir, True)
        _written[key] = _write(records, _cache_dir / key[:16])
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_written[key], path)
    return path
