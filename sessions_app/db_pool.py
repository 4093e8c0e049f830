"""The sockets' database calls: on a thread pool, with Django's connection
housekeeping around each, and the health check only where it can help.

Each call runs on a thread of asgiref's pool (``thread_sensitive=False``), not
on Channels' one shared database thread: every call is self-contained, and
hundreds of sockets resuming at once must not queue behind one thread.

Channels' ``database_sync_to_async`` runs ``close_old_connections`` before
and after each call. With ``CONN_HEALTH_CHECKS`` on (this project's settings)
that makes the first query of every call a ``SELECT 1`` first: on PostgreSQL
one more round trip for each call of a socket (0.1 ms of a 0.7 ms resume
check on the benchmark machine). Here a connection whose thread finished a
call less than ``HEALTHY_SECONDS`` ago is taken as healthy; one idle for
longer is checked as before, and one that raised a database error is checked
(and replaced if broken) by Django's own ``close_old_connections``. The cost:
if the database restarts within that second, the first call on each thread
fails instead of reconnecting (a socket closes 1011, retryable, and resumes),
and Django replaces the connection before that thread's next call.
"""

from __future__ import annotations

import threading
import time

from asgiref.sync import SyncToAsync
from django.db import close_old_connections, connections

HEALTHY_SECONDS = 1.0

_last_call = threading.local()


def _skip_recent_health_checks() -> None:
    ended = getattr(_last_call, "ended", None)
    if ended is None or time.monotonic() - ended >= HEALTHY_SECONDS:
        return
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.errors_occurred:
            conn.health_check_done = True


class PoolCall(SyncToAsync):
    """``channels.db.database_sync_to_async(func, thread_sensitive=False)``,
    with the health check of a recently used connection skipped."""

    def __init__(self, func, executor=None):
        super().__init__(func, thread_sensitive=False, executor=executor)

    def thread_handler(self, loop, *args, **kwargs):
        close_old_connections()
        _skip_recent_health_checks()
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            close_old_connections()
            _last_call.ended = time.monotonic()


def in_db_pool(func, executor=None):
    """``func`` as a coroutine function that runs it on the pool (see above;
    ``executor``: another pool than the event loop's default)."""
    return PoolCall(func, executor)
