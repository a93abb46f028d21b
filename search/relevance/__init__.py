"""Relevance: the fused candidates re-ranked by a small learned model, each with a calibrated confidence.

The fusion (``search.fusion``) gives each candidate a weighted RRF score from the lists that found
it. The best ``DEPTH`` of them are then read by a logistic model (``model``) over signals the search
already has (``features``): each list's rank, the cosine, whether both sides found it, the linked
evidence, and where the row sits in its session, so that a turn whose neighbours the query also
found (the other half of an answer often sits a prompt or two away) moves up. The model's output is
the candidate's confidence, the chance it is relevant; the page is ordered by it, the rest follow in
fused order. The weights are fitted on a committed feature dump of the LoCoMo dev set
(``fit``); docs/benchmarks.md has the ablation and the reliability table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from memsync.search.hydrate import PageEntry
from memsync.search.models import Key
from memsync.search.relevance.features import COL, INGREDIENTS, KIND_CODE, Matrix, matrix
from memsync.search.relevance.model import CALIBRATED, LEXICAL, Model, load

DEPTH = 50  # fused candidates the model re-ranks (where it was measured; the rest keep the fused order)

__all__ = ["CALIBRATED", "DEPTH", "LEXICAL", "Matrix", "Model", "explain", "ingredients", "load", "rank"]


def ingredients(keys: Sequence[Key], lists: Mapping[str, Mapping[Key, int]],
                shares: Mapping[str, Mapping[Key, float]], similarity: Mapping[Key, float], floor: float,
                positions: Mapping[Key, tuple[int, int, int]]) -> Matrix:
    """The ingredient matrix (``features.INGREDIENTS``) of the candidates ``keys``: ``lists`` maps a
    list's name (lexical, semantic, context, linked_semantic, linked_lexical) to each key's rank in
    it, ``shares`` the linked lists' shares, ``similarity`` the known cosines (``floor`` for the
    others), ``positions`` each row's (session, prompt number, length)."""
    out = np.full((len(keys), len(INGREDIENTS)), -1.0)
    for n, key in enumerate(keys):
        row = out[n]
        row[COL["kind"]] = KIND_CODE.get(key[0].value, 0)
        for name, ranks in lists.items():
            if key in ranks:
                row[COL[f"{name}_rank"]] = ranks[key]
        for name in ("linked_semantic", "linked_lexical"):
            row[COL[f"{name}_share"]] = shares.get(name, {}).get(key, 0.0)
        row[COL["similarity"]] = similarity.get(key, floor)
        session, number, length = positions.get(key, (-1, -1, 0))
        row[COL["session"]], row[COL["number"]], row[COL["length"]] = session, number, length
    return out


def explain(row: Matrix) -> dict[str, float]:
    """A candidate's raw signals as a person reads them: each list's rank (1-based) where the list
    held it, the linked evidence's shares, and the cosine the model read."""
    out: dict[str, float] = {}
    for name in ("lexical", "semantic", "context", "linked_semantic", "linked_lexical"):
        if row[COL[f"{name}_rank"]] >= 0:
            out[f"{name}_rank"] = int(row[COL[f"{name}_rank"]]) + 1
    for name in ("linked_semantic_share", "linked_lexical_share"):
        if row[COL[name]] > 0:
            out[name] = float(row[COL[name]])
    out["cosine"] = float(row[COL["similarity"]])
    return out


def rank(entries: Sequence[PageEntry], ing: Matrix, model: Model, reorder: bool = True) -> list[PageEntry]:
    """The first ``len(ing)`` entries ordered by the model's confidence (ties keep the fused order),
    each carrying it and its raw signals (``explain``), its own fused score kept; the rest after
    them, unchanged. ``reorder`` False: the fused order kept, confidences added."""
    head = list(entries[:len(ing)])
    if not head:
        return list(entries)
    conf = model.probability(matrix(ing))
    order = sorted(range(len(head)), key=lambda i: (-conf[i], i)) if reorder else list(range(len(head)))
    ranked = [head[j]._replace(confidence=float(conf[j]), explain=explain(ing[j])) for j in order]
    return ranked + list(entries[len(head):])

