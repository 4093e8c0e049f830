"""Waiting for a state that no frame, DOM attribute or log line announces (a
database row): ``wait_for`` in sync code, ``wait_until`` in async code, each
reading again every ``POLL_SECONDS``. Everything a frame or a line announces
is waited for on that instead (``tests.harness.WsClient.wait``, ``Process``)."""

from __future__ import annotations

import asyncio
import threading
import time

POLL_SECONDS = 0.05  # for states only a database row shows (no frame announces them)


def poll_pause() -> None:
    """One pause between two reads of a database state that no frame announces."""
    threading.Event().wait(POLL_SECONDS)


def wait_for(fn, timeout: float = 40.0):
    """Wait until ``fn()`` gives a true value (a database state no frame
    announces), and return it."""
    deadline = time.monotonic() + timeout
    while not (found := fn()):
        assert time.monotonic() < deadline, "state not reached"
        poll_pause()
    return found


async def wait_until(fetch, timeout: float = 10.0):
    """Wait for ``fetch()`` (run in a thread: it may query the database) to be truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await asyncio.to_thread(fetch)
        if value:
            return value
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(POLL_SECONDS)  # sleep-ok: a database state no frame announces
