"""Per-prompt injection quality: evidence recall, precision, tokens and silence, the decision beside
the stand-in of what today's search would inject.

    .venv/bin/python -m scripts.bench_inject [--silence train|test] [--claude-mem] [--set dev|multilingual]
                                             [--work .bench] [--out FILE]

Memories: the LoCoMo dev set (``scripts/locomo.py``, observations linked to their turns; the
database and store of ``scripts.bench_quality``'s ``build``, kept in ``--work``/inject-dev) and
the demo's coding memory (``memsync db demo``: 40 sessions, seed 7; ``--work``/inject-demo).

Each question of categories 1-4 is a prompt in its conversation's project (a new session: nothing
of it is excluded, nothing was injected before). What one search gives (``servers.inject_service``'s
own request: every kind, all time, 20 full rows) is injected two ways:

- ``top-K`` (K = 5, 8, 10), the stand-in: the hybrid top K as title lines, whatever they are;
- ``decide``: ``search.inject.choose`` within the 600-token budget, rendered in the frame.

Evidence recall: the share of a question's evidence turns injected, as the prompt of that turn or
through an observation recorded at that turn; precision: the share of injected memories that are
evidence (pooled; ``precision_related`` also counts a summary of a session holding evidence, the
relevance model's label, for what else an agent is given); tokens: the rendered context
(``config.tokens``), mean over the prompts that got one and max. Silence: the share of the silence
prompts (``tests/data/inject``; ``--silence train`` unless the test half is asked for: thresholds
are tuned on the train half only) that get anything, each against its memory (dev prompts in the
five conversations by turn, demo prompts in the three demo projects by turn).

The decision's thresholds are chosen leave-one-conversation-out: for each conversation, the policy
(``search.inject.Policy``, over a grid) that does best on the other four and the silence train half
(the most recall with at most 5% of the silence train half answered, half the 10% goal; precision
is reported, not chosen for: no policy reaches 0.5 with useful recall, and asking for it first made
folds pick one memory for 60% of the questions) is scored on the held-out one; the pooled held-out
folds are reported, beside the policy chosen on all five (what ships) and the shipped policy's own
figures. Latency: memsync's search and decision per prompt, in-process with a warm searcher (the
hook's own process is timed by ``scripts/bench_inject_latency.py``).

``--claude-mem``: the real claude-mem 13.25.3 beside it (``scripts.bench_quality.real_claude_mem``),
semantic injection turned on in its ``settings.json``, on a copy of each memory whose projects' dates
are moved to end now (its search keeps only its last 90 days; LoCoMo is from 2022-2024): every
question and scored silence prompt is sent to its ``/api/context/semantic`` as its UserPromptSubmit
hook sends it, timed, and the context it returns is read back into observations and scored the same
way. Its first run backfills its Chroma store (about half an hour), kept beside each memory.

``--set multilingual``: the parallel English/Chinese/Japanese/Korean set instead
(``scripts/multilingual.py``), with either model, the shipped decision as it is: no tuning.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import re
import signal
import sqlite3
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from memsync.commands.db import DEMO_SEED, DEMO_SESSIONS, make_demo_db
from memsync.config.claude_mem.project_name import is_internal_protocol_payload, is_private_prompt
from memsync.config.claude_mem.schema import Kind
from memsync.config.records import format_ref
from memsync.config.settings import Settings
from memsync.config.tokens import count_tokens
from memsync.search import Searcher
from memsync.search.inject import SHIPPED, Candidate, Chosen, Policy, choose
from memsync.search.models import Result
from memsync.servers.inject_service import asked, candidates, frame_tokens, render, request_of
from memsync.worker.pipeline.resync import resync
from memsync.worker.seed.demo import PROJECTS, generate
from scripts.bench_quality import build, real_claude_mem
from scripts.benchlib import ROOT, built, print_table, records_fingerprint, reusable, write_json
from scripts.locomo import DEFAULT_DATA, Question
from scripts.real_claude_mem import CLAUDE_MEM_VERSION, ClaudeMemWorker

KS = (5, 8, 10)
MAX_MEMORIES_SETTING = (1, 2, 3, 5, 8)  # rows of the inject_max_memories setting (the shipped gate)
SILENCE = ROOT / "tests" / "data" / "inject"
# The gates (the best similarity; the best confidence, 0: no such gate), then which further memories
# (a confidence floor, a share of the best one's), how many, and whether a words-only result may go in.
GRID = [Policy(s / 100, g, f, r, n, w)
        for s, g, f, r, n, w in itertools.product(range(30, 49, 3), (0.0, 0.3, 0.4, 0.5),
                                                  (0.0, 0.05, 0.1, 0.2, 0.3, 0.5), (0.0, 0.5),
                                                  (1, 2, 3, 5, 8, 10, 12, 16), (True, False))]
BUDGET = Settings.model_fields["inject_budget_tokens"].default  # the shipped budget (600)
MAX_SILENCE = 0.10  # the goal, on the silence set's test half
# What a policy may answer of the train half to be chosen: half the goal, a margin for prompts unlike the
# train half's (the loosest threshold under the goal sits at the train half's own p95 and does not carry).
TUNE_SILENCE = 0.05
OUT = ROOT / ".bench" / "bench_inject.json"

# claude-mem 13.25.3's per-prompt injection, as a user turns it on (its settings.json) and as its
# session-init hook asks for it: CLAUDE_MEM_SEMANTIC_INJECT_LIMIT's default, the 20-character minimum.
SEMANTIC_INJECT_ON = {"CLAUDE_MEM_SEMANTIC_INJECT": "true"}
SEMANTIC_LIMIT = "5"
SEMANTIC_MIN_CHARS = 20

Unit = tuple[str, int, int]  # (project, session number, turn number): one evidence turn
SESSION_TURN = -1  # a summary's Unit: its session, no turn (never an evidence turn itself)


@dataclass(frozen=True, slots=True)
class Asked:
    """One prompt as searched: its group (a conversation, or ``silence``), its evidence, the candidates."""

    group: str
    evidence: frozenset[Unit]
    found: list[Candidate]
    results: list[Result]
    prompt: str = ""
    project: str = ""
    search_ms: float | None = None  # the search and the candidates, in-process; None when not searched


def turns(searcher: Searcher) -> dict[str, Unit]:
    """ref → the evidence turn it stands for: a prompt its own turn, an observation the turn it was
    recorded at; a summary its session (turn ``SESSION_TURN``: it counts for precision, related, only)."""
    rows = searcher._rows()  # noqa: SLF001 - a benchmark may read the same database directly
    try:
        prompts = rows.query("SELECT p.id, p.prompt_number, s.project, s.content_session_id FROM user_prompts p "
                             "JOIN sdk_sessions s ON s.id = p.session_db_id")
        observations = rows.query("SELECT o.id, o.prompt_number, s.project, s.content_session_id FROM observations o "
                                  "JOIN sdk_sessions s ON s.memory_session_id = o.memory_session_id "
                                  "WHERE o.prompt_number IS NOT NULL")
        summaries = rows.query(f"SELECT m.id, {SESSION_TURN} AS prompt_number, s.project, s.content_session_id "
                               "FROM session_summaries m "
                               "JOIN sdk_sessions s ON s.memory_session_id = m.memory_session_id")
    finally:
        rows.close()
    out: dict[str, Unit] = {}
    for kind, got in ((Kind.PROMPT, prompts), (Kind.OBSERVATION, observations), (Kind.SUMMARY, summaries)):
        for r in got:
            session = int(str(r["content_session_id"]).rsplit("-s", 1)[1])
            out[format_ref(kind, int(r["id"]))] = (str(r["project"]), session, int(r["prompt_number"]))
    return out


def silence_prompts(half: str) -> list[dict[str, Any]]:
    """The silence set's ``half`` (train or test)."""
    path = SILENCE / f"silence-{half}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ask_all(searcher: Searcher, prompts: Sequence[tuple[str, str, frozenset[Unit], str]],
            gate: bool = True) -> list[Asked]:
    """Each (group, prompt, evidence, project) searched as the service searches it (a prompt the
    service never searches, e.g. under 3 words, gets no candidates; without ``gate`` every prompt
    is searched)."""
    out = []
    for group, prompt, evidence, project in prompts:
        payload = {"hook_event_name": "UserPromptSubmit", "prompt": prompt, "cwd": f"/p/{project}", "session_id": "b"}
        if gate and asked(payload) is None:
            out.append(Asked(group, evidence, [], [], prompt, project))
            continue
        t = time.perf_counter()
        results = searcher.search(request_of(prompt, project)).results
        found = candidates(results)
        out.append(Asked(group, evidence, found, results, prompt, project, (time.perf_counter() - t) * 1000))
    return out


@dataclass(slots=True)
class Score:
    """Sums over prompts: evidence recall, injected memories and how many were evidence, tokens."""

    questions: int = 0
    recall: float = 0.0
    injected: int = 0
    relevant: int = 0
    related: int = 0  # evidence, or a summary of a session holding evidence (the relevance model's label)
    fired: int = 0
    tokens: int = 0
    max_tokens: int = 0
    silence_prompts: int = 0
    silence_fired: int = 0

    def add(self, a: Asked, refs: list[str], tokens: int, units: dict[str, Unit]) -> None:
        fired = bool(refs)
        if a.group == "silence":
            self.silence_prompts += 1
            self.silence_fired += fired
            return
        self.questions += 1
        got = {units[r] for r in refs if r in units}
        self.recall += len(got & a.evidence) / len(a.evidence)
        self.injected += len(refs)
        self.relevant += sum(1 for r in refs if units.get(r) in a.evidence)
        sessions = {(p, n) for p, n, _ in a.evidence}
        self.related += sum(1 for r in refs if (u := units.get(r)) is not None
                            and (u in a.evidence or (u[2] == SESSION_TURN and (u[0], u[1]) in sessions)))
        self.fired += fired
        self.tokens += tokens
        self.max_tokens = max(self.max_tokens, tokens)

    def row(self, name: str) -> dict[str, Any]:
        return {"injector": name, "n": self.questions,
                "recall": round(self.recall / self.questions, 3) if self.questions else None,
                "precision": round(self.relevant / self.injected, 3) if self.injected else None,
                "precision_related": round(self.related / self.injected, 3) if self.injected else None,
                "answered": round(self.fired / self.questions, 3) if self.questions else None,
                "mean_tokens": round(self.tokens / self.fired) if self.fired else 0, "max_tokens": self.max_tokens,
                "silence_fired": f"{self.silence_fired}/{self.silence_prompts}" if self.silence_prompts else None}


def baseline(a: Asked, k: int) -> tuple[list[str], int]:
    """The stand-in: the top K results' title lines, in the same frame."""
    top = a.results[:k]
    if not top:
        return [], 0
    chosen = [Chosen(format_ref(r.kind, r.id), f"- {format_ref(r.kind, r.id)}:", r.title or "", 0) for r in top]
    return [c.ref for c in chosen], count_tokens(render(chosen))


def timed_decision(a: Asked) -> float | None:
    """ms of one prompt's search and shipped decision, in-process (None: not searched)."""
    if a.search_ms is None:
        return None
    t = time.perf_counter()
    choose(a.found, BUDGET - frame_tokens(), frozenset())  # every token counted, as the service counts them
    return a.search_ms + (time.perf_counter() - t) * 1000


# The grid asks the same texts again and again: their tokens counted once (the decision is unchanged).
_count = functools.lru_cache(maxsize=None)(count_tokens)


def decide(a: Asked, policy: Policy) -> tuple[list[str], int]:
    """The decision's injection of one prompt."""
    chosen = choose(a.found, BUDGET - frame_tokens(), frozenset(), count=_count, policy=policy)
    return ([c.ref for c in chosen], _count(render(chosen))) if chosen else ([], 0)


def pick(outcomes: dict[Policy, list[tuple[list[str], int]]], asked_: list[Asked], keep: set[int],
         units: dict[str, Unit]) -> Policy:
    """The policy that does best on the prompts numbered in ``keep`` (see the module docstring)."""
    best: tuple[Any, ...] | None = None
    chosen = SHIPPED
    for policy, outs in outcomes.items():
        s = Score()
        for i in keep:
            s.add(asked_[i], *outs[i], units)
        recall = s.recall / max(1, s.questions)
        precision = s.relevant / s.injected if s.injected else 0.0
        silence = s.silence_fired / max(1, s.silence_prompts)
        key = (silence <= TUNE_SILENCE, round(recall, 4), precision)
        if best is None or key > best:
            best, chosen = key, policy
    return chosen


def frontier(outcomes: dict[Policy, list[tuple[list[str], int]]], asked_: list[Asked], keep: set[int],
             units: dict[str, Unit]) -> list[dict[str, Any]]:
    """Per number of memories, the policy of most recall with silence <= 10% (all five conversations,
    the silence train half), and the policy of most precision overall: what the grid can reach."""
    rows: dict[Any, tuple[tuple[float, float], dict[str, Any]]] = {}
    for policy, outs in outcomes.items():
        s = Score()
        for i in keep:
            s.add(asked_[i], *outs[i], units)
        row = s.row(f"grid {asdict(policy)}")
        if s.silence_fired > MAX_SILENCE * s.silence_prompts:
            continue
        for key, value in ((policy.max_memories, (row["recall"], row["precision"] or 0.0)),
                           ("precision", (row["precision"] or 0.0, row["recall"]))):
            if key not in rows or value > rows[key][0]:
                rows[key] = (value, row)
    return [row for _, row in rows.values()]


def spread(prompts: list[Asked], name: str) -> list[dict[str, Any]]:
    """The best similarity's and the best confidence's quantiles over ``prompts`` (a prompt without
    one counts 0)."""
    rows = []
    for field in ("similarity", "confidence"):
        best = sorted(max((getattr(c, field) or 0.0 for c in a.found), default=0.0) for a in prompts)
        at = {f"p{q}": round(best[min(len(best) - 1, int(len(best) * q / 100))], 3) for q in (5, 25, 50, 75, 95)}
        rows.append({"injector": f"best {field}, {name}", "n": len(best), **at, "max": round(best[-1], 3)})
    return rows


def dev_memory(work: Path) -> tuple[Settings, list[Question]]:
    """The dev set's database and store (built and synced on the first run)."""
    return build(DEFAULT_DATA, work / "inject-dev", "turn")


def demo_memory(work: Path) -> Settings:
    """The demo's coding memory (built and synced on the first run)."""
    root = work / "inject-demo"
    settings = Settings(db=root / "claude-mem.db", data_dir=root / "data", chroma_mode="embedded", window_days=0)
    fingerprint = records_fingerprint(list(generate(n_sessions=DEMO_SESSIONS, seed=DEMO_SEED, end_ms=0)))
    if not reusable(root, fingerprint):
        root.mkdir(parents=True)
        make_demo_db(settings.db, DEMO_SESSIONS, DEMO_SEED)
        built(root, fingerprint)
    resync(settings)
    return settings


def shift_to_now(db: Path, now_ms: int | None = None) -> None:
    """Move each project's dates in ``db`` (a copy) by one amount, so that its newest row is at
    ``now_ms``: claude-mem's semantic search keeps only its last 90 days, and the LoCoMo
    conversations are from 2022-2024. Order and spacing within a project are kept."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    conn = sqlite3.connect(db)
    try:
        newest = dict(conn.execute(
            "SELECT project, MAX(e) FROM (SELECT project, created_at_epoch e FROM observations UNION ALL "
            "SELECT project, created_at_epoch FROM session_summaries UNION ALL "
            "SELECT s.project, p.created_at_epoch FROM user_prompts p JOIN sdk_sessions s ON s.id = p.session_db_id "
            "UNION ALL SELECT project, MAX(started_at_epoch, COALESCE(completed_at_epoch, 0)) FROM sdk_sessions) "
            "GROUP BY project").fetchall())
        iso = "strftime('%Y-%m-%dT%H:%M:%fZ', ({0}) / 1000.0, 'unixepoch')"
        with conn:
            for project, top in newest.items():
                delta = now_ms - int(top)
                in_project = "session_db_id IN (SELECT id FROM sdk_sessions WHERE project = ?)"
                for table, where in (("observations", "project = ?"), ("session_summaries", "project = ?"),
                                     ("user_prompts", in_project)):
                    conn.execute(f"UPDATE {table} SET created_at_epoch = created_at_epoch + ?, "
                                 f"created_at = {iso.format('created_at_epoch + ?')} WHERE {where}",
                                 (delta, delta, project))
                conn.execute(f"UPDATE sdk_sessions SET started_at_epoch = started_at_epoch + ?, "
                             f"started_at = {iso.format('started_at_epoch + ?')}, "
                             f"completed_at_epoch = completed_at_epoch + ?, "
                             f"completed_at = {iso.format('completed_at_epoch + ?')} WHERE project = ?",
                             (delta, delta, delta, delta, project))
    finally:
        conn.close()


def claude_mem_asks(prompt: str) -> bool:
    """Whether claude-mem 13.25.3's UserPromptSubmit hook (``session-init``) asks
    ``/api/context/semantic`` for this prompt: not an internal message, not wholly private, not
    blank (``[media prompt]``), at least 20 UTF-16 code units (the hook's and the endpoint's test)."""
    if is_internal_protocol_payload(prompt) or is_private_prompt(prompt) or not prompt.strip():
        return False
    return len(prompt.encode("utf-16-le", "surrogatepass")) // 2 >= SEMANTIC_MIN_CHARS


def semantic_body(prompt: str, project: str) -> dict[str, str]:
    """The hook's request body: the raw prompt, the project of its cwd, the limit setting as the
    string it is, and the platform (``claude-code`` normalised)."""
    return {"q": prompt, "project": project, "limit": SEMANTIC_LIMIT, "platformSource": "claude"}


SEMANTIC_HEADING = re.compile(r"^### (.*) \(([0-9-]*)\)$")


def parse_semantic(context: str) -> list[tuple[str, str, str]]:
    """(title, date, narrative) of each observation in ``/api/context/semantic``'s context: a
    ``## Relevant Past Work`` line, then per observation ``### TITLE (YYYY-MM-DD)``, its narrative
    when it has one, and a blank line (``SearchRoutes.handleSemanticContext``)."""
    out: list[tuple[str, str, list[str]]] = []
    for line in context.split("\n")[1:]:
        if m := SEMANTIC_HEADING.match(line):
            out.append((m.group(1), m.group(2), []))
        elif out:
            out[-1][2].append(line)
    return [(title, date, "\n".join(body).strip()) for title, date, body in out]


def observation_keys(db: Path) -> dict[tuple[str, str, str, str], int]:
    """(project, title, date, narrative) as ``/api/context/semantic`` renders an observation → its id."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, project, title, created_at, narrative FROM observations").fetchall()
    finally:
        conn.close()
    return {(str(p), str(t or "Observation"), str(c or "")[:10], str(n or "").strip()): int(i)
            for i, p, t, c, n in rows}


@dataclass(frozen=True, slots=True)
class Injected:
    """What claude-mem's hook would inject for one prompt: the observations' refs, the context's
    tokens, the call's wall time (None when the hook would not call)."""

    refs: list[str]
    tokens: int
    ms: float | None
    unmatched: int = 0  # blocks of the context that match no observation of the project


def semantic_inject(worker: ClaudeMemWorker, prompts: Sequence[Asked], keys: dict[tuple[str, str, str, str], int]
                    ) -> list[Injected]:
    """Each prompt sent to ``/api/context/semantic`` as the hook sends it, timed; the context read
    back into observation refs (the same rows as memsync's: the database is a copy)."""
    out = []
    for a in prompts:
        if not claude_mem_asks(a.prompt):
            out.append(Injected([], 0, None))
            continue
        t = time.perf_counter()
        answer = worker.request("POST", "/api/context/semantic", semantic_body(a.prompt, a.project))
        ms = (time.perf_counter() - t) * 1000
        context = str(answer.get("context") or "")
        if not context:
            out.append(Injected([], 0, ms))
            continue
        blocks = parse_semantic(context)
        ids = [keys.get((a.project, *block)) for block in blocks]
        out.append(Injected([format_ref(Kind.OBSERVATION, i) for i in ids if i is not None], count_tokens(context), ms,
                            sum(i is None for i in ids)))
    return out


def latency_row(name: str, values: Sequence[float | None]) -> dict[str, Any]:
    """p50 / p95 / max of the measured values (None: not measured)."""
    ms = sorted(v for v in values if v is not None)
    if not ms:
        return {"injector": name, "n": 0}
    return {"injector": name, "n": len(ms), "p50_ms": round(ms[len(ms) // 2], 1),
            "p95_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.95))], 1), "max_ms": round(ms[-1], 1)}


def repeats(prompts: Sequence[Asked], injected: Sequence[Injected]) -> tuple[int, int, int]:
    """Two related prompts in one session: each question and the next of its conversation when they
    share an evidence turn. (pairs, memories the second got, of them already injected for the first):
    claude-mem's endpoint is not told the session, memsync's service leaves out what it injected."""
    pairs = total = again = 0
    for (a, first), (b, second) in itertools.pairwise(zip(prompts, injected, strict=True)):
        if a.group == b.group and a.evidence & b.evidence:
            pairs += 1
            total += len(second.refs)
            again += len(set(second.refs) & set(first.refs))
    return pairs, total, again


def reachable(db: Path, window_days: float = 90.0) -> tuple[set[Unit], set[Unit]]:
    """The evidence turns claude-mem's injection can reach in the copy ``db``: those with an
    observation, and those with one inside its 90-day window now."""
    since = (time.time() - window_days * 86400) * 1000
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT s.project, s.content_session_id, o.prompt_number, o.created_at_epoch "
                            "FROM observations o JOIN sdk_sessions s ON s.memory_session_id = o.memory_session_id "
                            "WHERE o.prompt_number IS NOT NULL").fetchall()
    finally:
        conn.close()
    every, recent = set(), set()
    for project, session, turn, epoch in rows:
        unit = (str(project), int(str(session).rsplit("-s", 1)[1]), int(turn))
        every.add(unit)
        if epoch >= since:
            recent.add(unit)
    return every, recent


def claude_mem_rows(dev: Settings, demo: Settings, questions: list[Asked], silence: list[Asked],
                    units: dict[str, Unit]) -> list[dict[str, Any]]:
    """claude-mem 13.25.3's per-prompt injection on copies of the same two memories (each project's
    dates moved to end now, :func:`shift_to_now`), semantic injection turned on in its settings.json;
    the questions and ``silence`` scored like memsync's, plus latency, reach and repeats."""
    demo_names = {p.name for p in PROJECTS}
    dev_silence = [a for a in silence if a.project not in demo_names]
    demo_silence = [a for a in silence if a.project in demo_names]
    injected: list[Injected] = []
    reach: tuple[set[Unit], set[Unit]] = (set(), set())
    for settings, prompts in ((dev, questions + dev_silence), (demo, demo_silence)):
        with real_claude_mem(settings, prepare=shift_to_now, user_settings=SEMANTIC_INJECT_ON) as worker:
            worker.request("POST", "/api/context/semantic", semantic_body("warm up the semantic search", "none"))
            injected += semantic_inject(worker, prompts, observation_keys(worker.db))
            if settings is dev:
                reach = reachable(worker.db)
    ordered = questions + dev_silence + demo_silence
    unmatched = sum(i.unmatched for i in injected)
    if unmatched:
        print(f"claude-mem: {unmatched} injected blocks matched no observation of their project")
    if not any(i.refs for i in injected[:len(questions)]):  # a changed format or a project mismatch
        raise SystemExit("claude-mem injected nothing for any dev question: check its project names and format")
    score, window, window_memsync = Score(), Score(), Score()
    ceiling = {"observation": 0.0, "in window": 0.0}
    for a, inj in zip(ordered, injected, strict=True):
        score.add(a, inj.refs, inj.tokens, units)
        if a.group == "silence":
            continue
        ceiling["observation"] += len(a.evidence & reach[0]) / len(a.evidence)
        ceiling["in window"] += len(a.evidence & reach[1]) / len(a.evidence)
        if a.evidence <= reach[1]:
            window.add(a, inj.refs, inj.tokens, units)
            window_memsync.add(a, *decide(a, SHIPPED), units)
    pairs, total, again = repeats(questions, injected[:len(questions)])
    n = len(questions)
    return [score.row(f"claude-mem {CLAUDE_MEM_VERSION} semantic inject (top {SEMANTIC_LIMIT} observations)"),
            {"injector": "claude-mem reach: evidence turns with an observation", "n": n,
             "recall": round(ceiling["observation"] / n, 3)},
            {"injector": "claude-mem reach: ... recorded in its last 90 days", "n": n,
             "recall": round(ceiling["in window"] / n, 3)},
            window.row("claude-mem, questions with every evidence turn in its window"),
            window_memsync.row(f"decide, shipped, the same {window.questions} questions"),
            {"injector": "claude-mem repeats: the next question sharing evidence, same session",
             "n": pairs, "repeated": f"{again}/{total}"},
            latency_row("latency: claude-mem /api/context/semantic call, warm worker", [i.ms for i in injected])]


def multilingual_main(work: Path, out: Path) -> int:
    """``--set multilingual``: per language and model, the stand-ins and the shipped decision on
    the parallel set's queries (``scripts/multilingual.py``), no tuning. The set has no silence
    prompts: the silence set's (both halves, unrelated to any memory) are asked in its projects."""
    from scripts import multilingual

    memories, queries = multilingual.load()
    table: list[dict[str, Any]] = []
    spreads: list[dict[str, Any]] = []
    projects = sorted({m["project"] for m in memories})
    quiet: list[tuple[str, str, frozenset[Unit], str]] = [
        ("silence", r["prompt"], frozenset(), projects[i % len(projects)])
        for i, r in enumerate(silence_prompts("train") + silence_prompts("test"))]
    for language in multilingual.LANGUAGES:
        prompts, units = multilingual.inject_prompts(memories, queries, language)
        for model in multilingual.MODELS:
            searcher = Searcher(multilingual.build(work, memories, language, model))
            try:
                gated, every = ask_all(searcher, prompts), ask_all(searcher, prompts, gate=False)
                silence = ask_all(searcher, quiet)
            finally:
                searcher.close()
            gated, every = gated + silence, every + silence
            spreads += spread(every[:len(prompts)], f"{language} {model}, queries")
            spreads += spread(silence, f"{language} {model}, silence prompts")
            rows: list[tuple[str, list[Asked], Callable[[Asked], tuple[list[str], int]]]] = [
                *((f"top-{k} titles (stand-in)", gated, lambda a, k=k: baseline(a, k)) for k in KS),
                ("decide, shipped", gated, lambda a: decide(a, SHIPPED)),
                ("top-5 titles, every prompt searched", every, lambda a: baseline(a, 5)),
                ("decide, shipped, every prompt searched", every, lambda a: decide(a, SHIPPED))]
            for name, asked_, inject in rows:
                s = Score()
                for a in asked_:
                    refs, tokens = inject(a)
                    s.add(a, refs, tokens, units)
                table.append({"language": language, "model": model, **s.row(name)})
            for style in ("question", "phrase", "word"):
                s = Score()
                for a in every:
                    if a.group == style:
                        s.add(a, *decide(a, SHIPPED), units)
                table.append({"language": language, "model": model,
                              **s.row(f"decide, shipped, every prompt searched, {style}s")})
    print_table(table)
    print_table(spreads)
    write_json({"set": "multilingual", "shipped": asdict(SHIPPED), "table": table + spreads}, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--silence", choices=("train", "test"), default="train",
                   help="the silence set's half scored (thresholds are tuned on train whatever this says)")
    p.add_argument("--work", type=Path, default=ROOT / ".bench")
    p.add_argument("--out", type=Path, default=OUT,
                   help="JSON written (default .bench/bench_inject.json; with --set multilingual "
                        ".bench/bench_inject_multilingual.json)")
    p.add_argument("--set", choices=("dev", "multilingual"), default="dev", dest="dataset",
                   help="dev (default): the LoCoMo dev questions and the silence set; multilingual: the parallel "
                        "English/Chinese/Japanese/Korean set (scripts/multilingual.py), the shipped decision untuned")
    p.add_argument("--claude-mem", action="store_true",
                   help="also the real claude-mem's per-prompt injection on copies of both memories (its first run "
                        "backfills its own Chroma store: about half an hour)")
    args = p.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so that real_claude_mem's finally stops its worker and Chroma server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.dataset == "multilingual":
        return multilingual_main(args.work / "inject-multilingual", args.out.with_name("bench_inject_multilingual.json")
                                 if args.out == OUT else args.out)

    dev, questions = dev_memory(args.work)
    projects = sorted({q.project for q in questions})
    demo = demo_memory(args.work)
    dev_searcher, demo_searcher = Searcher(dev), Searcher(demo)
    try:
        units = turns(dev_searcher)
        for searcher, project in ((dev_searcher, projects[0]), (demo_searcher, PROJECTS[0].name)):
            searcher.search(request_of("warm up the query model", project))  # as the worker warms up
        t = time.perf_counter()
        asked_ = ask_all(dev_searcher, [(q.project, q.question, frozenset((q.project, *turn) for turn in q.evidence),
                                         q.project) for q in questions])
        n_questions = len(asked_)

        def silence_of(half: str) -> list[Asked]:
            rows = silence_prompts(half)
            dev_rows = [r for r in rows if r["memory"] == "dev"]
            demo_rows = [r for r in rows if r["memory"] == "demo"]
            return (ask_all(dev_searcher, [("silence", r["prompt"], frozenset(), projects[i % len(projects)])
                                           for i, r in enumerate(dev_rows)])
                    + ask_all(demo_searcher, [("silence", r["prompt"], frozenset(), PROJECTS[i % len(PROJECTS)].name)
                                              for i, r in enumerate(demo_rows)]))

        train = silence_of("train")
        asked_ += train
        scored_silence = train if args.silence == "train" else silence_of("test")
        print(f"searched {len(asked_)} prompts in {time.perf_counter() - t:.0f} s")
    finally:
        dev_searcher.close()
        demo_searcher.close()

    table: list[dict[str, Any]] = []
    held = asked_[:n_questions] + scored_silence
    for k in KS:
        s = Score()
        for a in held:
            s.add(a, *baseline(a, k), units)
        table.append(s.row(f"top-{k} titles (stand-in)"))
    shipped = Score()
    for a in held:
        shipped.add(a, *decide(a, SHIPPED), units)
    table.append(shipped.row(f"decide, shipped {asdict(SHIPPED)}"))
    for n in MAX_MEMORIES_SETTING:  # what a user who sets inject_max_memories gets, the rest as shipped
        capped = Score()
        for a in held:
            capped.add(a, *decide(a, replace(SHIPPED, max_memories=n)), units)
        table.append(capped.row(f"decide, shipped, inject_max_memories={n}"))

    # Leave one conversation out: each fold's policy from the other four and the silence train half.
    outcomes = {policy: [decide(a, policy) for a in asked_] for policy in GRID}
    train_ids = set(range(n_questions, len(asked_)))
    pooled, folds = Score(), {}
    for held_out in projects:
        keep = {i for i in range(n_questions) if asked_[i].group != held_out} | train_ids
        policy = pick(outcomes, asked_, keep, units)
        folds[held_out] = asdict(policy)
        for i in range(n_questions):
            if asked_[i].group == held_out:
                pooled.add(asked_[i], *outcomes[policy][i], units)
    everything = pick(outcomes, asked_, set(range(len(asked_))), units)
    for a in scored_silence:  # the fold policies' silence: the policy chosen on all five
        pooled.add(a, *decide(a, everything), units)
    table.append(pooled.row("decide, held-out folds (LOCO)"))
    by_category: dict[int, Score] = defaultdict(Score)
    cats = {(q.project, q.question): q.category for q in questions}
    for a, q in zip(asked_[:n_questions], questions, strict=True):
        by_category[cats[(q.project, q.question)]].add(a, *decide(a, everything), units)
    for cat, s in sorted(by_category.items()):
        table.append(s.row(f"decide (all-five policy), category {cat}"))
    table.extend(frontier(outcomes, asked_, set(range(n_questions)) | train_ids, units))
    table.extend(spread(asked_[:n_questions], "questions") + spread(train, "silence train"))
    memsync_ms = [timed_decision(a) for a in held]
    if args.claude_mem:
        table.extend(claude_mem_rows(dev, demo, asked_[:n_questions], scored_silence, units))
    table.append(latency_row("latency: memsync search + decision in-process (not the hook's process)", memsync_ms))
    print_table(table)
    print(f"folds: {folds}\npolicy chosen on all five: {asdict(everything)}")
    write_json({"silence_half": args.silence, "folds": folds, "chosen": asdict(everything),
                "shipped": asdict(SHIPPED), "table": table}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
