"""FTS5 query building: user text → content words → an FTS5 MATCH expression.

Which forms of a word to match depend on the index (``search.app_fts`` reads the app's word list;
``search.lexical_index`` stems by itself); the expression is always built here. Any input is safe:
the text is cut into word tokens (letters and digits of any script), stopwords are dropped, and
every token is quoted, so FTS5 operators (``AND OR NOT NEAR``, ``*``, ``^``, ``:`` column filters,
parentheses, quotes) are only ever words. Tokens are OR-ed: a natural-language question matches
rows that hold any of its content words and BM25 ranks rows holding more (and rarer) of them first;
the whole query as one phrase (as upstream searches) almost never matches.

Stemming: the app's tables use the default ``unicode61`` tokenizer, which does not stem. A token
whose Porter stem differs is also matched by prefix (``"memories" OR "memori"*``), which on the
LoCoMo dev set lifts BM25 recall@10 from 0.586 to 0.596 (measured; a porter index gives 0.610).
The stemmer is SQLite's own (FTS5 ``porter`` tokenizer on an in-memory table), so stems agree
with the porter index memsync builds when a database has no FTS tables.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Sequence

from memsync.config import cjk

MAX_QUERY_CHARS = 2000  # longer input is cut: the first 2000 characters say what the user wants
MAX_TOKENS = 32
MIN_STEM = 3

# A compact English stopword list (question words included: "when did X ..." is about X).
_STOPWORD_TEXT = """
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves s t d ll m re ve don doesn didn
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

# Words too common in English to make a row a match on their own (``search.textindex``: ``weak``). A
# database's own statistics cannot tell them: in 40 rows "people", "two" and "one" are as rare as
# "billed", so BM25 weighs them alike, and rank fusion gives the lexical first place full credit
# however weak its match. The shipped MiniLM WordPiece vocabulary lists whole words by frequency
# (BERT's vocabulary was built that way: "the", "of", "and" first), a general frequency prior: its
# first COMMON_WORDS words ("people", "two", "time", "get", "year", "new") are common; words it
# ranks lower, or lacks (rarer ones, identifiers, other scripts), are not. Past about the 150th,
# its words turn topical ("day", "family", "house", names such as "john"): counting the first 400
# as common cost LoCoMo hybrid recall@10 0.809 -> 0.802 (turn links); 150 costs nothing.
COMMON_WORDS = 150

_WORD = re.compile(r"\w+", re.UNICODE)


class _Stemmer:
    """Porter stems from SQLite's FTS5 ``porter`` tokenizer (thread-safe, cached)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, str] = {}
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        self._conn.execute("CREATE VIRTUAL TABLE s USING fts5(t, tokenize='porter unicode61', detail=none)")
        self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(s, 'row')")

    def stem(self, token: str) -> str:
        with self._lock:
            if token in self._cache:
                return self._cache[token]
            self._conn.execute("DELETE FROM s")
            self._conn.execute("INSERT INTO s(t) VALUES (?)", (token,))
            row = self._conn.execute("SELECT term FROM v LIMIT 1").fetchone()
            stem = str(row[0]) if row else token
            if len(self._cache) < 50_000:
                self._cache[token] = stem
            return stem


_stemmer: _Stemmer | None = None


def stem(token: str) -> str:
    """The Porter stem of one lower-case token."""
    global _stemmer
    if _stemmer is None:
        _stemmer = _Stemmer()
    return _stemmer.stem(token)


def tokens(text: str) -> list[str]:
    """Content words of ``text``: lower-cased, deduplicated in order, stopwords dropped (unless
    nothing else is left), NUL and control characters ignored, CJK runs cut into bigrams
    (``config.cjk``), at most MAX_TOKENS."""
    words = _WORD.findall(text[:MAX_QUERY_CHARS].lower().replace("_", " "))
    seen: dict[str, None] = {}
    for w in words:
        for piece in cjk.query_words(w):
            seen.setdefault(piece, None)
    all_words = list(seen)
    content = [w for w in all_words if w not in STOPWORDS]
    return (content or all_words)[:MAX_TOKENS]


_ranks: dict[str, int] | None = None
_ranks_lock = threading.Lock()


def _word_ranks() -> dict[str, int]:
    """Whole English words by frequency rank (1 = most frequent), from the shipped vocabulary
    (loaded once per process, about 20 ms)."""
    global _ranks
    with _ranks_lock:
        if _ranks is None:
            from memsync.embedding.local import tokenizer_json

            vocab: dict[str, int] = json.loads(tokenizer_json())["model"]["vocab"]
            first = vocab["the"]  # the entries before it are markers, characters and unused slots
            _ranks = {w: i - first + 1 for w, i in vocab.items() if i >= first and w.isascii() and w.isalpha()}
        return _ranks


def common(token: str) -> bool:
    """Whether a query token (of :func:`tokens`) is, or stems to, one of English's COMMON_WORDS
    most frequent words (see there)."""
    if not token.isascii():
        return False
    ranks = _word_ranks()
    rank = min(ranks.get(token, COMMON_WORDS + 1), ranks.get(stem(token), COMMON_WORDS + 1))
    return rank <= COMMON_WORDS


def rarer(tokens: Sequence[str]) -> list[str]:
    """The tokens that are not :func:`common`, when some are and some are not; else none (a query of
    only common or only rarer words has nothing to tell its matches apart by)."""
    out = [t for t in tokens if not common(t)]
    return out if 0 < len(out) < len(tokens) else []


def holds(text: str, wanted: Sequence[str]) -> bool:
    """Whether ``text`` holds one of the ``wanted`` tokens as FTS5 matches them: the word itself or
    a word starting with its stem (``prefix_stem``); a CJK bigram anywhere in the text."""
    words = set(_WORD.findall(text.lower().replace("_", " ")))
    lowered = text.lower()
    for token in wanted:
        if not token.isascii():
            if token in lowered:
                return True
            continue
        prefix = prefix_stem(token)
        if token in words or (prefix and any(w.startswith(prefix) for w in words)):
            return True
    return False


def _quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


def expression_for(groups: Sequence[tuple[str, ...]]) -> str | None:
    """OR of groups of alternative forms, each form quoted (a trailing ``*`` is kept as a prefix
    operator), or None when there is nothing to match."""
    parts = []
    for forms in groups:
        quoted = [_quote(f[:-1]) + "*" if f.endswith("*") and len(f) > 1 else _quote(f) for f in forms]
        parts.append(quoted[0] if len(quoted) == 1 else "(" + " OR ".join(quoted) + ")")
    return " OR ".join(parts) if parts else None


def prefix_stem(token: str) -> str | None:
    """The stem a token is also matched by as a prefix (the word itself when it is its own stem:
    ``upload`` also finds ``uploads``, since the app's FTS tables do not stem), or None for stems
    shorter than MIN_STEM. LoCoMo lexical recall@10 0.598 → 0.610 with words that are their own stem."""
    s = stem(token)
    return s if len(s) >= MIN_STEM else None
