"""Per-prompt injection quality: evidence recall, precision, tokens and silence, the decision beside
the stand-in of what today's search would inject.

    .venv/bin/python -m scripts.bench_inject [--silence train|test] [--work .bench] [--out FILE]

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
evidence (pooled); tokens: the rendered context (``config.tokens``), mean over the prompts that got
one and max. Silence: the share of the silence prompts (``tests/data/inject``; ``--silence train``
unless the test half is asked for: thresholds are tuned on the train half only) that get anything,
each against its memory (dev prompts in the five conversations by turn, demo prompts in the three
demo projects by turn).

The decision's thresholds are chosen leave-one-conversation-out: for each conversation, the policy
(``search.inject.Policy``, over a grid) that does best on the other four and the silence train half
(the most recall with precision >= 0.5 and silence <= 10%; failing that the most recall with
silence <= 10%) is scored on the held-out one; the pooled held-out folds are reported, beside the
policy chosen on all five (what ships) and the shipped policy's own figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memsync.commands.db import make_demo_db
from memsync.config.claude_mem.schema import Kind
from memsync.config.records import format_ref
from memsync.config.settings import Settings
from memsync.config.tokens import count_tokens
from memsync.search import Searcher
from memsync.search.inject import SHIPPED, Candidate, Chosen, Policy, choose
from memsync.search.models import Result
from memsync.servers.inject_service import asked, candidates, frame_tokens, render, request_of
from memsync.worker.demo import PROJECTS
from memsync.worker.resync import resync
from scripts.bench_quality import build
from scripts.benchlib import ROOT, print_table, write_json
from scripts.locomo import DEFAULT_DATA, Question

KS = (5, 8, 10)
SILENCE = ROOT / "tests" / "data" / "inject"
GRID = [Policy(q / 100, m, n) for q, m, n in itertools.product(range(30, 76, 3), (0.05, 0.1, 0.2), (1, 2, 3, 5, 8))]
BUDGET = Settings.model_fields["inject_budget_tokens"].default  # the shipped budget (600)
MAX_SILENCE = 0.10
MIN_PRECISION = 0.5

Unit = tuple[str, int, int]  # (project, session number, turn number): one evidence turn


@dataclass(frozen=True, slots=True)
class Asked:
    """One prompt as searched: its group (a conversation, or ``silence``), its evidence, the candidates."""

    group: str
    evidence: frozenset[Unit]
    found: list[Candidate]
    results: list[Result]


def turns(searcher: Searcher) -> dict[str, Unit]:
    """ref → the evidence turn it stands for: a prompt its own turn, an observation the turn it was
    recorded at."""
    rows = searcher._rows()  # noqa: SLF001 - a benchmark may read the same database directly
    try:
        prompts = rows.query("SELECT p.id, p.prompt_number, s.project, s.content_session_id FROM user_prompts p "
                             "JOIN sdk_sessions s ON s.id = p.session_db_id")
        observations = rows.query("SELECT o.id, o.prompt_number, s.project, s.content_session_id FROM observations o "
                                  "JOIN sdk_sessions s ON s.memory_session_id = o.memory_session_id "
                                  "WHERE o.prompt_number IS NOT NULL")
    finally:
        rows.close()
    out: dict[str, Unit] = {}
    for kind, got in ((Kind.PROMPT, prompts), (Kind.OBSERVATION, observations)):
        for r in got:
            session = int(str(r["content_session_id"]).rsplit("-s", 1)[1])
            out[format_ref(kind, int(r["id"]))] = (str(r["project"]), session, int(r["prompt_number"]))
    return out


def silence_prompts(half: str) -> list[dict[str, Any]]:
    """The silence set's ``half`` (train or test)."""
    path = SILENCE / f"silence-{half}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ask_all(searcher: Searcher, prompts: Sequence[tuple[str, str, frozenset[Unit], str]], now: datetime) -> list[Asked]:
    """Each (group, prompt, evidence, project) searched as the service searches it (a prompt the
    service never searches, e.g. under 3 words, gets no candidates)."""
    out = []
    for group, prompt, evidence, project in prompts:
        payload = {"hook_event_name": "UserPromptSubmit", "prompt": prompt, "cwd": f"/p/{project}", "session_id": "b"}
        if asked(payload) is None:
            out.append(Asked(group, evidence, [], []))
            continue
        results = searcher.search(request_of(prompt, project)).results
        out.append(Asked(group, evidence, candidates(results, now), results))
    return out


@dataclass(slots=True)
class Score:
    """Sums over prompts: evidence recall, injected memories and how many were evidence, tokens."""

    questions: int = 0
    recall: float = 0.0
    injected: int = 0
    relevant: int = 0
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
        self.fired += fired
        self.tokens += tokens
        self.max_tokens = max(self.max_tokens, tokens)

    def row(self, name: str) -> dict[str, Any]:
        return {"injector": name, "n": self.questions,
                "recall": round(self.recall / self.questions, 3) if self.questions else None,
                "precision": round(self.relevant / self.injected, 3) if self.injected else None,
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


def decide(a: Asked, policy: Policy) -> tuple[list[str], int]:
    """The decision's injection of one prompt."""
    chosen = choose(a.found, BUDGET - frame_tokens(), frozenset(), policy=policy)
    return ([c.ref for c in chosen], count_tokens(render(chosen))) if chosen else ([], 0)


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
        key = (silence <= MAX_SILENCE, precision >= MIN_PRECISION, round(recall, 4), precision)
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
    """The best similarity's quantiles over ``prompts`` (a prompt without one counts 0)."""
    best = sorted(max((c.similarity or 0.0 for c in a.found), default=0.0) for a in prompts)
    at = {f"p{q}": round(best[min(len(best) - 1, int(len(best) * q / 100))], 3) for q in (5, 25, 50, 75, 95)}
    return [{"injector": f"best similarity, {name}", "n": len(best), **at, "max": round(best[-1], 3)}]


def dev_memory(work: Path) -> tuple[Settings, list[Question]]:
    """The dev set's database and store (built and synced on the first run)."""
    return build(DEFAULT_DATA, work / "inject-dev", "turn")


def demo_memory(work: Path) -> Settings:
    """The demo's coding memory (built and synced on the first run)."""
    root = work / "inject-demo"
    settings = Settings(db=root / "claude-mem.db", data_dir=root / "data", chroma_mode="embedded", window_days=0)
    if not settings.db.exists():
        root.mkdir(parents=True, exist_ok=True)
        make_demo_db(settings.db, 40, 7)
    resync(settings)
    return settings


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--silence", choices=("train", "test"), default="train",
                   help="the silence set's half scored (thresholds are tuned on train whatever this says)")
    p.add_argument("--work", type=Path, default=ROOT / ".bench")
    p.add_argument("--out", type=Path, default=ROOT / ".bench" / "bench_inject.json")
    args = p.parse_args(argv)
    now = datetime.now(UTC)

    dev, questions = dev_memory(args.work)
    projects = sorted({q.project for q in questions})
    demo = demo_memory(args.work)
    dev_searcher, demo_searcher = Searcher(dev), Searcher(demo)
    try:
        units = turns(dev_searcher)
        t = time.perf_counter()
        asked_ = ask_all(dev_searcher, [(q.project, q.question, frozenset((q.project, *turn) for turn in q.evidence),
                                         q.project) for q in questions], now)
        n_questions = len(asked_)

        def silence_of(half: str) -> list[Asked]:
            rows = silence_prompts(half)
            dev_rows = [r for r in rows if r["memory"] == "dev"]
            demo_rows = [r for r in rows if r["memory"] == "demo"]
            return (ask_all(dev_searcher, [("silence", r["prompt"], frozenset(), projects[i % len(projects)])
                                           for i, r in enumerate(dev_rows)], now)
                    + ask_all(demo_searcher, [("silence", r["prompt"], frozenset(), PROJECTS[i % len(PROJECTS)].name)
                                              for i, r in enumerate(demo_rows)], now))

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
    print_table(table)
    print(f"folds: {folds}\npolicy chosen on all five: {asdict(everything)}")
    write_json({"silence_half": args.silence, "folds": folds, "chosen": asdict(everything),
                "shipped": asdict(SHIPPED), "table": table}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
