"""A stopped server exits, even when threads it cannot stop are left.

After daphne's reactor stops, Python joins every non-daemon thread before the
process ends. A request running Django's sync middleware on an asgiref thread
waits for the event loop to take its answer (``AsyncToSync``); once the loop
has stopped it waits forever, and so would the process, until the process
manager kills it (systemd's ``TimeoutStopSec``, 90 s by default). The chaos
suite's workers phase found it: SIGTERM under REST requests in flight.

``exit_after`` starts a daemon thread that waits for the threads to end, and
past the bound says which are left and ends the process with status 0. Every
run the process executed was handed back before (``executor.abort_all``), and
what was still mid-step is taken over from its last checkpoint at the next
start, so nothing durable depends on those threads.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

log = logging.getLogger(__name__)

# How long the threads left after the reactor stopped may take to end.
EXIT_GRACE_SECONDS = 5.0


def _blocking() -> list[threading.Thread]:
    me = threading.current_thread()
    return [
        t
        for t in threading.enumerate()
        if t is not me and not t.daemon and t is not threading.main_thread()
    ]


def exit_after(grace: float = EXIT_GRACE_SECONDS) -> threading.Thread:
    """Watch the threads that would keep the stopped process alive."""

    def watch() -> None:
        deadline = time.monotonic() + grace
        while _blocking() and time.monotonic() < deadline:
            time.sleep(0.1)  # sleep-ok: a bounded wait for threads no event announces
        left = _blocking()
        if not left:
            return
        log.warning(
            "stopped, but %d thread(s) did not end within %g s (%s): exiting anyway",
            len(left),
            grace,
            ", ".join(sorted({t.name.rsplit("_", 1)[0] for t in left})),
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    thread = threading.Thread(target=watch, name="exit-watch", daemon=True)
    thread.start()
    return thread
