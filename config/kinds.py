"""Kind names: the one table of what each kind of memory row is called (the same words everywhere).

Every front end (the CLI, the HTTP API, the MCP tools, the page) and every message reads its
words from :data:`KIND_NAMES`, so a summary is a "summary" (plural "summaries") everywhere:

- the JSON value is ``Kind.value`` (``observation``, ``summary``, ``prompt``), unchanged;
- the plural names the kind in choices (``--kind``, ``kind=``), counts and status keys;
- the reference letter prints ``#S12`` and ``#P5`` (:mod:`memsync.config.records` parses them);
- aliases are other names accepted as input, among them the renamed ``sessions`` that ``--kind``,
  ``kind=`` and the page's URL offered before the kinds got one set of names;
- ``doc_type`` is claude-mem's word for the kind in Chroma metadata, kept as upstream writes it.

Not here: claude-mem's table names (:mod:`memsync.config.claude_mem.schema`) and the on-disk kind
codes of memsync's own formats (``KIND_TERM``, ``KIND_BYTE``), which files already written fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator

from memsync.config.claude_mem.schema import Kind


@dataclass(frozen=True, slots=True)
class KindName:
    """What one kind is called: its plural, reference letter, accepted aliases and claude-mem's word."""

    plural: str
    ref_letter: str  # "" for observations: "#123"
    aliases: tuple[str, ...]
    doc_type: str  # claude-mem's doc_type in Chroma metadata; never change (upstream reads it)


KIND_NAMES: dict[Kind, KindName] = {
    Kind.OBSERVATION: KindName(plural="observations", ref_letter="", aliases=("obs",), doc_type="observation"),
    Kind.SUMMARY: KindName(plural="summaries", ref_letter="S", aliases=("session", "sessions"),
                           doc_type="session_summary"),
    Kind.PROMPT: KindName(plural="prompts", ref_letter="P", aliases=("user_prompts",),
                          doc_type="user_prompt"),
}

ALL_KINDS = "all"
# The choices a front end offers for a kind filter, in this order (the CLI, HTTP and MCP schemas):
# "all", then each kind's plural (tests/config/test_kinds.py keeps the two in step).
KindChoice = Literal["all", "observations", "summaries", "prompts"]
KIND_CHOICES: tuple[str, ...] = get_args(KindChoice)

# Every name a user may type for a kind, lower case: its value, plural and aliases.
KIND_BY_NAME: dict[str, Kind] = {name: kind for kind, n in KIND_NAMES.items()
                                 for name in (kind.value, n.plural, *n.aliases)}


def plural(kind: Kind) -> str:
    """The kind's plural: ``observations``, ``summaries``, ``prompts``."""
    return KIND_NAMES[kind].plural


def choice_for(name: object) -> object:
    """The offered choice a typed kind name stands for (``sessions`` -> ``summaries``); anything
    else unchanged, so the caller's own check refuses it listing the choices."""
    if not isinstance(name, str):
        return name
    kind = KIND_BY_NAME.get(name.strip().lower())
    return plural(kind) if kind is not None else name


# A kind filter in a pydantic or FastAPI signature: the schema offers the choices, and every alias
# is accepted and arrives as the choice it stands for.
KindFilter = Annotated[KindChoice, BeforeValidator(choice_for)]
