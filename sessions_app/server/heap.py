"""The garbage collector of a long-running process (daphne, run workers).

A full (generation 2) collection walks every tracked object of the process,
and after start-up most of them are Django's, the app's and the libraries'
own: modules, classes, URL patterns, model metadata, none of which ever
becomes garbage. In the 50-run benchmark (``bench/concurrent_runs.py``) each
daphne and worker made such a collection every few seconds, 30-75 ms each
(measured with ``gc.callbacks``), and the clients saw ~110 ms spikes in the
p99 of append-to-receipt latency in those seconds. ``gc.freeze()`` once a
process has started moves those ~110,000 objects out of the collector's
sight: the full collections left in the same benchmark took at most 18 ms.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_startup_objects() -> None:
    """Collect once, then keep everything alive now out of later collections
    (call once a process has finished starting)."""
    gc.collect()
    gc.freeze()
    log.info("heap: %d start-up objects frozen out of garbage collection", gc.get_freeze_count())
