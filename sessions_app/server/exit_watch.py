"""A stopped server exits, even when threads it cannot stop are left.

After daphne's reactor stops, Python joins every non-daemon thread before the
process ends. A request running Django's sync middleware on an asgiref thread
waits for the event loop to take its answer (``AsyncToSync``); once the loop
has stopped it waits forever, and so would the process, until the process
manager kills it (systemd's ``TimeoutStopSec``, 90 s by default). The chaos
suite's workers phase found it: SIGTERM under REST requests in flight.

``exit_after`` starts a daemon thread that waits for the threads to end, and
past the bound says which are left and ends the process with status 0. The
runs this process executes (embedded) were asked to stop
(``executor.abort_all``): each hands itself back at its next step, and a
tool still running logs its result first, so the run threads get longer
(``AGENT_WORKER_GRACE_SECONDS``) than the request threads. A run still
mid-step after that is taken over from its last checkpoint at the next start.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

log = logging.getLogger(__name__)

# How long the threads left after the reactor stopped may take to end (run
# threads: AGENT_WORKER_GRACE_SECONDS).
EXIT_GRACE_SECONDS = 5.0
RUN_THREAD_PREFIX = "run_"  # the run pool's threads (runtime.pool)


def _blocking() -> list[threading.Thread]:
    me = threading.current_thread()
    return [
        t
        for t in threading.enumerate()
        if t is not me and not t.daemon and t is not threading.main_thread()
    ]


def _runs_left() -> bool:
    return any(t.name.startswith(RUN_THREAD_PREFIX) for t in _blocking())


def exit_after(
    grace: float = EXIT_GRACE_SECONDS, runs_grace: float | None = None
) -> threading.Thread:
    """Watch the threads that would keep the stopped process alive."""
    if runs_grace is None:
        from django.conf import settings

        runs_grace = float(settings.AGENT_WORKER_GRACE_SECONDS)

    def watch() -> None:
        began = time.monotonic()
        while _blocking() and time.monotonic() < began + grace:
            time.sleep(0.1)  # sleep-ok: a bounded wait for threads no event announces
        while _runs_left() and time.monotonic() < began + max(grace, runs_grace):
            time.sleep(0.1)  # sleep-ok: the same, for the runs handing themselves back
        left = _blocking()
        if not left:
            return
        log.warning(
            "stopped, but %d thread(s) did not end within %g s (%s): exiting anyway",
            len(left),
            grace,
            ", ".join(sorted({t.name.rsplit("_", 1)[0] for t in left})),
        )
        logging.shutdown()  # every handler flushed, not only the root's
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    thread = threading.Thread(target=watch, name="exit-watch", daemon=True)
    thread.start()
    return thread
