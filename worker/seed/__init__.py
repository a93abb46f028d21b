"""claude-mem databases memsync writes for people without claude-mem: ``memsync db init`` / ``db
import`` (``importer``) and the deterministic demo memory (``demo``, from ``demo_episodes``, its
handwritten sessions). It imports no other room.

Importing the room imports none of its modules: a name of ``__all__`` is imported on first use
(``memsync.worker.lazy_exports``).
"""

from typing import TYPE_CHECKING

from memsync.worker import lazy_exports

if TYPE_CHECKING:
    from memsync.worker.seed.demo import DAY_MS, generate
    from memsync.worker.seed.importer import import_records, init_db, read_jsonl

__all__ = ["DAY_MS", "generate", "import_records", "init_db", "read_jsonl"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "demo": ("DAY_MS", "generate"),
        "importer": ("import_records", "init_db", "read_jsonl"),
    })
