"""Waking a thread that waits for a gate's decision (``runtime.questions``).

A question (an MCP server asking the user during a tool call) is a gate
whose run does not park: the worker's thread waits in the tool call, so the
decision, made by a daphne process or the admin, must reach that thread.
``wake_on_commit`` is called in the deciding transaction; ``wait`` returns
once it commits, or after ``timeout`` (the waiter reads the gate's row
again either way: a wake-up only says "look now", and a lost one costs at
most ``timeout``).

- In this process (the embedded profile, or a decision made by the worker
  itself, a cancel on its way out): a ``threading.Event`` per gate.
- Across processes, on PostgreSQL: ``NOTIFY`` in the deciding transaction
  (delivered by the database only if it commits), ``LISTEN`` on a
  connection of the waiter's own. SQLite serves one process: the events do.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager, suppress

from django.db import connection, transaction

log = logging.getLogger(__name__)

CHANNEL = "agent_gate_decided"

_events: dict[str, threading.Event] = {}
_lock = threading.Lock()


def wake_on_commit(approval_id: str) -> None:
    """Wake whoever waits for this gate once the current transaction commits."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, approval_id])
    transaction.on_commit(lambda: wake_now(approval_id))


def wake_now(approval_id: str) -> None:
    """Wake a thread of this process that waits for this gate."""
    with _lock:
        event = _events.get(approval_id)
    if event is not None:
        event.set()


class Waiter:
    """One thread's wait for one gate (``listening``)."""

    def __init__(self, approval_id: str, listener) -> None:
        self.approval_id = approval_id
        self.event = threading.Event()
        self.listener = listener

    def wait(self, timeout: float) -> None:
        """Until the gate is decided somewhere, or ``timeout`` seconds."""
        if self.listener is None:
            self.event.wait(timeout)
            self.event.clear()
            return
        deadline = time.monotonic() + timeout
        while not self.event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                for note in self.listener.notifies(timeout=min(left, 0.5), stop_after=1):
                    if note.payload == self.approval_id:
                        return
            except Exception as exc:  # a dropped connection: the timeout still holds
                log.warning("listening for gate %s failed: %s", self.approval_id, exc)
                self.listener = None
                self.event.wait(max(deadline - time.monotonic(), 0))
                break
        self.event.clear()


@contextmanager
def listening(approval_id: str):
    """A ``Waiter`` for the gate, listening from before the caller first reads
    its row (a decision between the read and the wait is not missed)."""
    listener = _listen() if connection.vendor == "postgresql" else None
    waiter = Waiter(approval_id, listener)
    with _lock:
        _events[approval_id] = waiter.event
    try:
        yield waiter
    finally:
        with _lock:
            _events.pop(approval_id, None)
        if listener is not None:
            with suppress(Exception):
                listener.close()


def _listen():
    """A connection of its own that listens (Django's may be in a transaction)."""
    import psycopg

    if connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        # A transaction-mode pooler (DATABASE_POOL_MODE): a LISTEN would hold
        # for one statement's transaction only.
        return None
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    try:
        listener = psycopg.connect(**{"connect_timeout": 5, **params}, autocommit=True)
        listener.execute(f"LISTEN {CHANNEL}")
    except Exception as exc:
        log.warning("cannot LISTEN for gate decisions (waking by time only): %s", exc)
        return None
    return listener
