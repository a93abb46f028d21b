"""A deterministic demo memory: realistic coding-agent sessions across a few projects.

Same ``seed``, ``n_sessions`` and ``end_ms`` → the same records, byte for byte. Used by the run
command (demo database), the sync benchmark (any size) and tests. Field lengths follow what
claude-mem rows look like: narratives of a few sentences, 2-5 short facts, summaries of one to
three sentences per field, prompts from a line to a paragraph.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memsync.config.records import iso_from_ms

DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class Project:
    """A demo project: its name, stack, files and topics."""

    name: str
    stack: str
    files: tuple[str, ...]
    components: tuple[str, ...]


PROJECTS: tuple[Project, ...] = (
    Project(
        "payments-api", "Python, FastAPI and PostgreSQL",
        ("app/routes/charges.py", "app/models/invoice.py", "app/services/stripe_client.py", "app/db/session.py",
         "migrations/0042_refunds.sql", "tests/test_charges.py", "app/workers/retry_queue.py", "app/auth/tokens.py"),
        ("refund endpoint", "webhook handler", "idempotency keys", "invoice PDF export", "connection pool",
         "retry queue", "currency rounding", "JWT validation"),
    ),
    Project(
        "web-dashboard", "TypeScript, React and Vite",
        ("src/components/ChartPanel.tsx", "src/hooks/useMetrics.ts", "src/api/client.ts", "src/pages/Settings.tsx",
         "src/store/session.ts", "vite.config.ts", "src/components/DataTable.tsx", "src/i18n/en.json"),
        ("chart rendering", "dark mode toggle", "metrics polling hook", "settings form validation",
         "table virtualization", "login redirect", "bundle size", "date range picker"),
    ),
    Project(
        "infra-tools", "Go, Terraform and GitHub Actions",
        ("cmd/deployer/main.go", "internal/k8s/rollout.go", "terraform/modules/vpc/main.tf", ".github/workflows/ci.yml",
         "internal/config/load.go", "internal/backup/s3.go", "Makefile", "internal/health/probe.go"),
        ("blue-green rollout", "S3 backup rotation", "VPC peering", "CI cache", "config loader",
         "health probes", "secret rotation", "log shipping"),
    ),
)

OBS_TYPES = ("bugfix", "feature", "refactor", "change", "discovery", "decision")
CONCEPTS = ("how-it-works", "why-it-exists", "what-changed", "problem-solution", "gotcha", "pattern", "trade-off")
PROBLEMS = (
    "a race condition when two requests arrive within the same millisecond",
    "an off-by-one error in the pagination cursor",
    "a timeout because the query scanned the whole table",
    "stale cache entries after a deploy",
    "a null value that the serializer did not expect",
    "a memory leak from listeners that were never removed",
    "flaky tests caused by wall-clock time",
    "a silent failure when the environment variable was missing",
    "duplicate events delivered by the message broker",
    "an encoding error on non-ASCII input",
)
FIXES = (
    "added a unique constraint and retried on conflict",
    "moved the check into a single transaction",
    "added an index and rewrote the query to use it",
    "invalidated the cache on version change",
    "validated input at the boundary and returned a clear error",
    "cleaned up subscriptions in the teardown path",
    "injected a clock so tests control time",
    "failed fast at startup with a message naming the variable",
    "made the handler idempotent using the event id",
    "normalised text to UTF-8 before processing",
)
VERBS = ("Fix", "Add", "Refactor", "Investigate", "Document", "Speed up", "Harden", "Simplify")
PROMPT_OPENERS = (
    "Can you look into", "Please fix", "Why does", "Let's add", "I want to refactor", "Check whether",
    "Write tests for", "Explain how",
)


def _sentence_pad(rng: random.Random, comp: str, project: Project) -> str:
    options = (
        f"The {comp} is used by several callers, so the change keeps its public signature.",
        f"This matters because {project.name} relies on it for every request in production.",
        "The existing tests did not cover this path, so a regression test was added.",
        "Logs showed the problem only under load, which is why it went unnoticed.",
        f"The same pattern appears elsewhere in the {project.stack} code and may need the same treatment.",
        "Benchmarks before and after showed no measurable slowdown.",
    )
    return rng.choice(options)


def _observation(rng: random.Random, project: Project, session: str, prompt_no: int, ms: int) -> dict[str, Any]:
    comp = rng.choice(project.components)
    problem, fix = rng.randrange(len(PROBLEMS)), rng.randrange(len(FIXES))
    kind = rng.choice(OBS_TYPES)
    files = rng.sample(project.files, rng.randint(1, 3))
    narrative = " ".join(
        [f"While working on the {comp} in {project.name} ({project.stack}), we found {PROBLEMS[problem]}.",
         f"The root cause was in {files[0]}; we {FIXES[fix]}."]
        + [_sentence_pad(rng, comp, project) for _ in range(rng.randint(1, 4))]
    )
    facts = [f"{files[0]} handles the {comp}", f"The {comp} suffered from {PROBLEMS[problem]}",
             f"Fixed in {files[0]}: {FIXES[fix]}"]
    facts += [f"{f} was touched" for f in files[1 : rng.randint(1, len(files))]]
    return {
        "kind": "observation", "project": project.name, "session": session, "type": kind,
        "title": f"{rng.choice(VERBS)} {comp}", "subtitle": PROBLEMS[problem].capitalize(),
        "narrative": narrative, "facts": facts, "concepts": rng.sample(CONCEPTS, rng.randint(1, 3)),
        "files_read": files, "files_modified": files[:1] if kind in ("bugfix", "feature", "refactor", "change") else [],
        "prompt_number": prompt_no, "created_at": iso_from_ms(ms), "created_at_epoch": ms,
    }


def _prompt(rng: random.Random, project: Project, session: str, prompt_no: int, ms: int) -> dict[str, Any]:
    comp = rng.choice(project.components)
    text = f"{rng.choice(PROMPT_OPENERS)} the {comp}? {PROBLEMS[rng.randrange(len(PROBLEMS))].capitalize()}."
    if rng.random() < 0.4:
        text += f" It happens in {rng.choice(project.files)} when we deploy. " + _sentence_pad(rng, comp, project)
    return {"kind": "prompt", "project": project.name, "session": session, "prompt_number": prompt_no,
            "prompt_text": text, "created_at": iso_from_ms(ms), "created_at_epoch": ms}


def _summary(rng: random.Random, project: Project, session: str, prompt_no: int, ms: int) -> dict[str, Any]:
    comp = rng.choice(project.components)
    files = rng.sample(project.files, 2)
    return {
        "kind": "summary", "project": project.name, "session": session, "prompt_number": prompt_no,
        "request": f"Work on the {comp} of {project.name}.",
        "investigated": f"Read {files[0]} and {files[1]}; reproduced {PROBLEMS[rng.randrange(len(PROBLEMS))]}.",
        "learned": f"The {comp} depends on {rng.choice(project.components)}; {_sentence_pad(rng, comp, project)}",
        "completed": f"We {FIXES[rng.randrange(len(FIXES))]} and added tests.",
        "next_steps": rng.choice(["Monitor the error rate after the deploy.", "Open a follow-up for the other callers.",
                                  "", "Write the migration guide."]),
        "notes": rng.choice(["", "", f"See {files[0]}."]),
        "files_read": files, "files_edited": files[:1],
        "created_at": iso_from_ms(ms), "created_at_epoch": ms,
    }


def generate(n_sessions: int = 40, seed: int = 7, end_ms: int = 1_790_000_000_000, span_days: int = 120,
             projects: int = 3) -> Iterator[dict[str, Any]]:
    """Import records for ``n_sessions`` sessions ending at ``end_ms``: per session 1-3 prompts, 2-8
    observations and one summary (about 8 rows a session)."""
    rng = random.Random(seed)
    start = end_ms - span_days * DAY_MS
    step = (end_ms - start) // max(1, n_sessions)
    for s in range(n_sessions):
        project = PROJECTS[s % min(projects, len(PROJECTS))]
        session = f"{project.name}-s{s:05d}"
        ms = start + s * step + rng.randrange(max(1, step // 2))
        for p in range(1, rng.randint(1, 3) + 1):
            yield _prompt(rng, project, session, p, ms)
            ms += rng.randint(5_000, 60_000)
            for _ in range(rng.randint(1, 3)):
                yield _observation(rng, project, session, p, ms)
                ms += rng.randint(1_000, 30_000)
        yield _summary(rng, project, session, p, ms)
