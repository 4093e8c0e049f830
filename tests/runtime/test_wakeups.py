"""Waking a thread that waits for a gate (sessions_app/runtime/wakeups.py):
the decision's commit wakes it, in this process and (PostgreSQL's NOTIFY)
from another connection; without one it waits its whole timeout."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from sessions_app.runtime import wakeups

pytestmark = pytest.mark.django_db(transaction=True)

# Far past the 2 s a waiting question re-reads its row: a wait that ends well
# before it was woken, not timed out.
LONG = 30.0


def decide_later(approval_id: str, *, in_process: bool) -> threading.Thread:
    """Commit a wake-up for the gate from another thread (its own database
    connection); with ``in_process`` False, only NOTIFY can carry it."""

    def decide() -> None:
        try:
            with transaction.atomic():
                if in_process:
                    wakeups.wake_on_commit(approval_id)
                else:
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT pg_notify(%s, %s)", [wakeups.CHANNEL, approval_id])
        finally:
            connections.close_all()

    thread = threading.Thread(target=decide)
    return thread


def test_a_commit_wakes_the_waiting_thread_of_this_process():
    """The deciding transaction's commit ends the wait at once."""
    with wakeups.listening("ap_here") as waiter:
        thread = decide_later("ap_here", in_process=True)
        started = time.monotonic()
        thread.start()
        waiter.wait(LONG)
        assert time.monotonic() - started < LONG / 3
        thread.join()


def test_a_rollback_wakes_nobody():
    """A decision that rolls back never happened: the wait goes on to its end."""
    with wakeups.listening("ap_rolled") as waiter:
        with pytest.raises(RuntimeError), transaction.atomic():
            wakeups.wake_on_commit("ap_rolled")
            raise RuntimeError("rolled back")
        started = time.monotonic()
        waiter.wait(0.3)
        assert time.monotonic() - started >= 0.3


def test_notify_wakes_a_waiter_listening_on_another_connection():
    """PostgreSQL: the decision made by another process's connection (NOTIFY
    in its transaction) reaches the worker's LISTEN, and only its gate's."""
    if connection.vendor != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's: the production profile runs this")
    with wakeups.listening("ap_there") as waiter:
        assert waiter.listener is not None
        decide_later("ap_other", in_process=False).start()
        thread = decide_later("ap_there", in_process=False)
        started = time.monotonic()
        thread.start()
        waiter.wait(LONG)
        assert time.monotonic() - started < LONG / 3
        thread.join()


def test_behind_a_transaction_pooler_a_waiter_does_not_listen(monkeypatch):
    """PostgreSQL behind a transaction-mode pooler (DATABASE_POOL_MODE=transaction,
    Django's DISABLE_SERVER_SIDE_CURSORS): no LISTEN, whose connection the pooler
    would hand to others between statements; the waiter is woken by its re-read."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN is PostgreSQL's: the production profile runs this")
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    with wakeups.listening("ap_pooled") as waiter:
        assert waiter.listener is None
