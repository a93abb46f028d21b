"""Vector documents' names: the one owner of the upstream claude-mem id scheme and ``doc_type``.

- observation N: ``obs_N_narrative``, ``obs_N_text``, ``obs_N_title``, ``obs_N_fact_I``
- summary N: ``summary_N_<field>`` for request, investigated, learned, completed, next_steps, notes
- prompt N: ``prompt_N``

Every id carries its kind, so ids of the three tables never collide (upstream mixes them up). Each
document's ``doc_type`` metadata names its kind as upstream does (``DOC_TYPES``); the worker
writes it and the search library filters on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memsync.config.claude_mem.schema import SUMMARY_FIELDS, Kind
from memsync.config.errors import BadData
from memsync.config.kinds import KIND_NAMES

# claude-mem's doc_type of each kind, from the one table of kind names.
DOC_TYPES: dict[Kind, str] = {kind: name.doc_type for kind, name in KIND_NAMES.items()}

OBSERVATION_FIELDS: tuple[str, ...] = ("narrative", "text", "title")
FACT_PREFIX = "fact_"

_OBS = re.compile(r"obs_([0-9]+)_(narrative|text|title|fact_([0-9]+))")
_SUMMARY = re.compile(r"summary_([0-9]+)_(" + "|".join(SUMMARY_FIELDS) + ")")
_PROMPT = re.compile(r"prompt_([0-9]+)")


@dataclass(frozen=True, slots=True, order=True)
class DocId:
    """A parsed document id. ``field`` is None for prompts; ``fact_I`` for observation facts."""

    kind: Kind
    sqlite_id: int
    field: str | None = None

    def __str__(self) -> str:
        return format_doc_id(self.kind, self.sqlite_id, self.field)

    @property
    def fact_index(self) -> int | None:
        """The fact's position for ``obs_N_fact_I`` ids, else None."""
        if self.field is not None and self.field.startswith(FACT_PREFIX):
            return int(self.field[len(FACT_PREFIX):])
        return None


class DocIdError(BadData):
    """A string is not a memsync/claude-mem document id, or a (kind, id, field) is not valid."""


def format_doc_id(kind: Kind, sqlite_id: int, field: str | None = None) -> str:
    """The document id for a row field; validates the field for the kind."""
    if sqlite_id < 0:
        raise DocIdError(f"negative id {sqlite_id}")
    if kind is Kind.PROMPT:
        if field is not None:
            raise DocIdError("prompts have a single document and no field")
        return f"prompt_{sqlite_id}"
    if field is None:
        raise DocIdError(f"{kind.value} documents need a field")
    if kind is Kind.OBSERVATION:
        if field not in OBSERVATION_FIELDS and not re.fullmatch(r"fact_[0-9]+", field):
            raise DocIdError(f"unknown observation field {field!r}")
        return f"obs_{sqlite_id}_{field}"
    if field not in SUMMARY_FIELDS:
        raise DocIdError(f"unknown summary field {field!r}")
    return f"summary_{sqlite_id}_{field}"


def fact_field(index: int) -> str:
    """The field name of the ``index``-th fact (0-based)."""
    return f"{FACT_PREFIX}{index}"


def parse_doc_id(doc_id: str) -> DocId:
    """Parse a document id; raises DocIdError for anything that is not exactly one of the forms."""
    if m := _OBS.fullmatch(doc_id):
        return DocId(Kind.OBSERVATION, int(m.group(1)), m.group(2))
    if m := _SUMMARY.fullmatch(doc_id):
        return DocId(Kind.SUMMARY, int(m.group(1)), m.group(2))
    if m := _PROMPT.fullmatch(doc_id):
        return DocId(Kind.PROMPT, int(m.group(1)))
    raise DocIdError(f"not a document id: {doc_id!r}")


def possible_doc_ids(kind: Kind, sqlite_id: int, n_facts: int = 0) -> list[str]:
    """Every id a row of ``kind`` may have in the store (a superset: empty fields have none), for
    queries restricted to given rows. ``n_facts`` is the length of an observation's facts list."""
    if kind is Kind.PROMPT:
        return [format_doc_id(kind, sqlite_id)]
    if kind is Kind.SUMMARY:
        return [format_doc_id(kind, sqlite_id, f) for f in SUMMARY_FIELDS]
    fields = [*OBSERVATION_FIELDS, *(fact_field(i) for i in range(n_facts))]
    return [format_doc_id(kind, sqlite_id, f) for f in fields]
