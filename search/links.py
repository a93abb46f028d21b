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

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import SESSIONS_TABLE, Kind
from memsync.search.models import Filters, Key, Window
from memsync.search.sql import ALIAS, SourceRows, chunks
from memsync.search.vectorcopy import VectorCopy

TEMPERATURE = 0.05  # cosine differences of ~0.1 between prompts decide the attribution (e^2)
MAX_CANDIDATES = 64  # prompts of the session an observation can be attributed to (the latest ones)


@dataclass(frozen=True, slots=True)
class Vote:
    """One prompt vouched for: the rank of the evidence in its list and the share of its vote."""

    prompt: int
    rank: int
    share: float


@dataclass(frozen=True, slots=True)
class _Source:
    """Where a found row was recorded: its session (sdk_sessions.id) and prompt number."""

    session: int
    number: int


def votes(rows: SourceRows, copy: VectorCopy | None, lists: Sequence[Sequence[Key]], filters: Filters,
          window: Window, k: int) -> list[Vote]:
    """The prompts vouched for by the evidence ``lists`` (one ranking per kind of observations or
    summaries, best first), each with the best (rank, share) any evidence row gives it, judged as
    fusion will count it (``share / (k + rank + 1)``), within filters/window; strongest first."""
    ranked = [(key, rank) for keys in lists for rank, key in enumerate(keys)]
    if not ranked:
        return []
    sources = _sources(rows, [key for key, _ in ranked])
    if not sources:
        return []
    prompts = _session_prompts(rows, {s.session for s in sources.values()})
    fan_in = _fan_in(rows, {s.session for k, s in sources.items() if k[0] is Kind.OBSERVATION})
    vectors = _vectors(copy, [key for key, _ in ranked if key in sources],
                       [p for plist in prompts.values() for _, p in plist]) if copy is not None else {}
    best: dict[int, tuple[float, int, float]] = {}  # prompt -> (strength, rank, share)
    for key, rank in ranked:
        src = sources.get(key)
        if src is None:
            continue
        candidates = [p for num, p in prompts.get(src.session, []) if num <= src.number][-MAX_CANDIDATES:]
        if not candidates:
            continue
        recorded = next((p for num, p in prompts[src.session] if num == src.number), None)
        prior = 1.0 / max(1, fan_in.get((src.session, src.number), 1)) if key[0] is Kind.OBSERVATION \
            else 1.0 / len(candidates)
        for prompt, share in _attribute(key, candidates, recorded, prior, vectors).items():
            strength = share / (k + rank + 1)
            if prompt not in best or strength > best[prompt][0]:
                best[prompt] = (strength, rank, share)
    ok = rows.passing(Kind.PROMPT, list(best), filters, window)
    order = sorted((p for p in best if p in ok), key=lambda p: -best[p][0])
    return [Vote(p, best[p][1], best[p][2]) for p in order]


def _attribute(key: Key, candidates: list[int], recorded: int | None, prior: float,
               vectors: dict[Key, npt.NDArray[np.float32]]) -> dict[int, float]:
    """Shares of one row's vote over its candidate prompts (see the module docstring)."""
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


def _sources(rows: SourceRows, keys: Sequence[Key]) -> dict[Key, _Source]:
    """Session and prompt number of each observation/summary key that has both."""
    out: dict[Key, _Source] = {}
    for kind in (Kind.OBSERVATION, Kind.SUMMARY):
        ids = [i for k, i in keys if k is kind]
        pnum = rows.col(kind, "prompt_number")
        match = rows.schema.session_match(kind, ALIAS, "s")
        if not ids or not pnum or match == "0":
            continue
        table = "observations" if kind is Kind.OBSERVATION else "session_summaries"
        for chunk in chunks(ids):
            sql = (f"SELECT {ALIAS}.id AS id, s.id AS session, {pnum} AS num FROM {table} {ALIAS} "
                   f"JOIN {SESSIONS_TABLE} s ON {match} "
                   f"WHERE {ALIAS}.id IN ({','.join('?' * len(chunk))}) AND {pnum} IS NOT NULL")
            for r in rows.query(sql, chunk):
                out.setdefault((kind, int(r["id"])), _Source(int(r["session"]), int(r["num"])))
    return out


def _session_prompts(rows: SourceRows, sessions: set[int]) -> dict[int, list[tuple[int, int]]]:
    """session -> [(prompt_number, prompt id)] in number order."""
    match = rows.schema.session_match(Kind.PROMPT, ALIAS, "s")
    pnum = rows.col(Kind.PROMPT, "prompt_number")
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    if match == "0" or not pnum:
        return out
    for chunk in chunks(sorted(sessions)):
        sql = (f"SELECT s.id AS session, {pnum} AS num, {ALIAS}.id AS id FROM {SESSIONS_TABLE} s "
               f"JOIN user_prompts {ALIAS} ON {match} WHERE s.id IN ({','.join('?' * len(chunk))})")
        for r in rows.query(sql, chunk):
            out[int(r["session"])].append((int(r["num"]), int(r["id"])))
    for plist in out.values():
        plist.sort()
    return out


def _fan_in(rows: SourceRows, sessions: set[int]) -> dict[tuple[int, int], int]:
    """(session, prompt_number) -> how many observations were recorded under that prompt."""
    match = rows.schema.session_match(Kind.OBSERVATION, ALIAS, "s")
    pnum = rows.col(Kind.OBSERVATION, "prompt_number")
    out: dict[tuple[int, int], int] = {}
    if match == "0" or not pnum or not sessions:
        return out
    for chunk in chunks(sorted(sessions)):
        sql = (f"SELECT s.id AS session, {pnum} AS num, COUNT(*) AS n FROM {SESSIONS_TABLE} s "
               f"JOIN observations {ALIAS} ON {match} WHERE s.id IN ({','.join('?' * len(chunk))}) "
               f"AND {pnum} IS NOT NULL GROUP BY s.id, {pnum}")
        for r in rows.query(sql, chunk):
            out[(int(r["session"]), int(r["num"]))] = int(r["n"])
    return out


def _vectors(copy: VectorCopy, keys: Sequence[Key], prompts: Sequence[int]) -> dict[Key, npt.NDArray[np.float32]]:
    """Unit vectors (documents × dim) of the rows and prompts, from the vector copy."""
    wanted = list(dict.fromkeys([*keys, *((Kind.PROMPT, p) for p in prompts)]))
    return copy.row_vectors(wanted)
