"""The vector copy's row lookup (search.vectorcopy.VectorCopy.row_vectors): every live document of
each row, also after the copy grows (its cached key order is extended, not rebuilt)."""

from __future__ import annotations

import numpy as np

from memsync.config.claude_mem.schema import KINDS, Kind
from memsync.config.formats.vector_copy import ENTRY, Manifest
from memsync.search.vectorcopy import VectorCopy


def entries(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    e = np.zeros(n, ENTRY)
    e["kind"] = rng.integers(0, 3, n)
    e["row"] = rng.integers(0, 50, n)
    e["live"] = rng.random(n) > 0.2
    e["scale"] = rng.random(n).astype(np.float32) + 0.5
    return e, rng.integers(-127, 128, (n, 4)).astype(np.int8)


def brute(e: np.ndarray, v: np.ndarray, count: int, key: tuple[Kind, int]) -> np.ndarray:
    pos = np.flatnonzero((e["kind"][:count] == KINDS.index(key[0])) & (e["row"][:count] == key[1])
                         & (e["live"][:count] == 1))
    return v[pos].astype(np.float32) * e["scale"][pos][:, None]


def test_row_vectors_match_a_scan_before_and_after_the_copy_grows(tmp_path: object) -> None:
    e, v = entries(3000, 7)
    wanted = [(k, r) for k in KINDS for r in range(0, 55)]
    for count in (2000, 2600, 3000):  # the same directory: the second and third extend the cache
        copy = VectorCopy(Manifest("m", 4, count=count, complete=True), v[:count], e[:count], directory=str(tmp_path))
        got = copy.row_vectors(wanted)
        for key in wanted:
            ref = brute(e, v, count, key)
            if len(ref) == 0:
                assert key not in got
            else:
                assert np.array_equal(got[key], ref), (count, key)


def test_an_older_view_and_a_refilled_copy_get_their_own_rows(tmp_path: object) -> None:
    e, v = entries(3000, 11)
    big = VectorCopy(Manifest("m", 4, count=3000, complete=True), v, e, directory=str(tmp_path))
    small = VectorCopy(Manifest("m", 4, count=1000, complete=True), v[:1000], e[:1000], directory=str(tmp_path))
    wanted = [(k, r) for k in KINDS for r in range(50)]
    big.row_vectors(wanted)  # the cache now holds 3,000 entries
    for key, got in small.row_vectors(wanted).items():  # an older view never sees newer entries
        assert np.array_equal(got, brute(e, v, 1000, key))
    # The copy dropped and refilled in the same directory with other rows, grown past the cache.
    e2, v2 = entries(3500, 12)
    refilled = VectorCopy(Manifest("m", 4, count=3500, complete=True), v2, e2, directory=str(tmp_path))
    got = refilled.row_vectors(wanted)
    for key in wanted:
        ref = brute(e2, v2, 3500, key)
        assert (key not in got) if len(ref) == 0 else np.array_equal(got[key], ref)
