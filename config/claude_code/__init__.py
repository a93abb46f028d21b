"""Claude Code's side, as memsync edits it (not claude-mem's database: that is ``config.claude_mem``).

``settings_file`` (its settings file: read strictly, written whole, every addition recorded),
``registrations`` (where its settings are, claude-mem's tools there, the changes memsync makes)
and ``hook`` (the per-prompt ``UserPromptSubmit`` entry).
"""
