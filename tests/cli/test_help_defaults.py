"""Help texts name the settings' defaults as the settings model has them, never a copy that can drift."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click

from memsync.config.settings import Settings
from memsync.main import main

SETTINGS_NOTE = re.compile(r"\[settings (\w+): ([^\]]+)\]")
ENV_NOTE = re.compile(r"\[env MEMSYNC_(\w+); default ([^\]]+)\]")
# Every option that overrides a setting says so, with the setting's default.
OVERRIDDEN = {"db", "data_dir", "chroma_mode", "window_days", "poll_interval_s", "reconcile_interval_s",
              "serve_host", "serve_port"}


def default(name: str) -> str:
    value = Settings.model_fields[name].default
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def help_texts(command: click.Command, path: str = "memsync") -> Iterator[tuple[str, str]]:
    """(where, text) for a command's help, each of its options' help, and its subcommands'."""
    yield path, command.help or ""
    for param in command.params:
        if isinstance(param, click.Option):
            yield f"{path} {param.opts[0]}", param.help or ""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from help_texts(sub, f"{path} {name}")


def test_every_default_in_a_help_text_is_the_settings_default() -> None:
    seen: set[str] = set()
    for where, text in help_texts(main):
        notes = SETTINGS_NOTE.findall(text) + [(k.lower(), v) for k, v in ENV_NOTE.findall(text)]
        for key, shown in notes:
            assert key in Settings.model_fields, f"{where}: no setting {key!r}"
            assert shown == default(key), f"{where}: help says {shown!r}, the setting's default is {default(key)!r}"
            seen.add(key)
        # A bracketed default in another form ("[settings: 90]", "[1]") would go unchecked.
        for bracket in re.findall(r"\[[^\]]*\]", text):
            if "default" in bracket or "settings" in bracket or re.fullmatch(r"\[[\d.]+\]", bracket):
                assert SETTINGS_NOTE.fullmatch(bracket) or ENV_NOTE.fullmatch(bracket), f"{where}: {bracket}"
    assert seen >= OVERRIDDEN


def test_command_descriptions_read_their_defaults_from_the_settings() -> None:
    assert f"newest {default('window_days')} days by default" in (main.commands["search"].help or "")
    assert f"http://{default('serve_host')}:{default('serve_port')}/" in (main.commands["serve"].help or "")
    for where, text in help_texts(main):
        assert "90 days" not in text or where == "memsync search", where
