"""Giving freed memory back to the system (``worker.process.memory``): when the worker trims."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from memsync.chroma import collections as stores
from memsync.config.settings import Settings
from memsync.worker.pipeline.sink import ChromaSink
from memsync.worker.process import memory
from tests.conftest import free_port, held_server


class TestTrimmer:
    def test_trims_after_work_at_most_every_interval(self) -> None:
        now = [1000.0]
        trimmer = memory.Trimmer(clock=lambda: now[0])
        assert not trimmer.maybe()  # nothing was done
        trimmer.worked()
        assert trimmer.maybe() is memory.trim()  # True on glibc
        trimmer.worked()
        now[0] += memory.TRIM_EVERY_S / 2
        assert not trimmer.maybe()  # too soon: kept for later
        now[0] += memory.TRIM_EVERY_S
        assert trimmer.maybe() is memory.trim()
        assert not trimmer.maybe()


@pytest.mark.slow
def test_paging_through_a_store_over_http_leaves_no_response_for_the_collector(tmp_path: Path) -> None:
    # A real `chroma run`: each page's HTTP response (httpx keeps it and its stream in a reference
    # cycle) must be freed when the page is read, not at the collector's next full pass.
    import httpx

    s = Settings(db=tmp_path / "claude-mem.db", data_dir=tmp_path / "data", chroma_mode="managed",
                 chroma_port=free_port())
    with held_server(s), stores.connect(s) as handle:
        collection = handle.client.get_or_create_collection("paged", embedding_function=None)
        collection.add(ids=[f"prompt_{i}" for i in range(60)], embeddings=[[float(i), 1.0] for i in range(60)],
                       metadatas=[{"content_hash": f"h{i}"} for i in range(60)])
        sink = ChromaSink(collection, 1000)

        def responses() -> int:
            return sum(isinstance(o, httpx.Response) for o in gc.get_objects())

        gc.collect()
        gc.disable()  # only what the paging itself frees counts
        try:
            before = responses()
            assert sum(len(p["ids"]) for p in sink.pages(["metadatas"], page=7)) == 60  # nine pages
            after = responses()
            collection.get(limit=7, include=["metadatas"])  # the same call without the release
            unreleased = responses()
        finally:
            gc.enable()
        assert after <= before, (before, after)
        assert unreleased > after  # the cycle is real: a plain call leaves its response behind
