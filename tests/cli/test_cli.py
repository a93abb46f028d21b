"""The command line: help everywhere, exit codes, JSON contracts, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.config.settings import Settings
from memsync.main import main
from tests.conftest import make_db, mixed_records

COMMANDS = [["settings"], ["resync"], ["verify"], ["status"], ["search"], ["timeline"], ["demo"], ["db"],
            ["db", "init"], ["db", "import"], ["db", "demo"]]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_every_command_has_help(cmd: list[str]) -> None:
    code, out, _ = invoke(*cmd, "--help")
    assert code == 0 and "Usage:" in out and len(out.splitlines()) > 3


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c[0] in ("settings", "resync", "verify", "status", "search")],
                         ids=" ".join)
def test_common_options_everywhere(cmd: list[str]) -> None:
    _, out, _ = invoke(*cmd, "--help")
    for option in ("--db", "--data-dir", "--chroma-mode", "--config", "--json"):
        assert option in out


def test_bad_setting_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSYNC_CHROMA_PORT", "not-a-port")
    code, out, err = invoke("status")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "chroma_port" in err and "MEMSYNC_CHROMA_PORT" in err
    code, _, err = invoke("settings", "--chroma-mode", "sideways")
    assert code == 2 and "chroma_mode (from cli)" in err


def test_settings_json_reports_origins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSYNC_WINDOW_DAYS", "30")
    code, out, _ = invoke("settings", "--json", "--db", str(tmp_path / "x.db"))
    rows = {r["key"]: r for r in json.loads(out)["settings"]}
    assert code == 0
    assert rows["window_days"]["value"] == 30 and rows["window_days"]["origin"] == "env"
    assert rows["db"]["origin"] == "cli" and rows["candidates"]["origin"] == "default"


def test_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = invoke("resync", "--db", str(tmp_path / "nope.db"), "--data-dir", str(tmp_path / "d"),
                          "--chroma-mode", "embedded")
    assert code == 1 and "source database not found" in err and "Traceback" not in err


def test_not_a_claude_mem_database(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    code, _, err = invoke("status", "--db", str(other), "--data-dir", str(tmp_path / "d"))
    assert code == 2 and "not a claude-mem database" in err


class TestDbCommands:
    def test_init_import_and_refuse_overwrite(self, tmp_path: Path) -> None:
        db = tmp_path / "m.db"
        assert invoke("db", "init", str(db))[0] == 0
        code, _, err = invoke("db", "init", str(db))
        assert code == 2 and "already exists" in err
        lines = tmp_path / "in.jsonl"
        lines.write_text("\n".join(json.dumps(r) for r in mixed_records(2)) + "\n\n")
        code, out, _ = invoke("db", "import", str(db), str(lines))
        assert code == 0 and "imported 2 observations, 2 summaries, 2 prompts" in out

    @pytest.mark.parametrize(("content", "needle"), [
        ('{"kind": "note"}', "kind must be one of"),
        ("{not json", "invalid JSON"),
        ('{"kind": "prompt", "project": "p", "created_at": "2026-01-01T00:00:00Z"}', "needs prompt_text"),
        ('{"kind": "observation", "project": "p"}', "created_at"),
    ])
    def test_import_errors_name_the_record_and_write_nothing(self, tmp_path: Path, content: str, needle: str) -> None:
        import sqlite3

        db = tmp_path / "m.db"
        invoke("db", "init", str(db))
        lines = tmp_path / "in.jsonl"
        lines.write_text(json.dumps(mixed_records(1)[0]) + "\n" + content + "\n")
        code, _, err = invoke("db", "import", str(db), str(lines))
        assert code == 2 and needle in err
        assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM user_prompts").fetchone()[0] == 0


class TestSyncCommands:
    @pytest.fixture
    def args(self, settings: Settings) -> list[str]:
        make_db(settings.db, mixed_records(3))
        return ["--db", str(settings.db), "--data-dir", str(settings.data_dir), "--chroma-mode", "embedded"]

    def test_resync_verify_status_contracts(self, args: list[str], settings: Settings) -> None:
        import sqlite3

        code, out, _ = invoke("verify", *args)
        assert code == 1 and out.startswith("21 missing, 0 orphan, 0 stale")
        code, out, _ = invoke("resync", *args, "--json")
        first = json.loads(out)
        assert code == 0 and first["added"] == 21 and first["collection"] == "memsync-g1"
        code, out, _ = invoke("resync", *args)
        assert code == 0 and out.startswith("0 added, 0 updated, 0 deleted, 21 unchanged")
        code, out, _ = invoke("verify", *args, "--json")
        report = json.loads(out)
        assert code == 0 and report["clean"] and (report["missing"], report["orphan"], report["stale"]) == (0, 0, 0)
        conn = sqlite3.connect(settings.db)
        with conn:
            conn.execute("DELETE FROM observations WHERE id = 1")
            conn.execute("UPDATE session_summaries SET learned = 'changed' WHERE id = 2")
        conn.close()
        code, out, _ = invoke("verify", *args, "--json")
        report = json.loads(out)
        assert code == 1 and (report["missing"], report["orphan"], report["stale"]) == (0, 3, 1)
        code, out, _ = invoke("status", *args, "--json")
        st = json.loads(out)
        assert code == 0 and st["totals"]["observations"]["rows"] == 2
        assert st["kinds"]["prompts"]["alpha"]["synced_rows"] == 2 and st["kinds"]["prompts"]["beta"]["rows"] == 1
        # resync filled the vector copy and the text index; the deletes above reach the copy at the
        # next sync
        assert st["vector_copy"] == {"enabled": True, "present": True, "complete": True, "documents": 21}
        assert st["text_index"]["built"] is True and st["text_index"]["pending_rows"] == 0
        code, out, _ = invoke("status", *args)
        assert code == 0 and "observations" in out and "alpha" in out
        assert "vector copy: 21 documents, complete" in out and "text index: up to date" in out
        code, out, _ = invoke("resync", *args)
        assert code == 0 and json.loads(invoke("status", *args, "--json")[1])["vector_copy"]["documents"] == 18
        from memsync.worker.checks.status import vector_copy_state

        off = settings.model_copy(update={"vector_copy": False})
        assert vector_copy_state(off, "memsync-g1") == {"enabled": False}

    def test_dry_run_json(self, args: list[str]) -> None:
        code, out, _ = invoke("resync", *args, "--dry-run", "--json")
        assert code == 0 and json.loads(out)["added"] == 21 and json.loads(out)["dry_run"] is True
        assert invoke("verify", *args)[0] == 1

    def test_rebuild_refuses_project(self, args: list[str]) -> None:
        code, _, err = invoke("resync", *args, "--rebuild", "--project", "alpha")
        assert code == 2 and "--rebuild" in err


def test_status_says_which_rule_chose_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "cm-data"
    make_db(data / "claude-mem.db", mixed_records(1))
    monkeypatch.setenv("CLAUDE_MEM_DATA_DIR", str(data))
    common = ["--data-dir", str(tmp_path / "memsync"), "--chroma-mode", "embedded"]
    code, out, _ = invoke("status", *common)
    assert code == 0 and out.splitlines()[0] == (f"database: {data / 'claude-mem.db'} "
                                                 "(chosen by CLAUDE_MEM_DATA_DIR in the environment)")
    code, out, _ = invoke("status", *common, "--db", str(data / "claude-mem.db"), "--json")
    assert code == 0 and json.loads(out)["database"]["chosen_by"] == "--db"
