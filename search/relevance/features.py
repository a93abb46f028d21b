"""What the relevance model reads of one search's candidates: the ingredients the fusion already has
(each list's rank, the linked shares, the cosine, where the row sits in its session), and the
features computed from them.

Ingredients are one row per candidate, the columns of ``INGREDIENTS`` (a rank is -1 where the list
did not hold the row; a position is -1 where the row has no session or number). Features are
computed per search from its candidates alone, so the same function serves the search, the fitting
and the committed feature dump (which holds ingredients and labels, never text).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from memsync.search.fusion import Weights

Matrix = npt.NDArray[np.float64]

INGREDIENTS = (
    "kind",  # 0 prompt, 1 observation, 2 summary (``KIND_CODE``)
    "lexical_rank", "semantic_rank", "context_rank",
    "linked_semantic_rank", "linked_semantic_share", "linked_lexical_rank", "linked_lexical_share",
    "similarity",  # cosine with the query; the lowest cosine the dense side returned when unknown
    "session", "number",  # sdk_sessions id and prompt number, -1 when the row has none
    "length",  # characters of a prompt's text (0 for the other kinds)
)
COL = {name: i for i, name in enumerate(INGREDIENTS)}
KIND_CODE = {"prompt": 0, "observation": 1, "summary": 2}

FEATURES = (
    "lexical", "semantic", "context", "linked_semantic", "linked_lexical",  # each list's RRF term, 1 at rank 0
    "lexical_log_rank", "semantic_log_rank",  # -log(1 + rank): the tail of a list still tells something
    "similarity", "similarity_gap",  # the cosine, and its distance below the best candidate's
    "both_sides",  # found by a lexical and a dense list
    "fused", "fused_gap",  # the weighted RRF sum, and its distance below the best candidate's
    "near_2", "near_3",  # the best fused sum among candidates within 2 (3) prompts in the same session
    "near_2_x_similarity", "near_2_x_fused",  # a neighbour's support counts more for a row near the query
    "prompt_length",  # log(1 + characters) of a prompt: one-word turns rarely hold what was asked
    "session_support",  # the fused sums of the other candidates of its session: evidence spread over a session
    "fused_squared", "similarity_squared", "near_2_squared",  # returns that grow or shrink with the value
    "observation", "summary",  # the kind (prompts are the base)
)
MISSING_LOG_RANK = -float(np.log(101.0))  # a row absent from a list: as if at rank 100 (the candidate depth)


def _term(rank: Matrix, k: int) -> Matrix:
    """The list's RRF term scaled so rank 0 gives 1; 0 where absent."""
    return np.where(rank < 0, 0.0, (k + 1) / (k + 1 + np.maximum(rank, 0)))


def _log_rank(rank: Matrix) -> Matrix:
    return np.where(rank < 0, MISSING_LOG_RANK, -np.log1p(np.maximum(rank, 0)))


def _near(fused: Matrix, session: Matrix, number: Matrix, reach: int) -> Matrix:
    """For each candidate, the largest ``fused`` among the other candidates of its session whose
    prompt number is 1..``reach`` away (0 when none, or when the row has no position)."""
    placed = (session >= 0) & (number >= 0)
    same = (session[:, None] == session[None, :]) & placed[:, None] & placed[None, :]
    gap = np.abs(number[:, None] - number[None, :])
    near = same & (gap >= 1) & (gap <= reach)
    return np.asarray(np.where(near, fused[None, :], 0.0).max(axis=1, initial=0.0), dtype=np.float64)


def _session_support(fused: Matrix, session: Matrix) -> Matrix:
    """For each candidate, the sum of ``fused`` over the other candidates of its session."""
    same = (session[:, None] == session[None, :]) & (session >= 0)[:, None]
    own = np.where(session >= 0, fused, 0.0)
    return np.asarray(np.where(same, fused[None, :], 0.0).sum(axis=1) - own, dtype=np.float64)


def matrix(ing: Matrix, weights: Weights | None = None) -> Matrix:
    """The feature matrix (candidates × ``FEATURES``) of one search's ingredient matrix."""
    w = weights or Weights()
    if ing.shape[0] == 0:
        return np.zeros((0, len(FEATURES)))
    c = {name: ing[:, i] for name, i in COL.items()}
    lex, sem, ctx = (_term(c[f"{n}_rank"], w.k) for n in ("lexical", "semantic", "context"))
    lsem = c["linked_semantic_share"] * _term(c["linked_semantic_rank"], w.k)
    llex = c["linked_lexical_share"] * _term(c["linked_lexical_rank"], w.k)
    fused = (w.lexical * lex + w.semantic * sem + w.context * ctx + w.linked_semantic * lsem
             + w.linked_lexical * llex)
    sim = c["similarity"]
    near2 = _near(fused, c["session"], c["number"], 2)
    near3 = _near(fused, c["session"], c["number"], 3)
    cols = {
        "lexical": lex, "semantic": sem, "context": ctx, "linked_semantic": lsem, "linked_lexical": llex,
        "lexical_log_rank": _log_rank(c["lexical_rank"]), "semantic_log_rank": _log_rank(c["semantic_rank"]),
        "similarity": sim, "similarity_gap": sim - sim.max(),
        "both_sides": ((lex + llex > 0) & (sem + ctx + lsem > 0)).astype(np.float64),
        "fused": fused, "fused_gap": fused - fused.max(),
        "near_2": near2, "near_3": near3, "near_2_x_similarity": near2 * sim, "near_2_x_fused": near2 * fused,
        "session_support": _session_support(fused, c["session"]),
        "fused_squared": fused ** 2, "similarity_squared": sim ** 2, "near_2_squared": near2 ** 2,
        "prompt_length": np.log1p(np.maximum(c["length"], 0)),
        "observation": (c["kind"] == 1).astype(np.float64), "summary": (c["kind"] == 2).astype(np.float64),
    }
    return np.column_stack([cols[name] for name in FEATURES])
