"""heap.py: a started process keeps its start-up objects out of collections."""

from __future__ import annotations

import gc

from sessions_app.server.heap import freeze_startup_objects


def test_freezing_moves_live_objects_out_of_collections():
    """After the freeze an object alive before it is no longer among those the
    collector walks, one made after it is, and garbage made after it (a
    cycle) is still collected."""
    import weakref

    class Node:
        pass

    before = Node()
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > 1000
        walked = gc.get_objects()
        assert not any(o is before for o in walked)
        after = Node()
        assert any(o is after for o in gc.get_objects())
        cycle = Node()
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()
