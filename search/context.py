"""Prompts read in the context of their neighbours: a second dense ranking of the user prompts.

A user prompt is often terse ("yes, do that", "now the tests") or answers the turn before it, so
its own vector says little about what it is about. Each prompt found by the dense side is also
scored by the mean of its vector and those of the prompts just before and after it in its session
(vectors memsync already has, from the worker's copy: nothing is embedded twice), and the prompts
ranked that way are a list of their own in the fusion. Measured on the LoCoMo dev set with no
observations (``scripts/bench_quality.py``): recall@10 0.639 → 0.678; a separate vector of each
prompt's text joined with its neighbours' (embedded at sync) measured 0.687, at the price of two more
embeddings per prompt and documents that change when a neighbour arrives.

The ranking covers the dense side's top prompts and their neighbours (the rows a context can lift),
within the search's filters and window; without the vector copy there is no such list.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memsync.config.claude_mem.schema import Kind
from memsync.search.models import Scope
from memsync.search.sql import SourceRows
from memsync.search.vectorcopy import VectorCopy


def ranking(rows: SourceRows, copy: VectorCopy, query: npt.NDArray[np.float32], prompts: Sequence[int],
            scope: Scope) -> list[int]:
    """``prompts`` (the dense side's, best first) and their neighbours within the scope,
    ranked by the query's cosine with each one's mean vector with its neighbours."""
    if not prompts:
        return []
    neighbours = rows.neighbour_prompts(prompts)
    extra = {n for p in prompts for n in neighbours.get(p, [])} - set(prompts)
    candidates = [*prompts, *sorted(rows.passing(Kind.PROMPT, sorted(extra), scope.filters, scope.window))]
    wanted = set(candidates) | extra | {n for p in candidates for n in neighbours.get(p, [])}
    vectors = copy.row_vectors([(Kind.PROMPT, p) for p in wanted])
    if len(candidates) > len(prompts):
        # Neighbours added as candidates need their own neighbours too.
        neighbours.update(rows.neighbour_prompts(candidates[len(prompts):]))
        missing = {n for p in candidates for n in neighbours.get(p, [])} - wanted
        vectors.update(copy.row_vectors([(Kind.PROMPT, p) for p in missing]))
    scored: list[tuple[float, int]] = []
    for rank, p in enumerate(candidates):
        own = vectors.get((Kind.PROMPT, p))
        if own is None:
            continue
        total = own[0].copy()
        for n in neighbours.get(p, []):
            v = vectors.get((Kind.PROMPT, n))
            if v is not None:
                total += v[0]
        norm = float(np.linalg.norm(total))
        scored.append((-(float(total @ query) / norm if norm else 0.0), rank))
    scored.sort()
    return [candidates[rank] for _, rank in scored]
