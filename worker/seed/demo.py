"""A deterministic demo memory: coding-agent sessions of three projects that read like a real memory.

Each session is one handwritten episode (``worker/seed/demo_episodes.py``): its prompts, the observations
recorded while the agent worked (title, subtitle, narrative, facts, concepts, files), and the
session's summary. Same ``seed``, ``n_sessions`` and ``end_ms`` → the same records, byte for byte;
the seed moves the times. Used by the run command (the demo database), the benchmarks (any size)
and tests.

The default 40 sessions tell each episode once. Larger runs tell them again: a retold episode's
prompts, subtitles, narratives and summaries end with a commit of their own (as a real memory's
texts carry commit hashes and dates), while titles and facts repeat as they do in real memory.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memsync.config.records import iso_from_ms
from memsync.worker.seed.demo_episodes import BY_PROJECT, Episode, Observation

DAY_MS = 86_400_000
CHANGES = ("bugfix", "feature", "refactor", "change")  # the types that modify files


@dataclass(frozen=True, slots=True)
class Project:
    """A demo project: its name and stack; its sessions are ``BY_PROJECT[name]``."""

    name: str
    stack: str


PROJECTS: tuple[Project, ...] = (
    Project("payments-api", "Python, FastAPI and PostgreSQL"),
    Project("web-dashboard", "TypeScript, React and Vite"),
    Project("infra-tools", "Go, Terraform and Kubernetes"),
)


def _unique(items: Iterator[str]) -> list[str]:
    return list(dict.fromkeys(items))


class _Teller:
    """Turns one episode into claude-mem records for one session."""

    def __init__(self, project: Project, session: str, retold: int) -> None:
        self.project, self.session = project, session
        self.mark = "" if not retold else (
            f" (again in {hashlib.sha1(f'{session}'.encode()).hexdigest()[:7]})")  # noqa: S324 - not security

    def again(self, text: str) -> str:
        return text + self.mark if text else text

    def base(self, kind: str, ms: int) -> dict[str, Any]:
        return {"kind": kind, "project": self.project.name, "session": self.session,
                "created_at": iso_from_ms(ms), "created_at_epoch": ms}

    def prompt(self, text: str, prompt_no: int, ms: int) -> dict[str, Any]:
        return {**self.base("prompt", ms), "prompt_number": prompt_no, "prompt_text": self.again(text)}

    def observation(self, o: Observation, prompt_no: int, ms: int) -> dict[str, Any]:
        return {**self.base("observation", ms), "type": o.type, "title": o.title, "subtitle": self.again(o.subtitle),
                "narrative": self.again(o.narrative), "facts": list(o.facts), "concepts": list(o.concepts),
                "files_read": list(o.files_read),
                "files_modified": list(o.files_modified) if o.type in CHANGES else [],
                "prompt_number": prompt_no}

    def summary(self, e: Episode, prompt_no: int, ms: int) -> dict[str, Any]:
        s = e.summary
        return {**self.base("summary", ms), "prompt_number": prompt_no,
                "request": self.again(s.request), "investigated": self.again(s.investigated),
                "learned": self.again(s.learned), "completed": self.again(s.completed),
                "next_steps": self.again(s.next_steps), "notes": self.again(s.notes),
                "files_read": _unique(f for o in e.observations for f in o.files_read),
                "files_edited": _unique(f for o in e.observations if o.type in CHANGES for f in o.files_modified)}


def generate(n_sessions: int = 40, seed: int = 7, end_ms: int = 1_790_000_000_000, span_days: int = 120,
             projects: int = 3) -> Iterator[dict[str, Any]]:
    """Import records for ``n_sessions`` sessions ending at ``end_ms``, the projects in turn: per
    session its episode's prompts (1-2), each followed by its observations (2-4 in all), then the
    summary (about 6 rows a session)."""
    rng = random.Random(seed)
    start = end_ms - span_days * DAY_MS
    step = (end_ms - start) // max(1, n_sessions)
    used = PROJECTS[:max(1, min(projects, len(PROJECTS)))]
    for s in range(n_sessions):
        project = used[s % len(used)]
        episodes = BY_PROJECT[project.name]
        nth = s // len(used)  # this project's nth session
        episode = episodes[nth % len(episodes)]
        session = f"{project.name}-s{s:05d}"
        tell = _Teller(project, session, nth // len(episodes))
        ms = start + s * step + rng.randrange(max(1, step // 2))
        prompts, observations = episode.prompts, episode.observations
        for p, text in enumerate(prompts, 1):
            yield tell.prompt(text, p, ms)
            ms += rng.randint(5_000, 60_000)
            for i, o in enumerate(observations):
                if i * len(prompts) // len(observations) == p - 1:
                    yield tell.observation(o, p, ms)
                    ms += rng.randint(1_000, 30_000)
        yield tell.summary(episode, len(prompts), ms)
