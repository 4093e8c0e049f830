"""heap.py: a started process keeps its start-up objects out of collections."""

from __future__ import annotations

import gc

from sessions_app.heap import freeze_startup_objects


def test_freezing_moves_live_objects_out_of_collections():
    """After the freeze the objects alive now are in the permanent generation,
    and collections still work for what comes after."""
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > 1000
        assert gc.collect() >= 0
    finally:
        gc.unfreeze()
