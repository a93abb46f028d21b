"""memsync's upstream-readable store against the store the real claude-mem writes itself.

claude-mem 13.25.3's worker (scripts/real_claude_mem.py) writes a database through its
``/api/import`` with every row shape the import can make, then, restarted with its Chroma path on,
backfills its own ``cm__claude-mem`` on a real ``chroma run``. memsync builds its upstream store
from the same file, on the same server under another name. The two are compared id for id, text
for text, metadata key for key and value for value, and by their vectors' dimension. Each
difference the docs list as deliberate (docs/claude-mem.md, "What differs from a store claude-mem
writes itself") is counted in its category; any other one fails the test with the documents side
by side. A second case compares with what claude-mem's *live* sync writes when Chroma is on
during the import (observations only, parsed another way): memsync does not follow that path
where it loses data, so its differences are classified and counted too.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import numpy.typing as npt
import pytest

from memsync.chroma import collections as stores
from memsync.config.settings import Settings
from memsync.worker.pipeline.resync import upstream_resync
from memsync.worker.rows.source import SourceReader
from memsync.worker.rows.state import SyncState
from scripts.real_claude_mem import ClaudeMemWorker
from tests.conftest import free_port, held_server

pytestmark = pytest.mark.slow
OWN = "cm__claude-mem"  # the one collection claude-mem 13.x writes
OURS = "memsync-upstream"  # memsync's upstream store, beside it on the same server
T0 = 1_793_000_000_000
LONG = "A long narrative about the cache, told at length. " * 200  # 10,000 characters, embedded cut

# The deliberate differences (docs/claude-mem.md), from claude-mem's backfill, then its live import sync.
NO_OBSERVATIONS = "only in memsync's: a row of a project without observations (claude-mem's backfill skips it)"
EMPTY_PROJECT = "only in memsync's: a row of an empty project (claude-mem's backfill skips it)"
MAIN_TITLE = ("only in memsync's: the title document of an observation without narrative, text or facts "
              "(upstream main's format; 13.25.3 writes no document for it)")
LIVE_KINDS = "only in memsync's: summary and prompt documents (the live import sync writes observations only)"
LIVE_TEXT = "only in memsync's: a legacy text document (the live sync passes text as null)"
LIVE_FACTS = "only in memsync's: facts that are not JSON (the live sync's JSON.parse makes them [])"
LIVE_LISTS = "metadata: list columns that are not JSON (the live sync drops them)"
LIVE_RESTRINGIFIED = "fact text: a JSON value that is no array, written again by the live sync's JSON.stringify"

Doc = tuple[str, dict[str, Any], int]  # text, metadata, vector dimension
Classifier = Callable[["Row", str, Doc | None, Doc | None], str | None]


def session(n: int, project: str, platform: str) -> dict[str, Any]:
    return {"content_session_id": f"c{n}", "memory_session_id": f"m{n}", "project": project,
            "platform_source": platform, "user_prompt": f"first prompt {n}", "started_at": "2026-11-01T00:00:00Z",
            "started_at_epoch": T0 + n, "completed_at": None, "completed_at_epoch": None, "status": "completed"}


def observation(session_n: int | str, project: str, title: str | None, **values: Any) -> dict[str, Any]:
    """An observations record as importObservation reads it (list columns as the text it stores);
    epochs unique per title so that its duplicate check (session + title + epoch) keeps each."""
    memory = f"m{session_n}" if isinstance(session_n, int) else session_n
    row = {"memory_session_id": memory, "project": project, "text": None, "type": "discovery", "title": title,
           "subtitle": None, "facts": None, "narrative": None, "concepts": None, "files_read": None,
           "files_modified": None, "prompt_number": 1, "discovery_tokens": 5, "created_at": "2026-11-02T00:00:00Z"}
    return {**row, **values}


def summary(session_n: int, project: str, **values: Any) -> dict[str, Any]:
    row = {"memory_session_id": f"m{session_n}", "project": project, "request": None, "investigated": None,
           "learned": None, "completed": None, "next_steps": None, "files_read": None, "files_edited": None,
           "notes": None, "prompt_number": 1, "discovery_tokens": 3, "created_at": "2026-11-02T00:00:00Z",
           "created_at_epoch": T0 + 200_000 + session_n}
    return {**row, **values}


def prompt(content: str, number: int, text: str) -> dict[str, Any]:
    return {"content_session_id": content, "prompt_number": number, "prompt_text": text,
            "created_at": "2026-11-02T00:00:00Z", "created_at_epoch": T0 + 300_000 + number}


SESSIONS = [session(1, "alpha", "claude"), session(2, "beta", " Codex CLI "), session(3, "gamma", ""),
            session(4, "solo", "claude"),  # summaries and prompts, no observation: claude-mem's backfill skips it
            session(5, "", "claude"),  # an empty project: claude-mem's backfill skips its rows
            session(6, "alpha", "Cursor"), {**session(7, "alpha", "claude"), "memory_session_id": None}]
OBSERVATIONS = [
    observation(1, "alpha", "Fix the cache", type="bugfix", subtitle="in m1", narrative="The cache kept stale rows.",
                facts='["stale rows came back", "TTL was 0"]', concepts='["gotcha", "caching"]',
                files_read='["src/a.py", "src/b.py"]', files_modified='["src/a.py"]'),
    observation(1, "alpha", "Only a title"),  # no document
    observation(1, "alpha", "", type="", subtitle="", narrative="  padded narrative  ", facts="[]", concepts="[]",
                files_read="[]"),  # title and type empty: Untitled, discovery
    observation(2, "beta", "Codex work", type="change", text="legacy text", facts='["", "a real fact", "  "]',
                files_read="not-json/path.py", files_modified='"single.py"'),
    observation(3, "gamma", "Not JSON", narrative="facts that are no JSON", facts="not [json", concepts="not [json"),
    observation(3, "gamma", "JSON string", facts='"one string"', concepts='"abc"', files_read='{"a": 1}'),
    observation(3, "gamma", "JSON null", narrative="null lists", facts="null", concepts="null", files_read="null"),
    observation(3, "gamma", "JSON object", facts='{"k": 1}', concepts="5", files_read="[null]", files_modified="5"),
    observation(6, "alpha", "Mixed array", facts='[1, null, "kept", {"k": "v"}, ["x"]]', concepts='[1, "x", "", " "]',
                files_read='[1, 2.5, 1e21, 1e-7, true, null, ["x", ["y"]], {"k": 1}]'),
    observation(1, "alpha", "Blank", narrative="   ", facts="   ", concepts="  ", subtitle=" "),
    observation(5, "", "Empty project", narrative="a row of no project", facts='["lost to the backfill"]'),
    observation(2, "beta", None, type="refactor", narrative="No title at all."),  # (type NULL, or a session
    # missing, claude-mem's import refuses: NOT NULL and FOREIGN KEY constraints)
    observation(3, "gamma", "Long", type="feature", narrative=LONG),
]
OBSERVATIONS = [{**o, "created_at_epoch": T0 + 100_000 + i} for i, o in enumerate(OBSERVATIONS)]
SUMMARIES = [
    summary(1, "alpha", request="Fix caching", investigated="the TTL", learned="TTL 0 means forever",
            completed="set a TTL", next_steps="watch it", notes="none", prompt_number=3),
    summary(2, "beta", learned="beta learning", prompt_number=None),
    summary(3, "gamma"),  # every field NULL: no document
    summary(4, "solo", request="a summary of a project without observations"),
    summary(5, "", request="a summary of no project"),
    summary(6, "alpha", request="  ", notes="", learned="cursor learning", prompt_number=0),
]
PROMPTS = [prompt("c1", 1, "please fix the cache"), prompt("c1", 2, ""), prompt("c2", 1, "codex, look at beta"),
           prompt("c9", 1, "no session"), prompt("c4", 1, "a prompt of a project without observations"),
           prompt("c5", 1, "a prompt of no project"), prompt("c6", 1, "cursor prompt"),
           prompt("c7", 1, "a prompt of a session without a memory session")]
ROWS = {"sessions": SESSIONS, "observations": OBSERVATIONS, "summaries": SUMMARIES, "prompts": PROMPTS}


@dataclass(frozen=True)
class Row:
    """Where a document comes from: its row's kind and project, and the row's list columns."""

    kind: str
    project: str | None
    values: dict[str, Any]


def rows_of(db: Path) -> dict[tuple[str, int], Row]:
    """Every row of the database by (kind, id), its project as claude-mem's backfill scopes it."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        out = {("obs", r["id"]): Row("obs", r["project"], dict(r)) for r in con.execute("SELECT * FROM observations")}
        out |= {("summary", r["id"]): Row("summary", r["project"], dict(r))
                for r in con.execute("SELECT * FROM session_summaries")}
        out |= {("prompt", r["id"]): Row("prompt", r["project"], dict(r)) for r in con.execute(
            "SELECT up.*, s.project FROM user_prompts up LEFT JOIN sdk_sessions s ON s.id = up.session_db_id")}
    finally:
        con.close()
    return out


def row_key(doc_id: str) -> tuple[str, int]:
    m = re.fullmatch(r"(obs|summary|prompt)_(\d+)(?:_.*)?", doc_id)
    assert m is not None, doc_id
    return m.group(1), int(m.group(2))


def read(client: Any, name: str) -> tuple[dict[str, Doc], dict[str, npt.NDArray[np.float64]]]:
    """A collection as a plain chromadb client reads it: text, metadata and vector dimension by id,
    and the vectors (compared apart: the same weights, yet not bit for bit the same runtime)."""
    got = client.get_collection(name).get(include=["documents", "metadatas", "embeddings"])
    docs = {i: (t, dict(m or {}), len(e)) for i, t, m, e in
            zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True)}
    return docs, {i: np.asarray(e, dtype=np.float64) for i, e in zip(got["ids"], got["embeddings"], strict=True)}


def least_cosine(a: dict[str, npt.NDArray[np.float64]], b: dict[str, npt.NDArray[np.float64]]) -> float:
    """The lowest cosine similarity of the vectors of one id in both stores."""
    return min(float(a[i] @ b[i] / (np.linalg.norm(a[i]) * np.linalg.norm(b[i]))) for i in a.keys() & b.keys())


@dataclass
class Comparison:
    """Documents equal in both stores, deliberate differences by category, and the others."""

    equal: int = 0
    deliberate: Counter[str] = field(default_factory=Counter)
    unplanned: list[str] = field(default_factory=list)

    def report(self, title: str) -> str:
        lines = [f"{title}: {self.equal} documents equal"]
        lines += [f"  {n} {category}" for category, n in sorted(self.deliberate.items())]
        if self.unplanned:
            lines.append(f"  {len(self.unplanned)} UNPLANNED:")
        lines += [f"  {line}" for line in self.unplanned]
        return "\n".join(lines)


def compare(theirs: dict[str, Doc], ours: dict[str, Doc], rows: dict[tuple[str, int], Row],
            classify: Classifier) -> Comparison:
    """Each id of either store: equal, a deliberate difference (its category), or unplanned."""
    result = Comparison()
    for doc_id in sorted(theirs.keys() | ours.keys()):
        a, b = theirs.get(doc_id), ours.get(doc_id)
        if a == b:
            result.equal += 1
            continue
        category = classify(rows[row_key(doc_id)], doc_id, a, b)
        if category is None:
            result.unplanned.append(f"{doc_id}:\n    claude-mem: {a!r}\n    memsync:    {b!r}")
        else:
            result.deliberate[category] += 1
    return result


def backfill_scope(rows: dict[tuple[str, int], Row]) -> set[str]:
    """The projects claude-mem's backfill visits: those with observations, the empty one excepted."""
    return {r.project for (kind, _), r in rows.items() if kind == "obs" and r.project}


def deliberate_backfill(scope: set[str]) -> Classifier:
    """The differences docs/claude-mem.md lists from a store claude-mem's backfill wrote."""
    def classify(row: Row, doc_id: str, theirs: Doc | None, ours: Doc | None) -> str | None:
        if theirs is not None or ours is None:
            return None
        if doc_id.endswith("_title") and row.kind == "obs":
            return MAIN_TITLE
        if row.project == "":
            return EMPTY_PROJECT
        if row.project not in scope:
            return NO_OBSERVATIONS
        return None
    return classify


def _is_json(text: Any) -> bool:
    try:
        json.loads(text)
    except (TypeError, ValueError):
        return False
    return True


def deliberate_live(row: Row, doc_id: str, theirs: Doc | None, ours: Doc | None) -> str | None:
    """What claude-mem's live sync of an import writes otherwise, and memsync does not follow."""
    if theirs is None and row.kind in ("summary", "prompt"):
        return LIVE_KINDS
    if theirs is None and doc_id.endswith("_title") and row.kind == "obs":
        return MAIN_TITLE
    if theirs is None and doc_id.endswith("_text"):
        return LIVE_TEXT
    if theirs is None and "_fact_" in doc_id and not _is_json(row.values["facts"]):
        return LIVE_FACTS
    if theirs is not None and ours is not None and theirs[0] == ours[0] and theirs[2] == ours[2]:
        differing = {k for k in theirs[1].keys() | ours[1].keys() if theirs[1].get(k) != ours[1].get(k)}
        if differing and all(k in ("concepts", "files_read", "files_modified") and not _is_json(row.values[k])
                             for k in differing):
            return LIVE_LISTS
    if theirs is not None and ours is not None and "_fact_" in doc_id and theirs[1] == ours[1] \
            and _is_json(row.values["facts"]) \
            and theirs[0] == json.dumps(json.loads(row.values["facts"]), separators=(",", ":"), ensure_ascii=False):
        return LIVE_RESTRINGIFIED
    return None


@contextlib.contextmanager
def chroma_server(db: Path, tmp_path: Path) -> Iterator[Settings]:
    """memsync's settings on ``db`` (its upstream store named OURS, beside claude-mem's) and the
    managed `chroma run` they name, held by the test for both writers; killed at the end."""
    with held_server(Settings(db=db, data_dir=tmp_path / "data", chroma_mode="managed", chroma_port=free_port(),
                              upstream_store=True, upstream_collection=OURS)) as s:
        yield s


def memsync_store(s: Settings) -> None:
    """memsync's upstream store built from the database (its pass alone: memsync's own collection
    is not needed here)."""
    with SourceReader.open(s) as reader, SyncState(s.state_path) as state, stores.connect(s) as handle:
        result = upstream_resync(s, handle.client, reader, state)
    assert result.added > 0 and result.failed_rows == 0, result


def expected_imports(claude_mem: ClaudeMemWorker) -> None:
    stats = claude_mem.import_rows(**ROWS)
    assert stats["observationsImported"] == len(OBSERVATIONS) and stats["summariesImported"] == len(SUMMARIES), stats
    assert stats["sessionsImported"] == len(SESSIONS) and stats["promptsImported"] == len(PROMPTS), stats


def test_memsyncs_store_equals_claude_mems_backfill_but_for_the_listed_differences(
        claude_mem: ClaudeMemWorker, tmp_path: Path) -> None:
    started = time.monotonic()
    with chroma_server(claude_mem.db, tmp_path) as s:
        expected_imports(claude_mem)  # Chroma off: only the database is written
        claude_mem.stop()
        claude_mem.chroma_port = s.chroma_port
        claude_mem.start()
        claude_mem.wait_backfilled()
        claude_mem.stop()  # the file stays as it is from here
        assert "Skipped unformattable row" not in claude_mem.own_log()
        memsync_store(s)
        client = chromadb.HttpClient(host=s.chroma_host, port=s.chroma_port)
        (theirs, their_vectors), (ours, our_vectors) = read(client, OWN), read(client, OURS)
    rows = rows_of(s.db)
    result = compare(theirs, ours, rows, deliberate_backfill(backfill_scope(rows)))
    cosine = least_cosine(their_vectors, our_vectors)
    print(result.report(f"backfill: claude-mem {len(theirs)} documents, memsync {len(ours)}, least cosine of "
                        f"one id's vectors {cosine:.4f} ({time.monotonic() - started:.1f} s)"))
    assert not result.unplanned, result.report("backfill")
    assert result.equal == len(theirs) == 30  # every document claude-mem wrote is memsync's too, equal
    assert result.deliberate == {NO_OBSERVATIONS: 2, EMPTY_PROJECT: 4, MAIN_TITLE: 1}
    assert {dim for _, _, dim in [*theirs.values(), *ours.values()]} == {384}
    assert cosine > 0.99  # the same int8 weights on both sides (the harness seeds Chroma's default function)
    # The shapes are really there, on both sides.
    assert theirs["obs_4_fact_0"][0] == "a real fact" and "obs_4_fact_1" not in theirs
    assert theirs["obs_5_fact_0"][0] == "not [json" and theirs["obs_4_text"][0] == "legacy text"
    assert theirs["obs_13_narrative"][0] == LONG and theirs["prompt_2"][0] == ""


def live_synced(worker: ClaudeMemWorker, observations: int, timeout: float = 300.0) -> None:
    """Wait until claude-mem's live sync of an import is done: one "Syncing observation" line per
    imported observation, and one "Documents added" (a debug line) per one that had documents."""
    deadline = time.monotonic() + timeout
    while True:
        log = worker.own_log()
        syncing = re.findall(r"Syncing observation \{[^}]*documentCount=(\d+)", log)
        written = log.count("Documents added")
        if len(syncing) == observations and written == sum(1 for n in syncing if n != "0"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"claude-mem's live sync not done in {timeout}s: {worker.log_tail()}")
        time.sleep(0.1)  # poll interval of the deadline loop: the log is the only signal


def test_claude_mems_live_import_sync_differs_only_where_memsync_keeps_more(
        claude_mem: ClaudeMemWorker, tmp_path: Path) -> None:
    started = time.monotonic()
    with chroma_server(claude_mem.db, tmp_path) as s:
        claude_mem.stop()
        # Its debug lines say when each write is done ("Documents added").
        (claude_mem.data_dir / "settings.json").write_text(json.dumps({"CLAUDE_MEM_LOG_LEVEL": "DEBUG"}))
        claude_mem.chroma_port = s.chroma_port
        claude_mem.start()
        claude_mem.wait_backfilled()  # of an empty database: nothing
        expected_imports(claude_mem)
        live_synced(claude_mem, len(OBSERVATIONS))
        claude_mem.stop()
        memsync_store(s)
        client = chromadb.HttpClient(host=s.chroma_host, port=s.chroma_port)
        (theirs, _), (ours, _) = read(client, OWN), read(client, OURS)
    result = compare(theirs, ours, rows_of(s.db), deliberate_live)
    print(result.report(f"live import sync: claude-mem {len(theirs)} documents, memsync {len(ours)} "
                        f"({time.monotonic() - started:.1f} s)"))
    assert not result.unplanned, result.report("live import sync")
    assert result.equal == 13 and not (theirs.keys() - ours.keys())
    assert result.deliberate == {LIVE_KINDS: 18, LIVE_TEXT: 1, LIVE_FACTS: 1, LIVE_LISTS: 2, LIVE_RESTRINGIFIED: 1,
                                 MAIN_TITLE: 1}
