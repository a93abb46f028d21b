"""Claude Code's settings file as memsync edits it: read strictly, written whole, and every addition
recorded beside it so that it can be taken back exactly.

Reading refuses, in one line, what memsync could not write back unchanged: text that is not JSON,
a document that is not an object, one nested deeper than Python's parser goes, and an object that
holds a key twice (Claude Code's ``JSON.parse`` keeps the last; rewriting the file would silently
drop the other). Writing puts the whole new text in a temporary file and renames it over the old
one, keeping its permissions: never a half-written settings file.

The record of what an edit added lives in the settings file itself, under :data:`RECORD_KEY`::

    "memsyncSwap": {
      "note": "...",
      "added": [{"at": ["permissions", "deny"], "value": "mcp__…__search"}, ...],
      "created": [["permissions"], ["permissions", "deny"]]
    }

``added`` names each value appended to a list (``at`` is the path of keys to the list): a string,
number or boolean as itself (``value``), an object or list as its JSON text (``json``, keys sorted).
Why text: Claude Code (:data:`HOOKS_ELSEWHERE_REFUSED_SINCE` and later) reads any hook entry it
finds outside ``hooks`` as a misplaced hook and then applies nothing of the file that holds it, its
permissions and plugins included; the hook entry swap adds, recorded as itself, was one (``claude
doctor``: "hooks ... are declared outside \"hooks\" ..."). A record written before this rule (an
object as ``value``) is still read and undone, and the next swap rewrites it
(:func:`record_misread_by_claude_code` finds one).
``created`` names each object or list that did not exist before. :meth:`RecordedEdit.undo` removes
exactly those values (one occurrence each, the last, as they were appended) and drops a container
it created only when nothing else is left in it; a user's own entries, the keys' order and the
lists' order are kept. Why here and not in memsync's data directory: the record goes wherever the
file goes, so a data directory moved, another ``MEMSYNC_DATA_DIR`` or a restore run without
memsync's settings loses nothing; it names values, not positions, so the user's edits around them
(entries added, removed or reordered) leave it true; and Claude Code keeps a key it does not know
when it rewrites the file (2.1.332's ``claude plugin disable`` and ``enable`` keep it) and reads the file with it
(``tests/cli/test_claude_code.py`` checks both with the real CLI).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsync.config.errors import ConfigError

RECORD_KEY = "memsyncSwap"
# The first Claude Code release that applies nothing of a settings file holding a hook entry outside
# ``hooks`` (2.1.252 reads such a file; 253-256 were not published): found by bisecting the npm
# releases with ``claude doctor``.
HOOKS_ELSEWHERE_REFUSED_SINCE = "2.1.257"
RECORD_NOTE = ("What `memsync claude-code swap` added to this file; `memsync claude-code restore` removes "
               "exactly that, then this key. Keep it while the swap is on.")

KeyPath = tuple[str, ...]


class ClaudeSettingsError(ConfigError):
    """Claude Code's settings file cannot be read or edited as memsync must: fix or move it, then
    run again."""


def _refuse(path: Path, problem: str) -> ClaudeSettingsError:
    return ClaudeSettingsError(f"{path} {problem}; fix it, then run again")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    """A key met twice in one JSON object (control flow from the parser's hook)."""


def read_settings(path: Path) -> dict[str, Any]:
    """The settings as a dict ({} when the file does not exist); :class:`ClaudeSettingsError` for a
    file memsync could not write back as it is (see the module's docstring)."""
    return read_settings_file(path)[0]


def read_settings_file(path: Path) -> tuple[dict[str, Any], bool]:
    """The settings as :func:`read_settings` gives them, and whether the file ends with a newline
    (true when it does not exist): written back the same way, a file that was two-space JSON
    comes back byte for byte."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, True
    except (OSError, ValueError) as exc:
        raise _refuse(path, f"cannot be read ({exc})") from None
    try:
        data = json.loads(text or "{}", object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise _refuse(path, f"holds the key {exc.args[0]!r} twice in one object (Claude Code reads only the "
                            "last; writing the file back would drop the other)") from None
    except RecursionError:
        raise _refuse(path, "is nested too deeply to be read as JSON") from None
    except ValueError as exc:
        raise _refuse(path, f"is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _refuse(path, "does not hold a JSON object")
    return data, not text or text.endswith("\n")


def settings_text(path: Path, data: dict[str, Any], final_newline: bool = True) -> str:
    """``data`` as the file's new text (two-space indents, as Claude Code writes it; the final
    newline as the file had it)."""
    try:
        return json.dumps(data, indent=2, ensure_ascii=False) + ("\n" if final_newline else "")
    except RecursionError:
        raise _refuse(path, "is nested too deeply to be written back") from None


def write_settings(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed over it), keeping the
    file's permissions (0600 for a new file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
        fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".json", dir=path.parent)
    except OSError as exc:
        raise ClaudeSettingsError(f"{path} cannot be written ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ClaudeSettingsError(f"{path} cannot be written ({exc.strerror or exc})") from None
        raise


def same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, and an object's key order does not count."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def dotted(at: KeyPath) -> str:
    """A key path as the docs write it (``permissions.deny``)."""
    return ".".join(at)


@dataclass(frozen=True, slots=True)
class Step:
    """One change an edit made (or, on a dry run, would make), for printing."""

    action: str  # add, remove, drop (an emptied container the record says was created), record, forget
    at: KeyPath
    value: Any = None

    def describe(self, done: bool) -> str:
        """The change as one phrase, done or (``done`` off) to be done."""
        what = {"add": ("added to", "would add to"), "remove": ("removed from", "would remove from"),
                "drop": ("removed the emptied", "would remove the emptied"),
                "record": ("recorded what it added in", "would record what it adds in"),
                "forget": ("removed the swap's record", "would remove the swap's record")}[self.action]
        verb = what[0] if done else what[1]
        if self.action == "drop":
            return f"{verb} {dotted(self.at)} (the swap created it)"
        if self.action in ("record", "forget"):
            return f"{verb} {dotted(self.at)}"
        return f"{verb} {dotted(self.at)}: {json.dumps(self.value, ensure_ascii=False)}"


def _key_path(value: Any) -> KeyPath | None:
    if isinstance(value, list) and value and all(isinstance(k, str) for k in value):
        return tuple(value)
    return None


def _as_text(value: Any) -> bool:
    """Whether the record holds ``value`` as its JSON text: an object or list (see the module's
    docstring: Claude Code must not meet a hook entry outside ``hooks``)."""
    return isinstance(value, dict | list)


def _record_entry(at: KeyPath, value: Any) -> dict[str, Any]:
    """One ``added`` line of the record: a scalar as itself, an object or list as its JSON text."""
    if _as_text(value):
        return {"at": list(at), "json": json.dumps(value, sort_keys=True, ensure_ascii=False)}
    return {"at": list(at), "value": value}


def _recorded_value(item: Any) -> tuple[KeyPath, Any] | None:
    """(path, value) of one ``added`` line as :func:`_record_entry` writes it, or as records before
    the JSON text were written (an object as ``value``); None when it is neither."""
    if not isinstance(item, dict) or ("value" in item) == ("json" in item):
        return None
    at = _key_path(item.get("at"))
    if at is None:
        return None
    if "value" in item:
        return at, item["value"]
    if not isinstance(item["json"], str):
        return None
    try:
        value = json.loads(item["json"])
    except (ValueError, RecursionError):
        return None
    return (at, value) if _as_text(value) else None


def record_misread_by_claude_code(data: Mapping[str, Any]) -> bool:
    """Whether a settings document holds a record of the form before the JSON text: an object or
    list recorded as itself, which Claude Code may read as a misplaced hook and then apply nothing
    of the file (``memsync claude-code swap`` run again rewrites it)."""
    record = data.get(RECORD_KEY)
    added = record.get("added") if isinstance(record, dict) else None
    return isinstance(added, list) and any(isinstance(item, dict) and _as_text(item.get("value")) for item in added)


class RecordedEdit:
    """Additions to a settings document that record themselves under :data:`RECORD_KEY`, and the
    exact undo of what the record names. ``path`` is only for messages."""

    def __init__(self, data: dict[str, Any], path: Path) -> None:
        self.data, self.path = data, path
        self.steps: list[Step] = []
        self.added: list[tuple[KeyPath, Any]] = []
        self.created: list[KeyPath] = []
        self.recorded = RECORD_KEY in data
        if self.recorded:
            self._read_record(data[RECORD_KEY])

    def _read_record(self, record: Any) -> None:
        bad = _refuse(self.path, f"holds a {RECORD_KEY} entry that is not what memsync's swap writes "
                                 "(\"added\": [{\"at\": [keys], \"value\": ... or \"json\": \"...\"}], "
                                 "\"created\": [[keys]])")
        if not isinstance(record, dict):
            raise bad
        added, created = record.get("added", []), record.get("created", [])
        if not isinstance(added, list) or not isinstance(created, list):
            raise bad
        for item in added:
            entry = _recorded_value(item)
            if entry is None:
                raise bad
            self.added.append(entry)
        for item in created:
            at = _key_path(item)
            if at is None:
                raise bad
            self.created.append(at)

    def _container(self, at: KeyPath, kind: type, create: bool) -> Any:
        """The object or list at ``at`` (created, and recorded, when ``create``); None when absent;
        refused when something else is there."""
        node: Any = self.data
        for depth, key in enumerate(at, 1):
            want = kind if depth == len(at) else dict
            if key not in node:
                if not create:
                    return None
                node[key] = want()
                self.created.append(at[:depth])
            node = node[key]
            if not isinstance(node, want):
                raise _refuse(self.path, f"has {dotted(at[:depth])} that is not a JSON "
                                         f"{'object' if want is dict else 'list'}")
        return node

    def add(self, at: KeyPath, value: Any) -> None:
        """Append ``value`` to the list at ``at`` unless it holds it already (then it stays the
        user's, unrecorded)."""
        items = self._container(at, list, create=True)
        if any(same(v, value) for v in items):
            return
        items.append(value)
        self.steps.append(Step("add", at, value))
        if not any(a == at and same(v, value) for a, v in self.added):
            self.added.append((at, value))

    def withdraw(self, at: KeyPath, value: Any) -> None:
        """Take back a value the record says was added (an earlier swap's, now replaced): its last
        occurrence in the list at ``at``, and its line in the record."""
        kept = [(a, v) for a, v in self.added if not (a == at and same(v, value))]
        if len(kept) == len(self.added):
            return  # not recorded: the user's, left alone
        self.added = kept
        self._remove_last(at, value)

    def _remove_last(self, at: KeyPath, value: Any) -> None:
        items = self.find(at)
        if not isinstance(items, list):
            return
        for index in range(len(items) - 1, -1, -1):
            if same(items[index], value):
                del items[index]
                self.steps.append(Step("remove", at, value))
                return

    def find(self, at: KeyPath) -> Any:
        """The object or list at ``at``, or None (never created)."""
        node: Any = self.data
        for key in at:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    def finish(self) -> None:
        """Write the record into the document (at its old place, else as the last key)."""
        if not self.added and not self.created:
            return
        record = {"note": RECORD_NOTE, "added": [_record_entry(at, v) for at, v in self.added],
                  "created": [list(at) for at in dict.fromkeys(self.created)]}
        old = self.data.get(RECORD_KEY)
        if isinstance(old, dict) and all(same(old.get(k), v) for k, v in record.items() if k != "note"):
            return  # nothing new: the user's copy (their note included) stays as it is
        self.data[RECORD_KEY] = record
        self.steps.append(Step("record", (RECORD_KEY,)))

    def undo(self) -> None:
        """Remove what the record names, then the record: each added value once (its last
        occurrence) where it still is, each created container that is left empty."""
        for at, value in reversed(self.added):
            self._remove_last(at, value)
        for at in sorted(dict.fromkeys(self.created), key=len, reverse=True):
            parent, node = self.find(at[:-1]), self.find(at)
            if isinstance(parent, dict) and isinstance(node, dict | list) and not node:
                del parent[at[-1]]
                self.steps.append(Step("drop", at))
        if self.recorded:
            del self.data[RECORD_KEY]
            self.steps.append(Step("forget", (RECORD_KEY,)))
