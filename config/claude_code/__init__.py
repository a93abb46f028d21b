"""Claude Code's side, as memsync edits it (not claude-mem's database: that is ``config.claude_mem``).

- ``settings_file``: Claude Code's settings file, read strictly, written whole, every addition
  recorded beside it so that it can be taken back exactly;
- ``registrations``: where its settings are, what claude-mem's search tools are called there, and
  the changes ``memsync claude-code swap`` / ``restore`` make to them;
- ``hook``: the per-prompt ``UserPromptSubmit`` entry swap adds (and its ``SessionStart`` entry for
  a compaction), and claude-mem's own injection.

The exports below are what the command uses; all three modules are standard library only, so
importing the package costs no more than importing one of them.
"""

from memsync.config.claude_code.hook import (
    COMPACT_AT,
    HOOK_AT,
    InjectTarget,
    claude_mem_injection,
    hook_entry,
    hook_in,
    hook_installed,
    hook_supported,
    inject_command,
)
from memsync.config.claude_code.registrations import (
    SERVER_NAME,
    SettingsChange,
    apply_change,
    config_dir,
    plan_restore,
    plan_swap,
    registrations,
    settings_path,
    winning_scope,
)
from memsync.config.claude_code.settings_file import (
    HOOKS_ELSEWHERE_REFUSED_SINCE,
    ClaudeSettingsError,
    read_settings,
    record_misread_by_claude_code,
)

__all__ = [
    "COMPACT_AT", "HOOK_AT", "InjectTarget", "claude_mem_injection", "hook_entry", "hook_in", "hook_installed",
    "hook_supported", "inject_command",
    "SERVER_NAME", "SettingsChange", "apply_change", "config_dir", "plan_restore", "plan_swap", "registrations",
    "settings_path", "winning_scope",
    "HOOKS_ELSEWHERE_REFUSED_SINCE", "ClaudeSettingsError", "read_settings", "record_misread_by_claude_code",
]
