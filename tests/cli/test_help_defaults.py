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
    """The default a help text must show; a computed one (``db``) is said in words pointing at
    ``memsync settings``, checked by :func:`test_a_computed_default_is_said_in_words`."""
    field = Settings.model_fields[name]
    if field.default_factory is not None:
        return COMPUTED
    value = field.default
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


COMPUTED = "<computed>"


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
            if default(key) == COMPUTED:
                assert "memsync settings" in shown, f"{where}: a computed default names where to see it: {shown!r}"
            else:
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


def commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The argument path of every command and subcommand (``()`` is ``memsync`` itself)."""
    yield path
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))


def test_no_help_prints_an_undefined_default() -> None:
    """Once, `--help` showed `default PydanticUndefined` for --db. Every command's whole
    rendered help, as a user sees it, names no Undefined value."""
    from click.testing import CliRunner

    runner = CliRunner()
    seen = 0
    for path in commands(main):
        result = runner.invoke(main, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        assert "Undefined" not in result.output, f"memsync {' '.join(path)} --help: {result.output}"
        seen += 1
    assert seen > 10  # every command was rendered, not just the group
    db_help = runner.invoke(main, ["search", "--help"], terminal_width=200).output
    assert "[env MEMSYNC_DB; default where claude-mem keeps it, see `memsync settings`]" in db_help
