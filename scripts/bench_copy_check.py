"""What the worker's check of its vector copy costs at scale (the copy's entries checksum, then the
vectors' per-block checksums, a slice a step: ``worker.loop.maintenance.CopyCheck``).

    .venv/bin/python -m scripts.bench_copy_check [--docs 313000] [--dim 384] [--cycles 5]

Synthesises a copy of ``--docs`` random unit vectors straight through the writer
(``VectorCopyWriter.put``, 5,000 a batch, as a fill does: no embedding, no Chroma) in ``--work``
(reused when it already holds that many), then measures in a fresh process, so that the numbers are
the check's and not the synthesis's:

- the writer's open as the worker's start does it (it checks the whole copy), and the open of a
  copy of the previous format (manifest version 3: its block checksums are computed and recorded);
- ``--cycles`` whole check cycles run by the worker's own ``CopyCheck`` a step at a time, as the
  worker's loop calls it: steps per cycle, CPU time per cycle (``time.process_time``), the longest
  step (what a new row may wait), and the memory the check adds at its peak (``VmHWM`` reset through
  ``/proc/self/clear_refs`` after the open, minus the RSS before the first cycle);
- one cycle with the copy's files dropped from the page cache first (``posix_fadvise DONTNEED``):
  the check reading from disk;
- the CPU share of one core over an hour: cycles per hour (one per ``vector_copy_check_s``, plus one
  after each reconcile's full pass) times the CPU of a cycle;
- ``status``'s and ``verify``'s whole check (``vectors_damage``), and random bytes written over a
  block in the middle of the vectors file: the steps the worker's check takes to find it.

Prints a table and writes JSON (default ``.bench/bench_copy_check.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from memsync.config.formats.vector_copy import BLOCK, MANIFEST_FILE, Manifest, copy_dir, vectors_damage, vectors_file
from memsync.config.settings import Settings
from memsync.worker.loop.maintenance import CopyCheck
from memsync.worker.stores.vectorcopy import VectorCopyWriter
from scripts.benchlib import report

COLLECTION, MODEL = "memsync-bench", "bench-model"
PUT = 5000


def _kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def synthesise(settings: Settings, docs: int, dim: int) -> float:
    """A copy of ``docs`` random unit vectors written through the writer; seconds it took (0: reused)."""
    m = Manifest.read(copy_dir(settings, COLLECTION))
    if m is not None and m.count == docs and m.dim == dim and m.blocks is not None and m.complete:
        return 0.0
    t = time.perf_counter()
    w = VectorCopyWriter(settings, COLLECTION, MODEL, dim, fresh=True)
    try:
        rng = np.random.default_rng(7)
        projects = [f"project-{i}" for i in range(40)]
        for start in range(0, docs, PUT):
            n = min(PUT, docs - start)
            v = rng.standard_normal((n, dim)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            w.put([f"prompt_{start + i + 1}" for i in range(n)], v,
                  [{"project": projects[(start + i) % 40], "created_at_epoch": 1_700_000_000 + start + i}
                   for i in range(n)])
        w.mark_complete()
    finally:
        w.close()
    return time.perf_counter() - t


class _Target:
    """What ``CopyCheck`` reads of the worker's ``SyncTarget``: the settings, the copy, a connection."""

    def __init__(self, settings: Settings, copy: VectorCopyWriter) -> None:
        self.s, self.copy, self.sink = settings, copy, object()

    def reopen_copy(self, state: Any) -> None:
        raise AssertionError("the copy was closed")

    def close_copy(self) -> None:
        raise AssertionError("the copy failed")


def _cycle(check: CopyCheck, target: _Target) -> tuple[int, float, float]:
    """One whole check cycle as the worker's loop runs it: (steps, CPU seconds, longest step's seconds)."""
    check.soon()
    steps, cpu, longest = 0, time.process_time(), 0.0
    while check.due(target):  # type: ignore[arg-type]
        t = time.perf_counter()
        check.run(target, None)  # type: ignore[arg-type]
        longest = max(longest, time.perf_counter() - t)
        steps += 1
    return steps, time.process_time() - cpu, longest


def _drop_cache(directory: Path) -> None:
    for path in directory.iterdir():
        if path.suffix in (".i8", ".bin"):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def measure(work: Path, cycles: int) -> dict[str, Any]:
    """The measurements (run in a fresh process)."""
    settings = Settings(data_dir=work / "data")
    directory = copy_dir(settings, COLLECTION)
    m = Manifest.read(directory)
    assert m is not None
    out: dict[str, Any] = {"docs": m.count, "dim": m.dim, "block_vectors": BLOCK,
                           "vectors_mb": round(m.count * m.dim / 1e6, 1),
                           "check_interval_s": settings.vector_copy_check_s,
                           "reconcile_interval_s": settings.reconcile_interval_s}
    # The previous format's copy: its open computes and records the block checksums.
    path = directory / MANIFEST_FILE
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**{k: v for k, v in data.items() if k != "vectors_crc"}, "version": 3}))
    t = time.perf_counter()
    VectorCopyWriter(settings, COLLECTION, MODEL, m.dim, fresh=False).close()
    out["open_version_3_s"] = round(time.perf_counter() - t, 3)
    upgraded = Manifest.read(directory)
    assert upgraded is not None and upgraded.blocks == m.blocks and upgraded.complete, "recorded, not rebuilt"
    t = time.perf_counter()
    writer = VectorCopyWriter(settings, COLLECTION, MODEL, m.dim, fresh=False)
    out["open_s"] = round(time.perf_counter() - t, 3)
    try:
        target = _Target(settings, writer)
        check = CopyCheck()
        rss = _kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        runs = [_cycle(check, target) for _ in range(cycles)]
        out["peak_added_mb"] = round((_kb("VmHWM") - rss) / 1024, 1)
        out["rss_before_check_mb"] = round(rss / 1024, 1)
        out["steps_per_cycle"] = runs[0][0]
        out["cycle_cpu_ms"] = [round(r[1] * 1000, 1) for r in runs]
        out["longest_step_ms"] = round(max(r[2] for r in runs) * 1000, 1)
        _drop_cache(directory)
        cold = _cycle(check, target)
        out["cold_cycle_cpu_ms"] = round(cold[1] * 1000, 1)
        out["cold_longest_step_ms"] = round(cold[2] * 1000, 1)
        per_hour = 3600 / settings.vector_copy_check_s + 3600 / settings.reconcile_interval_s
        cpu = float(np.median([r[1] for r in runs]))
        out["cycles_per_hour"] = round(per_hour)
        out["cpu_share_of_one_core_pct"] = round(100 * per_hour * cpu / 3600, 3)
        t = time.perf_counter()
        assert vectors_damage(directory, m) is None
        out["whole_check_status_verify_ms"] = round((time.perf_counter() - t) * 1000, 1)
        # Random bytes over one block in the middle: found by the worker's check.
        block = m.count // BLOCK // 2
        with open(directory / vectors_file(m.layout), "r+b") as fh:
            fh.seek(block * BLOCK * m.dim + 100)
            fh.write(os.urandom(4096))
        steps, found = 0, None
        check.soon()
        while check.due(target) and writer.complete:  # type: ignore[arg-type]
            check.run(target, None)  # type: ignore[arg-type]
            steps += 1
        found = not writer.complete  # discarded: the worker's fill rebuilds it from Chroma
        out["damage_found"] = found
        out["damage_found_after_steps"] = steps
    finally:
        writer.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=313_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--cycles", type=int, default=5)
    p.add_argument("--work", type=Path, default=None, help="where the copy is built (default .bench/copy-check-DOCS)")
    p.add_argument("--out", type=Path, default=Path(".bench/bench_copy_check.json"))
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # the fresh process
    args = p.parse_args(argv)
    work = args.work or Path(f".bench/copy-check-{args.docs}")
    if args.measure:
        print(json.dumps(measure(work, args.cycles)))
        return 0
    built = synthesise(Settings(data_dir=work / "data"), args.docs, args.dim)
    child = subprocess.run([sys.executable, "-m", "scripts.bench_copy_check", "--measure", "--work", str(work),
                            "--cycles", str(args.cycles)], capture_output=True, text=True, check=True)
    result: dict[str, Any] = {"synthesised_s": round(built, 1), **json.loads(child.stdout.splitlines()[-1])}
    report([(k, str(v)) for k, v in result.items()], result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
