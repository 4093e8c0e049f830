"""The sockets' database calls: on a thread pool, with Django's connection
housekeeping around each, and for reads the health check only where it helps.

Each call runs on a thread of asgiref's pool (``thread_sensitive=False``), not
on Channels' one shared database thread: every call is self-contained, and
hundreds of sockets resuming at once must not queue behind one thread.

Channels' ``database_sync_to_async`` runs ``close_old_connections`` before
and after each call. With ``CONN_HEALTH_CHECKS`` on (this project's settings)
that makes the first query of every call a ``SELECT 1`` first: on PostgreSQL
one more round trip for each call of a socket (0.1 ms of a 0.7 ms resume
check on the benchmark machine; the 2,000-socket storm, docs/benchmarks.md).

A call that can run twice (``reading_in_db_pool``: it reads, or writes only
what a second run writes the same, as the lookup's flush of a stale session)
skips that check when its thread finished a call less than ``HEALTHY_SECONDS``
ago; if the connection it took on trust turns out to be broken (the database
restarted, a pooler dropped it), it runs once more on a new one, and the
socket sees no error. Other calls keep Django's check: repeating one could
write twice.
"""

from __future__ import annotations

import functools
import threading
import time

from asgiref.sync import SyncToAsync
from django.db import InterfaceError, OperationalError, close_old_connections, connections

HEALTHY_SECONDS = 1.0

_thread = threading.local()


def _trust_recent_connections() -> bool:
    """Mark this thread's connections checked if its last call ended a moment
    ago; whether any was (so a failure may be the trust's fault)."""
    ended = getattr(_thread, "ended", None)
    if ended is None or time.monotonic() - ended >= HEALTHY_SECONDS:
        return False
    trusted = False
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.errors_occurred and conn.health_check_enabled:
            conn.health_check_done = True
            trusted = True
    return trusted


def _again_if_trusted_wrongly(func):
    """``func`` (which may run twice), run once more on a new connection if it
    failed on a broken one that was taken as healthy without a check."""

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError):
            if not getattr(_thread, "trusted", False):
                raise
            # Only for a connection that is broken: a timeout or a lock on a
            # sound one is the read's own failure, not the trust's.
            broken = [
                conn
                for conn in connections.all(initialized_only=True)
                if conn.errors_occurred and (conn.connection is None or not conn.is_usable())
            ]
            if not broken:
                raise
            _thread.trusted = False
            for conn in broken:
                conn.close()
            return func(*args, **kwargs)

    return call


class PoolCall(SyncToAsync):
    """``channels.db.database_sync_to_async(func, thread_sensitive=False)``;
    with ``trust_recent``, the health check of a recently used connection
    skipped (for a ``func`` that copes, see ``_again_if_trusted_wrongly``)."""

    def __init__(self, func, executor=None, *, trust_recent: bool = False):
        super().__init__(func, thread_sensitive=False, executor=executor)
        self.trust_recent = trust_recent

    def thread_handler(self, loop, *args, **kwargs):
        close_old_connections()
        _thread.trusted = self.trust_recent and _trust_recent_connections()
        try:
            return super().thread_handler(loop, *args, **kwargs)
        finally:
            _thread.trusted = False
            close_old_connections()
            _thread.ended = time.monotonic()


def in_db_pool(func, executor=None):
    """``func`` as a coroutine function that runs it on the pool, with
    Django's checks (``executor``: another pool than the loop's default)."""
    return PoolCall(func, executor)


def reading_in_db_pool(func, executor=None):
    """As ``in_db_pool``, for a ``func`` that may run twice (it reads): a
    connection used a moment ago is not checked first (see above)."""
    return PoolCall(_again_if_trusted_wrongly(func), executor, trust_recent=True)
