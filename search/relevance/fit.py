"""Fit the relevance model from a feature dump and write its versioned file.

    python -m memsync.search.relevance.fit DUMP [--name local] [--out FILE] [--check]

A dump (``scripts/fusion_lab.py dump`` writes one from the dev set's synced stores; one is committed
as ``tests/data/relevance/*.npz``) holds, for every candidate of every search, its ingredient row
(``features.INGREDIENTS``), its label (1 relevant, 0 not) and its search's id: no text. The fit is
an L2-regularised logistic regression over the standardised features (Newton's method, deterministic
to the printed precision); the ``lexical`` model is fitted on the same searches with the dense side's
ingredients taken away, as a search sees them when the vector store is down. ``--check`` compares a
fresh fit with the shipped file instead of writing it (exit 1 when they differ).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from memsync.search.relevance.features import COL, FEATURES, Matrix, matrix
from memsync.search.relevance.model import LEXICAL, Model, path_for

L2 = 10.0  # the penalty on standardised weights: what the nested leave-one-conversation-out chose (docs/benchmarks.md)
DIGITS = 6
# What a search without the dense side does not have.
DENSE_ONLY = ("semantic_rank", "context_rank", "linked_semantic_rank")
LEXICAL_FEATURES = tuple(f for f in FEATURES if f not in (
    "semantic", "context", "linked_semantic", "semantic_log_rank", "similarity", "similarity_gap", "both_sides",
    "near_2_x_similarity", "similarity_squared"))


def without_dense(ing: Matrix) -> Matrix:
    """The ingredients as a lexical-only search has them: no dense ranks, no cosine."""
    out = ing.copy()
    for name in DENSE_ONLY:
        out[:, COL[name]] = -1
    out[:, COL["linked_semantic_share"]] = 0.0
    out[:, COL["similarity"]] = 0.0
    return out


def feature_matrix(ing: Matrix, search: np.ndarray) -> Matrix:
    """Each search's features from its own candidates, in the dump's row order."""
    out = np.zeros((ing.shape[0], len(FEATURES)))
    for s in np.unique(search):
        rows = np.flatnonzero(search == s)
        out[rows] = matrix(ing[rows])
    return out


def logistic(x: Matrix, y: Matrix, l2: float = L2, iterations: int = 50) -> tuple[Matrix, float]:
    """Weights and intercept of an L2-penalised logistic regression (intercept unpenalised)."""
    n, p = x.shape
    a = np.column_stack([np.ones(n), x])
    w = np.zeros(p + 1)
    penalty = np.diag(np.r_[0.0, np.full(p, l2)])
    for _ in range(iterations):
        prob = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -40, 40)))
        grad = a.T @ (prob - y) + penalty @ w
        hess = (a * (prob * (1 - prob))[:, None]).T @ a + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return w[1:], float(w[0])


def fit(x: Matrix, y: Matrix, name: str, names: tuple[str, ...] = FEATURES, l2: float = L2) -> Model:
    """The model of the given features fitted on a feature matrix (columns ``FEATURES``)."""
    cols = x[:, [FEATURES.index(f) for f in names]]
    mean = cols.mean(axis=0)
    scale = cols.std(axis=0)
    scale[scale == 0] = 1.0
    w, b = logistic((cols - mean) / scale, y, l2)
    def r(values: Matrix) -> tuple[float, ...]:
        return tuple(round(float(v), DIGITS) for v in values)

    return Model(name, names, r(mean), r(scale), r(w), round(b, DIGITS))


def fit_dump(dump: Path, name: str) -> Model:
    """The named model (a provider's, or ``lexical``) fitted on a dump."""
    data = np.load(dump)
    ing, y, search = data["ingredients"], data["label"].astype(np.float64), data["search"]
    if name == LEXICAL:
        ing = without_dense(ing)
        keep = (ing[:, COL["lexical_rank"]] >= 0) | (ing[:, COL["linked_lexical_rank"]] >= 0)
        ing, y, search = ing[keep], y[keep], search[keep]
        return fit(feature_matrix(ing, search), y, name, LEXICAL_FEATURES)
    return fit(feature_matrix(ing, search), y, name)


def main(argv: list[str] | None = None) -> int:
    """Fit (or check) one model file."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dump", type=Path, help="a feature dump (.npz: ingredients, label, search)")
    p.add_argument("--name", default="local", help="the model: a provider's name, or lexical (default local)")
    p.add_argument("--out", type=Path, help="where to write it (default: the shipped file of that name)")
    p.add_argument("--check", action="store_true", help="compare with the shipped file; write nothing")
    args = p.parse_args(argv)
    model = fit_dump(args.dump, args.name)
    target = args.out or path_for(args.name)
    if args.check:
        shipped = Model.from_json(json.loads(target.read_text(encoding="utf-8")))
        same = shipped.features == model.features and all(
            np.allclose(getattr(shipped, f), getattr(model, f), atol=1e-4)
            for f in ("mean", "scale", "weights", "intercept"))
        print(f"{target}: {'matches' if same else 'differs from'} a fit of {args.dump}")
        return 0 if same else 1
    target.write_text(json.dumps(model.to_json(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
