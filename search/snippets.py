"""Snippets: a short piece of a record's text with the query's words marked, for a result list.

Pure functions, no I/O: a record's fields and the query in, a :class:`Snippet` out (plain text plus
highlight ranges; the caller escapes or, as the page does, builds text nodes). Words match as the
lexical side matches them (``search.fts``): the word itself or a word starting with its stem
(``upload`` marks ``uploads``), a CJK bigram anywhere, so what is marked is what a full-text
search would have found. One function serves both indexes (the text index and FTS5 fallback
alike), which tantivy's SnippetGenerator, bound to its own index, would not.

Which text: the field holding most of the query's words (ties: the field that matched best by
meaning, then record order), cut to ``SNIPPET_CHARS`` around its densest run of matches. A result
found by meaning only, or a field with no match, shows the head of the field that matched best by
meaning (``Result.field``), or of the first non-empty field.

Offsets count Unicode code points (Python's ``str`` indices), not UTF-16 units: a browser slices
with ``Array.from(text)``.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memsync.config.claude_mem.schema import SUMMARY_FIELDS, Kind
from memsync.config.docids import FACT_PREFIX
from memsync.search import fts
from memsync.search.models import Result, Signal

SNIPPET_CHARS = 200  # a snippet's most characters, ellipses included
LEAD_CHARS = 40  # context kept before the first match of the window
ELLIPSIS = "…"

# The text fields of each kind, the body first: a snippet says more than the title shown above it
# (``facts`` is a list: fact_I).
TEXT_FIELDS: dict[Kind, tuple[str, ...]] = {
    Kind.OBSERVATION: ("narrative", "text", "subtitle", "title", "facts"),
    Kind.SUMMARY: SUMMARY_FIELDS,
    Kind.PROMPT: ("prompt_text",),
}
_WORD = re.compile(r"\w+", re.UNICODE)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Snippet:
    """Text to show and the ``[start, end)`` code-point ranges in it to mark, sorted, disjoint.
    ``field``: the record field it comes from (``fact_I`` for the I-th fact)."""

    text: str
    highlights: tuple[tuple[int, int], ...] = ()
    field: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"text", "highlights": [[start, end], ...], "field"}``."""
        return {"text": self.text, "highlights": [list(h) for h in self.highlights], "field": self.field}


def clean_text(text: str) -> str:
    """One line of visible text: control and format characters (NUL, bidi overrides, zero-width
    marks) dropped or made spaces, whitespace runs one space, ends stripped."""
    spaced = _SPACE.sub(" ", text)
    if spaced.isprintable():  # the usual text: nothing else to drop (a character at a time is slow)
        return spaced.strip()
    kept = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in spaced
                   if unicodedata.category(ch) not in ("Cf", "Cs", "Co"))
    return _SPACE.sub(" ", kept).strip()


def matches(text: str, terms: Sequence[str]) -> list[tuple[int, int]]:
    """Where ``terms`` (query tokens of :func:`search.fts.tokens`) occur in ``text``: whole words equal
    to a term or starting with its stem (ASCII), any occurrence of a CJK bigram or other non-ASCII
    term; merged, sorted ``[start, end)`` ranges."""
    return merge(_hits(text, terms)[0])


def _hits(text: str, terms: Sequence[str]) -> tuple[list[tuple[int, int]], set[str]]:
    """The ranges of :func:`matches`, unmerged, and which terms were found: one pass over the words
    (a record's field may be thousands of words, a query 32 terms)."""
    found: list[tuple[int, int]] = []
    seen: set[str] = set()
    lowered = text.lower()
    if len(lowered) != len(text):  # a letter whose lower case is longer ("İ"): keep it, so offsets agree
        lowered = "".join(low if len(low := ch.lower()) == 1 else ch for ch in text)
    plain = {t for t in terms if t.isascii()}
    prefixes: dict[str, list[tuple[str, str]]] = {}  # first MIN_STEM letters -> (stem, term)
    for t in plain:
        if stem := fts.prefix_stem(t):
            prefixes.setdefault(stem[:fts.MIN_STEM], []).append((stem, t))
    if plain:
        for m in _WORD.finditer(lowered.replace("_", " ")):
            word = m.group()
            hit = {word} & plain | {t for stem, t in prefixes.get(word[:fts.MIN_STEM], ()) if word.startswith(stem)}
            if hit:
                seen |= hit
                found.append((m.start(), m.end()))
    for term in (t for t in terms if not t.isascii()):
        start = lowered.find(term)
        if start >= 0:
            seen.add(term)
        while start >= 0:
            found.append((start, start + len(term)))
            start = lowered.find(term, start + 1)
    return found, seen


def merge(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ranges with overlapping or touching ones joined (CJK bigrams overlap: 退款 and 款金)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def cut(text: str, hits: Sequence[tuple[int, int]], width: int = SNIPPET_CHARS) -> Snippet:
    """``text`` (already :func:`clean_text`) cut to at most ``width`` characters around the window
    holding most of ``hits``, with an ellipsis where text was left out, the hits inside it marked
    (a hit the cut crosses is marked up to the cut)."""
    if len(text) <= width:
        return Snippet(text, tuple(hits))
    best_start, best_count = 0, -1
    room = width - 2  # both ellipses
    starts, ends = [s for s, _ in hits], [e for _, e in hits]  # both sorted: the hits are disjoint
    for first in starts:
        start = max(0, first - LEAD_CHARS)
        count = bisect_right(ends, start + room) - bisect_left(starts, start)
        if count > best_count:
            best_start, best_count = start, count
    start = best_start
    if start > 0:  # begin at a word: back up to the previous space within the lead
        space = text.rfind(" ", max(0, start - 15), start + 1)
        start = space + 1 if space >= 0 else start
    head = ELLIPSIS if start > 0 else ""
    end = min(len(text), start + width - len(head))
    if end < len(text):
        end -= 1  # room for the trailing ellipsis
        space = text.rfind(" ", end - 20, end)
        end = space if space > start else end
    body = text[start:end].rstrip()
    tail = ELLIPSIS if start + len(body) < len(text) else ""
    shift = len(head) - start
    marks = tuple((max(s, start) + shift, min(e, start + len(body)) + shift) for s, e in hits
                  if e > start and s < start + len(body))
    return Snippet(head + body + tail, marks)


def field_texts(kind: Kind, record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, cleaned text)`` of each non-empty text field of a full record, in reading order
    (facts as ``fact_0``, ``fact_1``, ...)."""
    out: list[tuple[str, str]] = []
    for name in TEXT_FIELDS[kind]:
        value = record.get(name)
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            text = clean_text(str(item)) if item is not None else ""
            if text:
                out.append((name if index is None else f"{FACT_PREFIX}{index}", text))
    return out


def snippet(kind: Kind, record: Mapping[str, Any], query: str, field: str | None = None,
            by_meaning_only: bool = False) -> Snippet | None:
    """The snippet of one result: ``record`` its full row (``search.hydrate.records``), ``query``
    the search's text, ``field`` the field document that matched best by meaning (``Result.field``;
    ``prompt`` or None for prompts), ``by_meaning_only`` when the lexical side did not find it.
    None when the record has no text at all."""
    texts = field_texts(kind, record)
    if not texts:
        return None
    meant = _meaning_field(kind, field)
    order = sorted(range(len(texts)), key=lambda i: (texts[i][0] != meant, i))  # the meaning field first
    terms = fts.tokens(query) if query.strip() else []
    if terms and not by_meaning_only:
        found = {i: _hits(texts[i][1], terms) for i in order}
        words, _, best = max((len(found[i][1]), -rank, i) for rank, i in enumerate(order))
        if words:
            name, text = texts[best]
            return _named(cut(text, merge(found[best][0])), name)
    name, text = texts[order[0]]
    head = cut(text, [])
    hits = matches(head.text, terms) if terms else []
    return _named(Snippet(head.text, tuple(hits)), name)


def of_result(result: Result, query: str) -> Snippet | None:
    """The snippet of a search result hydrated with its full record (``Format.FULL``); None
    without a record or without text."""
    if result.record is None:
        return None
    return snippet(result.kind, result.record, query, result.field,
                   by_meaning_only=result.signals is Signal.SEMANTIC)


def _named(snip: Snippet, name: str) -> Snippet:
    return Snippet(snip.text, snip.highlights, name)


def _meaning_field(kind: Kind, field: str | None) -> str | None:
    """The record field behind a field document's name (prompts have one)."""
    if kind is Kind.PROMPT:
        return "prompt_text"
    return field
