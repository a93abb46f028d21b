"""The first-sync benchmark's database shapes: ``--unique-texts`` leaves no text shared by two
documents and changes nothing else about the rows."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from memsync.config.claude_mem.schema import TABLES
from memsync.config.settings import Settings
from scripts.bench_first_sync import documents, make_database


def test_unique_texts_share_no_text_and_keep_the_rows(tmp_path: Path) -> None:
    shapes = {}
    for unique in (False, True):
        db = tmp_path / f"{unique}.db"
        make_database(db, 400, 13, unique=unique)
        texts, _ = documents(Settings(db=db, data_dir=tmp_path / f"data-{unique}"), 0)
        with sqlite3.connect(db) as conn:
            rows = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608 (fixed names)
                    for t in TABLES.values()]
        shapes[unique] = (texts, rows)
    demo, unique = shapes[False][0], shapes[True][0]
    assert len(set(demo)) < len(demo)  # the demo generator repeats texts
    assert len(set(unique)) == len(unique) == len(demo)
    assert [re.sub(r" \(ref [0-9a-f]{8}\)", "", u) for u in unique] == demo
    assert sum(shapes[False][1]) == 400 and shapes[False][1] == shapes[True][1]
