"""The relevance model: a logistic regression over ``features.FEATURES``, one versioned JSON file per
provider beside ``fit`` (the script that writes it from a feature dump). Its output is a calibrated
confidence: the chance that a candidate is relevant (an evidence turn, or an observation recorded
under one), as measured on the held-out conversations of the dev set."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from memsync.search.relevance.features import FEATURES, Matrix

MODEL_DIR = Path(__file__).resolve().parent
FORMAT = 1
LEXICAL = "lexical"  # the model for a search the vector store could not answer
# Providers with a model of their own; any other (openai, a remote endpoint) is read with the local
# model: its cosines run on another scale, so its confidence is an order, not a calibrated chance.
CALIBRATED = ("local", "local-multilingual")


@dataclass(frozen=True, slots=True)
class Model:
    """One provider's weights: which features, how they are standardised, their weights."""

    name: str
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    intercept: float

    def logits(self, x: Matrix) -> Matrix:
        """The model's log-odds for each row of a full feature matrix (columns ``FEATURES``)."""
        cols = [FEATURES.index(f) for f in self.features]
        z = (x[:, cols] - np.array(self.mean)) / np.array(self.scale)
        return np.asarray(self.intercept + z @ np.array(self.weights), dtype=np.float64)

    def probability(self, x: Matrix) -> Matrix:
        """The confidence of each row: the chance it is relevant."""
        return 1.0 / (1.0 + np.exp(-np.clip(self.logits(x), -40.0, 40.0)))

    def to_json(self) -> dict[str, object]:
        """The versioned file's content (``fit`` adds how it was fitted)."""
        return {"format": FORMAT, "name": self.name, "features": list(self.features), "mean": list(self.mean),
                "scale": list(self.scale), "weights": list(self.weights), "intercept": self.intercept}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Model:
        """A model from its file's content; ValueError for another format or unknown features."""
        if data.get("format") != FORMAT:
            raise ValueError(f"relevance model format {data.get('format')!r}, expected {FORMAT}")
        names = tuple(str(f) for f in data["features"])  # type: ignore[attr-defined]
        unknown = set(names) - set(FEATURES)
        if unknown:
            raise ValueError(f"relevance model names unknown features: {sorted(unknown)}")

        def floats(key: str) -> tuple[float, ...]:
            return tuple(float(v) for v in data[key])  # type: ignore[attr-defined]

        return cls(str(data["name"]), names, floats("mean"), floats("scale"), floats("weights"),
                   float(data["intercept"]))  # type: ignore[arg-type]


def path_for(name: str) -> Path:
    """The file of one model (a provider's, or ``lexical``)."""
    return MODEL_DIR / f"{name}.json"


@cache
def load(name: str) -> Model:
    """The shipped model of a provider (``local`` for one without its own) or ``lexical``."""
    if name != LEXICAL and name not in CALIBRATED:
        name = "local"
    return Model.from_json(json.loads(path_for(name).read_text(encoding="utf-8")))
