"""How Chinese, Japanese and Korean text becomes words in memsync's lexical indexes: the one owner
of that convention, for the worker (which writes the text index) and the search (which writes its
own FTS5 index and cuts queries).

Why: CJK writing puts no space between words, so a word tokenizer (FTS5's ``unicode61``, tantivy's
simple tokenizer) keeps a whole run (``修复退款金额的舍入错误``) as one word, and a search for a word
inside it (``退款``) finds nothing. Bigrams as Lucene's CJK analyzer makes them, plus every
character, with no dictionary (measured against jieba: ``docs/benchmarks.md``, Multilingual):
- indexed text: every run of Han, Kana and Hangul characters becomes its characters and its
  overlapping bigrams (``退 款 金 退款 款金``), so one-character words are found too;
- query text: a run becomes its bigrams (one character: itself), so ``退款`` asks for ``退款`` and
  ``舍入错误`` for ``舍入 入错 错误``, which BM25 ranks rows holding all of them first.
Text without CJK is left exactly as it was (Latin keeps its stemming downstream). Korean, written
with spaces, gains too: a word with its particle (``비밀번호를``) holds the bigrams of ``비밀번호``.
Changing this changes both indexes' contents: bump their format versions.
"""

from __future__ import annotations

import re

# CJK radicals and Kangxi radicals, iteration marks (々〆〇), Hiragana, Katakana but its middle dot
# (・ separates words), Bopomofo, Hangul Jamo and compatibility Jamo, Katakana extensions, CJK
# Extension A, CJK Unified Ideographs, Hangul Jamo Extended-A, Hangul syllables and Extended-B, CJK
# compatibility ideographs, half-width Katakana and Hangul, the supplementary ideograph planes.
RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF), (0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3040, 0x309F), (0x30A0, 0x30FA), (0x30FC, 0x30FF),
    (0x3100, 0x312F), (0x3130, 0x318F), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA960, 0xA97F),
    (0xAC00, 0xD7AF), (0xD7B0, 0xD7FF), (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0xFFA0, 0xFFDC), (0x20000, 0x323AF),
)
_SET = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in RANGES)
RUN = re.compile(f"[{_SET}]+")


# Where a text may be cut: after a word and the spaces that follow it, or after any one CJK
# character (Chinese and Japanese are written without spaces: a sentence is one "word" between them).
_PIECE = re.compile(f"[{_SET}]\\s*|[^\\s{_SET}]+\\s*|\\s+")


def pieces(text: str) -> list[str]:
    """``text`` split where it may be cut short, each piece with the spaces after it:
    ``"".join(pieces(text)) == text``."""
    return _PIECE.findall(text)


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds any Han, Kana or Hangul character."""
    return RUN.search(text) is not None


def bigrams(run: str) -> list[str]:
    """The overlapping two-character pieces of a run (a one-character run: itself)."""
    return [run[i : i + 2] for i in range(len(run) - 1)] if len(run) > 1 else [run]


def index_form(text: str) -> str:
    """``text`` with every CJK run replaced by its characters and its bigrams, spaced apart (what
    the indexes are given to tokenize); text without CJK is returned as it is."""
    if not has_cjk(text):
        return text

    def cut(m: re.Match[str]) -> str:
        run = m.group()
        return " " + " ".join(list(run) + (bigrams(run) if len(run) > 1 else [])) + " "

    return RUN.sub(cut, text)


def query_words(word: str) -> list[str]:
    """One query word (letters and digits, as a word tokenizer cut it) as index words: its CJK runs
    as bigrams, the other pieces as they are (``退款bug`` → ``退款``, ``bug``)."""
    if not has_cjk(word):
        return [word]
    out: list[str] = []
    at = 0
    for m in RUN.finditer(word):
        if m.start() > at:
            out.append(word[at : m.start()])
        out.extend(bigrams(m.group()))
        at = m.end()
    if at < len(word):
        out.append(word[at:])
    return out


# Chinese and Japanese are written without spaces (Korean has them between words): a run of Han or
# Kana counts one word per this many characters, about the length of a word in either language.
CHARS_PER_WORD = 2
HANGUL: tuple[tuple[int, int], ...] = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xAC00, 0xD7AF),
                                       (0xD7B0, 0xD7FF), (0xFFA0, 0xFFDC))
_UNSPACED = re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in RANGES if (lo, hi) not in HANGUL) + "]+")
_WORD = re.compile(r"[^\W_]")  # a letter or a digit: punctuation and emoji beside a run are no word


def word_count(text: str) -> int:
    """About how many words ``text`` holds: what spaces separate, and in a Han or Kana run one word
    per ``CHARS_PER_WORD`` characters (``运行测试`` 2, ``为什么上传失败了`` 4, ``run the tests`` 3)."""
    count = 0
    for piece in text.split():
        runs = _UNSPACED.findall(piece)
        rest = [w for w in _UNSPACED.sub(" ", piece).split() if _WORD.search(w)]  # not "。", "，", "👍"
        count += sum(-(-len(run) // CHARS_PER_WORD) for run in runs) + len(rest)
    return count
