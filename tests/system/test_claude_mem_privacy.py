"""What the real claude-mem 13.25.3 stores around a private prompt (docs/claude-mem.md, "Does claude-mem
store private text that could be injected?"). The hook's requests are sent to its worker as its hook sends them.

claude-mem saves no private block of a prompt. It still takes the tool uses of a private prompt's turn:
its privacy check finds the previous prompt, or none at all, and lets them through. A tool use's
untagged text is stored as it is. memsync injects what claude-mem stores, so these are the facts the
docs rest on.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from scripts.real_claude_mem import ClaudeMemWorker

pytestmark = pytest.mark.slow


def _init(worker: ClaudeMemWorker, session: str, prompt: str) -> dict[str, Any]:
    return worker.request("POST", "/api/sessions/init", {"contentSessionId": session, "project": "p", "prompt": prompt})


def _tool_use(worker: ClaudeMemWorker, session: str, use_id: str, command: str) -> dict[str, Any]:
    return worker.request("POST", "/api/sessions/observations", {
        "contentSessionId": session, "tool_name": "Bash", "tool_input": {"command": command},
        "tool_response": {"stdout": "ok"}, "cwd": str(worker.home), "tool_use_id": use_id})


def test_private_blocks_are_not_saved_but_a_private_turns_tool_uses_are(claude_mem: ClaudeMemWorker) -> None:
    assert _init(claude_mem, "A", "list the files in the repo please")["skipped"] is False
    assert _init(claude_mem, "A", "<private>my token is tok-A</private>") | {"sessionDbId": 0} == {
        "sessionDbId": 0, "promptNumber": 2, "skipped": True, "reason": "private"}
    assert _tool_use(claude_mem, "A", "tu1", "curl -H 'Authorization: tok-A' <private>tagged-A</private>x") == {
        "status": "queued"}
    assert _init(claude_mem, "B", "<private>the first prompt, private</private>")["reason"] == "private"
    assert _tool_use(claude_mem, "B", "tu2", "echo tok-B") == {"status": "queued"}
    assert _init(claude_mem, "C", "deploy it <private>with key tok-C</private> now")["skipped"] is False
    # Over 256 KiB, the closing tag falls past the cut: the block is no longer one, and is saved.
    assert _init(claude_mem, "D", "<private>tok-D " + "a" * 256 * 1024 + "</private>")["skipped"] is False

    with sqlite3.connect(claude_mem.db) as db:
        prompts = db.execute("SELECT content_session_id, prompt_number, prompt_text FROM user_prompts "
                             "ORDER BY id").fetchall()
        uses = db.execute("SELECT content_session_id, prompt_number, tool_input FROM tool_uses ORDER BY id").fetchall()
    db.close()
    assert prompts[:2] == [("A", 1, "list the files in the repo please"), ("C", 1, "deploy it  now")]
    # Saved as every prompt is, capped at 4,000 characters: the private text's start is in it.
    assert [(s, n, t[:15], len(t)) for s, n, t in prompts[2:]] == [("D", 1, "<private>tok-D ", 4000)]
    # The private turn's tool use is filed under the previous prompt (or none), its untagged text kept.
    assert uses == [("A", 1, "{\"command\":\"curl -H 'Authorization: tok-A' x\"}"),
                    ("B", 0, "{\"command\":\"echo tok-B\"}")]
