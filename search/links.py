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
``prompt_number``) and can be treated alike, with every prompt of the session equally likely a
priori; measured, that costs recall (a summary covers a whole session), so the search passes
observations only (``EVIDENCE_KINDS``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import Kind
from memsync.search.models import Key, Scope
from memsync.search.sql import SourceRows
from memsync.search.vectorcopy import VectorCopy

# Rows that vouch for the prompt they were recorded under, searched beside prompts (``search.plan``).
# Summaries too were measured as evidence (attributed to the session's prompt nearest to them):
# recall@10 -0.003 to -0.007 on every linking. A summary covers a whole session, so the prompt
# nearest to it is not the one a query is after; they stay results of their own.
EVIDENCE_KINDS = (Kind.OBSERVATION,)

TEMPERATURE = 0.05  # cosine differences of ~0.1 between prompts decide the attribution (e^2)
MAX_CANDIDATES = 64  # prompts of the session an observation can be attributed to (the latest ones)
MIN_SHARE = 0.01  # smaller shares of a vote are dropped: they cannot move a prompt in the fusion


@dataclass(frozen=True, slots=True)
class Vote:
    """One prompt vouched for: the rank of the evidence in its list and the share of its vote."""

    prompt: int
    rank: int
    share: float


def votes(rows: SourceRows, copy: VectorCopy | None, sides: Sequence[Sequence[Sequence[Key]]], scope: Scope,
          k: int) -> list[list[Vote]]:
    """For each side (the lexical and the semantic evidence: one ranking per kind of observations or
    summaries, best first), the prompts its rows vouch for, each with the best (rank, share) any
    evidence row gives it, judged as fusion will count it (``share / (k + rank + 1)``), within
    the scope; strongest first. The rows' links and vectors are read once for all sides."""
    every = list(dict.fromkeys(key for lists in sides for keys in lists for key in keys))
    sources = rows.recorded_under(every) if every else {}
    if not sources:
        return [[] for _ in sides]
    prompts = rows.session_prompts({session for session, _ in sources.values()})
    fan_in = rows.fan_in({session for k, (session, _) in sources.items() if k[0] is Kind.OBSERVATION})
    vectors = _vectors(copy, [key for key in every if key in sources],
                       [p for plist in prompts.values() for _, p in plist]) if copy is not None else {}
    sessions = {session: _Session(plist, vectors) for session, plist in prompts.items()}
    shares: dict[Key, dict[int, float]] = {}
    for key, (session, number) in sources.items():
        if session not in sessions:
            continue
        fan = fan_in.get((session, number), 1) if key[0] is Kind.OBSERVATION else 0
        shares[key] = sessions[session].attribute(vectors.get(key), number, fan)
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
            allowed = rows.passing(Kind.PROMPT, every_prompt, scope.filters, scope.window)
        order = sorted((p for p in best if p in allowed), key=lambda p: -best[p][0])
        out.append([Vote(p, best[p][1], best[p][2]) for p in order])
    return out


class _Session:
    """One session's prompts in number order, with their vectors as one matrix (a prompt has one
    document), so that each evidence row recorded in it costs one product."""

    def __init__(self, prompts: list[tuple[int, int]], vectors: dict[Key, npt.NDArray[np.float32]]) -> None:
        self.numbers = [num for num, _ in prompts]
        self.ids = [p for _, p in prompts]
        found = [vectors.get((Kind.PROMPT, p)) for p in self.ids]
        # A prompt not in the copy yet (the newest of a live session) is left out of the
        # similarities; it keeps its prior only.
        self.has = np.array([v is not None for v in found], dtype=bool)
        dim = next((v.shape[1] for v in found if v is not None), 0)
        self.matrix = np.stack([v[0] if v is not None else np.zeros(dim, np.float32) for v in found]) \
            if dim else None

    def attribute(self, own: npt.NDArray[np.float32] | None, number: int, fan_in: int) -> dict[int, float]:
        """Shares of one row's vote over the prompts numbered up to ``number`` (the last
        ``MAX_CANDIDATES``); ``fan_in`` 0 means no recorded prompt is trusted over the others (a
        summary). See the module docstring."""
        end = bisect.bisect_right(self.numbers, number)
        start = max(0, end - MAX_CANDIDATES)
        candidates = self.ids[start:end]
        if not candidates:
            return {}
        recorded = self.ids[end - 1] if self.numbers[end - 1] == number else None
        prior = 1.0 / fan_in if fan_in and recorded is not None else 1.0 / len(candidates)
        if recorded is not None and prior >= 1.0:
            return {recorded: 1.0}  # the only row recorded under its prompt: a precise link
        if own is None or self.matrix is None or (recorded is not None and not self.has[end - 1]):
            # No vectors to tell which prompt it talks about: only the recorded link, as far as its
            # fan-in lets it be trusted.
            return {recorded: prior} if recorded is not None else {}
        # Each candidate's cosine with the row's best document (0 for a prompt without a vector).
        logits = np.where(self.has[start:end], (self.matrix[start:end] @ own.T).max(axis=1), 0.0) / TEMPERATURE
        if recorded is not None and len(candidates) > 1:
            priors = np.full(len(candidates), (1.0 - prior) / (len(candidates) - 1))
            priors[-1] = prior  # the recorded prompt is the last candidate
            logits += np.log(priors + 1e-12)
        weights = np.exp(logits - logits.max())
        weights /= weights.sum()
        return {p: w for p, w in zip(candidates, weights.tolist(), strict=True) if w >= MIN_SHARE}


def _vectors(copy: VectorCopy, keys: Sequence[Key], prompts: Sequence[int]) -> dict[Key, npt.NDArray[np.float32]]:
    """Unit vectors (documents × dim) of the rows and prompts, from the vector copy."""
    wanted = list(dict.fromkeys([*keys, *((Kind.PROMPT, p) for p in prompts)]))
    return copy.row_vectors(wanted)
