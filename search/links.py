"""Linked evidence: which user prompts the observations (and summaries) a search found vouch for,
and how strongly.

claude-mem records each observation under a user prompt: same session, ``prompt_number``. In
Claude Code one prompt is often followed by dozens of tool uses, and every observation they
produce carries that prompt's number; an agent importing a conversation may link everything to the
session's last prompt. So a recorded link is precise (one observation under its prompt) or coarse
(fifty under one prompt, most of them about earlier prompts of the session). A vote that trusted
every link fully let a prompt with fifty observations outvote everything (measured: coarse links
cost recall below having no observations at all).

Each found observation ``o`` recorded under prompt number ``n`` of session ``S`` therefore spreads
one vote over the prompts it can be about, the prompts of ``S`` numbered up to ``n`` (the last
``MAX_CANDIDATES`` of them), as an attribution

    a(o, p) = softmax over p of ( cos(o, p) / TEMPERATURE + log prior(p) )

where the recorded prompt's prior is ``1 / fan_in`` (the number of observations recorded under it)
and the other prompts share the rest. One observation under its prompt keeps the whole vote there
(a precise link, as before); one of fifty under a prompt goes where its text points, and a flat
attribution (no prompt stands out) gives every prompt a small share. ``cos`` is the best of the
observation's field documents against the prompt's document, from the worker's vector copy (the
vectors memsync already has); without the copy only the prior is known, so the recorded prompt gets
``1 / fan_in`` and no other prompt is guessed at. Summaries are recorded the same way (session and
``prompt_number``) and are treated alike, with every prompt of the session equally likely a priori.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import Kind
from memsync.search.models import Filters, Key, Window
from memsync.search.sql import SourceRows
from memsync.search.vectorcopy import VectorCopy

TEMPERATURE = 0.05  # cosine differences of ~0.1 between prompts decide the attribution (e^2)
MAX_CANDIDATES = 64  # prompts of the session an observation can be attributed to (the latest ones)


@dataclass(frozen=True, slots=True)
class Vote:
    """One prompt vouched for: the rank of the evidence in its list and the share of its vote."""

    prompt: int
    rank: int
    share: float


def votes(rows: SourceRows, copy: VectorCopy | None, sides: Sequence[Sequence[Sequence[Key]]], filters: Filters,
          window: Window, k: int) -> list[list[Vote]]:
    """For each side (the lexical and the semantic evidence: one ranking per kind of observations or
    summaries, best first), the prompts its rows vouch for, each with the best (rank, share) any
    evidence row gives it, judged as fusion will count it (``share / (k + rank + 1)``), within
    filters/window; strongest first. The rows' links and vectors are read once for all sides."""
    every = list(dict.fromkeys(key for lists in sides for keys in lists for key in keys))
    sources = rows.recorded_under(every) if every else {}
    if not sources:
        return [[] for _ in sides]
    prompts = rows.session_prompts({session for session, _ in sources.values()})
    fan_in = rows.fan_in({session for k, (session, _) in sources.items() if k[0] is Kind.OBSERVATION})
    vectors = _vectors(copy, [key for key in every if key in sources],
                       [p for plist in prompts.values() for _, p in plist]) if copy is not None else {}
    shares: dict[Key, dict[int, float]] = {}
    for key, (session, number) in sources.items():
        candidates = [p for num, p in prompts.get(session, []) if num <= number][-MAX_CANDIDATES:]
        if not candidates:
            continue
        recorded = next((p for num, p in prompts[session] if num == number), None)
        prior = 1.0 / max(1, fan_in.get((session, number), 1)) if key[0] is Kind.OBSERVATION \
            else 1.0 / len(candidates)
        shares[key] = _attribute(key, candidates, recorded, prior, vectors)
    out: list[list[Vote]] = []
    allowed: set[int] | None = None
    for lists in sides:
        best: dict[int, tuple[float, int, float]] = {}  # prompt -> (strength, rank, share)
        for keys in lists:
            for rank, key in enumerate(keys):
                for prompt, share in shares.get(key, {}).items():
                    strength = share / (k + rank + 1)
                    if prompt not in best or strength > best[prompt][0]:
                        best[prompt] = (strength, rank, share)
        if allowed is None:
            every_prompt = sorted({p for split in shares.values() for p in split})
            allowed = rows.passing(Kind.PROMPT, every_prompt, filters, window)
        order = sorted((p for p in best if p in allowed), key=lambda p: -best[p][0])
        out.append([Vote(p, best[p][1], best[p][2]) for p in order])
    return out


def _attribute(key: Key, candidates: list[int], recorded: int | None, prior: float,
               vectors: dict[Key, npt.NDArray[np.float32]]) -> dict[int, float]:
    """Shares of one row's vote over its candidate prompts (see the module docstring)."""
    if recorded is not None and prior >= 1.0:
        return {recorded: 1.0}  # the only row recorded under its prompt: a precise link
    own = vectors.get(key)
    sims = [vectors.get((Kind.PROMPT, p)) for p in candidates]
    if own is None or any(v is None for v in sims):
        # No vectors to tell which prompt it talks about: only the recorded link, as far as its
        # fan-in lets it be trusted.
        return {recorded: prior} if recorded is not None else {}
    docs = [v for v in sims if v is not None]
    starts = np.cumsum([0] + [len(v) for v in docs[:-1]])
    cos = (np.concatenate(docs) @ own.T).max(axis=1)  # each prompt document against the row's best
    logits = np.maximum.reduceat(cos, starts) / TEMPERATURE  # each prompt's best document
    if recorded is not None and len(candidates) > 1:
        rest = (1.0 - prior) / (len(candidates) - 1)
        logits += np.log(np.array([prior if p == recorded else rest for p in candidates]) + 1e-12)
    logits -= logits.max()
    weights = np.exp(logits)
    weights /= weights.sum()
    return {p: float(w) for p, w in zip(candidates, weights.tolist(), strict=True)}


def _vectors(copy: VectorCopy, keys: Sequence[Key], prompts: Sequence[int]) -> dict[Key, npt.NDArray[np.float32]]:
    """Unit vectors (documents × dim) of the rows and prompts, from the vector copy."""
    wanted = list(dict.fromkeys([*keys, *((Kind.PROMPT, p) for p in prompts)]))
    return copy.row_vectors(wanted)
