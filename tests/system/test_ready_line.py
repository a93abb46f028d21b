"""`memsync worker` (what `make run` starts) prints one line for a person when search is usable: on
stdout, plain text, also when stdout is not a terminal; once per start, not on the passes after it.
Its logs stay on stderr."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading

import pytest

from memsync.config.settings import Settings
from memsync.worker.checks.status import status
from memsync.worker.seed.importer import import_records
from tests.conftest import make_db, mixed_records, prompt
from tests.system.test_e2e import ROOT, env_for
from tests.system.test_worker import wait_for
from tests.test_readme import READY

pytestmark = pytest.mark.slow


def test_the_ready_line_is_printed_once_on_stdout_when_it_is_a_pipe(managed: Settings) -> None:
    make_db(managed.db, mixed_records(4))
    proc = subprocess.Popen([sys.executable, "-m", "memsync", "worker"], cwd=ROOT, text=True,
                            env=env_for(managed, MEMSYNC_POLL_INTERVAL_S="0.2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: queue.Queue[str] = queue.Queue()
    err: list[str] = []
    readers = [threading.Thread(target=lambda: [out.put(line) for line in proc.stdout or ()], daemon=True),
               threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True)]
    for r in readers:
        r.start()
    try:
        first = out.get(timeout=180)  # the first line on stdout is the ready line
        ready = READY.match(first.rstrip("\n"))
        assert ready, first
        documents = int(first.split(" documents searchable", 1)[0].rsplit(" ", 1)[1].replace(",", ""))
        assert documents > 24  # the 24 rows' documents (an observation is several)
        # A later pass (a new row) says nothing more.
        import_records(managed.db, [prompt(100, prompt_text="a prompt committed after search was ready")])
        wait_for(lambda: status(managed).pending_rows == 0, 120, "the pass that syncs the new row")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for r in readers:
                r.join(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
    printed = [first]
    while not out.empty():
        printed.append(out.get())
    assert sum(bool(READY.match(line.rstrip("\n"))) for line in printed) == 1, printed
    assert not any("search is ready" in line for line in err)  # the logs stay as they are
