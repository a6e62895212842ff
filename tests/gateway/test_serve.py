"""A worker process tunes its garbage collector once it has loaded everything."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.serve import GC_YOUNG_THRESHOLD, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_tune_gc_freezes_what_is_loaded_and_raises_the_young_threshold(restored_gc: None) -> None:
    loaded = [[n] for n in range(1000)]  # tracked by the collector
    tune_gc()
    assert gc.get_freeze_count() >= len(loaded)
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
