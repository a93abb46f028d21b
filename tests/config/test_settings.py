"""Settings: precedence flags > env > file > defaults, origins reported, bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest

from memsync.config.settings import SettingsError, describe, load_settings


class TestSettings:
    def test_defaults(self, tmp_path: Path) -> None:
        loaded = load_settings()
        s = loaded.settings
        assert s.db == Path("~/.claude-mem/claude-mem.db").expanduser()
        assert s.data_dir == Path("~/.memsync").expanduser()
        assert (s.chroma_mode, s.window_days, s.candidates) == ("managed", 90, 100)
        assert set(loaded.origins.values()) == {"default"}

    def test_precedence_cli_over_env_over_file(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        cfg = tmp_path / "c.toml"
        cfg.write_text('chroma_port = 9001\nwindow_days = 30\ndb = "/from/file.db"\n')
        monkeypatch.setenv("MEMSYNC_WINDOW_DAYS", "7")
        monkeypatch.setenv("MEMSYNC_DB", "/from/env.db")
        loaded = load_settings(cli={"db": Path("/from/cli.db"), "data_dir": None}, config_file=cfg)
        s = loaded.settings
        assert (s.chroma_port, s.window_days, s.db) == (9001, 7, Path("/from/cli.db"))
        assert loaded.origins["chroma_port"] == f"file:{cfg}"
        assert loaded.origins["window_days"] == "env"
        assert loaded.origins["db"] == "cli"
        assert loaded.origins["data_dir"] == "default"

    def test_config_file_from_env_and_home(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        home_cfg = tmp_path / "home" / ".memsync" / "config.toml"
        home_cfg.parent.mkdir(parents=True)
        home_cfg.write_text("[memsync]\ncandidates = 50\n")
        assert load_settings().settings.candidates == 50
        other = tmp_path / "other.toml"
        other.write_text("candidates = 60\n")
        monkeypatch.setenv("MEMSYNC_CONFIG", str(other))
        assert load_settings().settings.candidates == 60

    @pytest.mark.parametrize(
        ("env", "value", "needle"),
        [("MEMSYNC_CHROMA_PORT", "eighty", "chroma_port (MEMSYNC_CHROMA_PORT from env)"),
         ("MEMSYNC_CHROMA_MODE", "cloudy", "chroma_mode"),
         ("MEMSYNC_WINDOW_DAYS", "-1", "window_days")],
    )
    def test_bad_env_value_names_the_key(
        self, monkeypatch: pytest.MonkeyPatch, env: str, value: str, needle: str
    ) -> None:
        monkeypatch.setenv(env, value)
        with pytest.raises(SettingsError, match=None) as info:
            load_settings()
        assert needle in str(info.value) and "\n" not in str(info.value)

    def test_unknown_file_key_and_missing_file(self, tmp_path: Path) -> None:
        cfg = tmp_path / "c.toml"
        cfg.write_text("chroma_prot = 1\n")
        with pytest.raises(SettingsError, match="unknown setting 'chroma_prot'"):
            load_settings(config_file=cfg)
        with pytest.raises(SettingsError, match="does not exist"):
            load_settings(config_file=tmp_path / "nope.toml")
        cfg.write_text("chroma_port = [\n")
        with pytest.raises(SettingsError, match="invalid TOML"):
            load_settings(config_file=cfg)

    def test_describe_lists_every_key_with_help(self) -> None:
        rows = describe(load_settings())
        assert {r["key"] for r in rows} >= {"db", "data_dir", "chroma_mode", "chroma_host", "chroma_port",
                                          "collection", "embedding_model", "batch_size", "window_days", "candidates"}
        assert all(r["help"] and r["env"].startswith("MEMSYNC_") for r in rows)


class TestWhereTheDatabaseIs:
    """Without --db / MEMSYNC_DB, the database claude-mem itself uses (upstream ``paths.ts``)."""

    @staticmethod
    def claude_settings(home: Path, text: str) -> None:
        (home / ".claude-mem").mkdir(parents=True, exist_ok=True)
        (home / ".claude-mem" / "settings.json").write_text(text, encoding="utf-8")

    def test_claude_mem_data_dir_from_the_environment_first(self, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
        home = tmp_path / "home"
        self.claude_settings(home, '{"CLAUDE_MEM_DATA_DIR": "/from/settings"}')
        monkeypatch.setenv("CLAUDE_MEM_DATA_DIR", "~/agent-memory")
        loaded = load_settings()
        assert loaded.settings.db == home / "agent-memory" / "claude-mem.db"
        assert loaded.origins["db"] == "claude-mem: CLAUDE_MEM_DATA_DIR in the environment"
        monkeypatch.setenv("MEMSYNC_DB", "/mine.db")  # memsync's own setting still wins
        assert load_settings().settings.db == Path("/mine.db") and load_settings().origins["db"] == "env"

    @pytest.mark.parametrize("text", [
        '{"CLAUDE_MEM_DATA_DIR": "~/cm", "CLAUDE_MEM_MODEL": "x"}',
        '{"env": {"CLAUDE_MEM_DATA_DIR": "~/cm"}}',  # the nested layout of older files
        '\ufeff{"CLAUDE_MEM_DATA_DIR": "~/cm"}',  # with a byte order mark
    ], ids=["flat", "nested", "bom"])
    def test_then_claude_mem_data_dir_in_its_settings_file(self, tmp_path: Path, text: str) -> None:
        home = tmp_path / "home"
        self.claude_settings(home, text)
        loaded = load_settings()
        assert loaded.settings.db == home / "cm" / "claude-mem.db"
        assert loaded.origins["db"] == f"claude-mem: CLAUDE_MEM_DATA_DIR in {home / '.claude-mem' / 'settings.json'}"

    @pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"CLAUDE_MEM_DATA_DIR": ""}', '{"env": 3}'])
    def test_else_claude_mems_default_directory(self, tmp_path: Path, text: str) -> None:
        self.claude_settings(tmp_path / "home", text)  # unusable or silent: upstream falls through too
        loaded = load_settings()
        assert loaded.settings.db == tmp_path / "home" / ".claude-mem" / "claude-mem.db"
        assert loaded.origins["db"] == "default"


class TestApiToken:
    """One rule for "is authentication on" (``Settings.bearer_token``): an empty or
    blank token is no token, for the settings display as for the servers."""

    @pytest.mark.parametrize("blank", ["", " ", "\t \n"])
    def test_a_blank_token_is_unset(self, monkeypatch: pytest.MonkeyPatch, blank: str) -> None:
        monkeypatch.setenv("MEMSYNC_API_TOKEN", blank)
        loaded = load_settings()
        assert loaded.settings.api_token is None and loaded.settings.bearer_token is None
        assert {r["key"]: r["value"] for r in describe(loaded)}["api_token"] == "unset"

    def test_a_real_token_is_set_without_its_surrounding_whitespace(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("MEMSYNC_API_TOKEN", " s3cret \n")
        loaded = load_settings()
        assert loaded.settings.bearer_token == "s3cret"
        assert {r["key"]: r["value"] for r in describe(loaded)}["api_token"] == "set"

    def test_a_copy_that_skips_the_validator_still_counts_blank_as_none(self) -> None:
        from pydantic import SecretStr

        s = load_settings().settings.model_copy(update={"api_token": SecretStr("  ")})
        assert s.bearer_token is None

    def test_memsync_settings_prints_unset_for_a_blank_token(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import json

        from click.testing import CliRunner

        from memsync.main import main

        monkeypatch.setenv("MEMSYNC_API_TOKEN", " ")
        result = CliRunner().invoke(main, ["settings", "--json"])
        assert result.exit_code == 0, result.output
        token = next(r for r in json.loads(result.stdout)["settings"] if r["key"] == "api_token")
        assert token["value"] == "unset" and token["origin"] == "env"
