"""Group commit: the appends of a process's concurrent runs, committed together.

A streaming run appends one event per token, and each append outside a
transaction is its own durable commit: a WAL flush on PostgreSQL that the run
thread waits for before its next token. Fifty runs in one worker asked for
1,650 flushes a second and spent most of their time queued behind each other's.

Here the run threads of a process hand their appends to whichever of them is
committing: the first to arrive leads, appends everything waiting together
(``events.append_batch``: on PostgreSQL one statement and its own commit, one
round trip; each request still guarded and given its own seqs), and wakes the
others. Whatever arrived meanwhile is led by the first of those threads, so no
thread works for the others for longer than one batch, and a run alone commits
as before, at once, with no added wait.

What stays true: an event is published only after the commit that made it
durable (``on_commit``); a refused request (``RunAborted``, ``SessionGone``)
fails alone; a statement that fails for one request's data rolls the batch
back and every request is retried alone, by its own thread on its own
connection, so one bad request fails only itself; so does a statement the
server refused for its locks (a deadlock with an admin's bulk delete, a lock
timeout). A lost connection is not retried (whether the batch committed is
unknown, as it would be for an append of its own): every request of that
batch gets the error. Session rows are locked in one order (by id) in every
batch, so two processes' batches never deadlock each other.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from django.conf import settings
from django.db import DatabaseError, InterfaceError, transaction

from sessions_app.log.events import Event, NewEvent, RunGuard, append_batch, append_events
from sessions_app.server import metrics, tracing

# A batch holds its sessions' row locks until it commits: bounded, so a cancel
# or a user's message never waits behind more than this many appends.
MAX_BATCH = 200


class AppendRequest:
    __slots__ = ("session_id", "new", "guard", "wake", "finished", "retry", "result", "error")

    def __init__(self, session_id: str, new: Sequence[NewEvent], guard: RunGuard | None):
        self.session_id = session_id
        self.new = new
        self.guard = guard
        self.wake = threading.Event()
        self.finished = False
        self.retry = False
        self.result: list[Event] | None = None
        self.error: BaseException | None = None


class GroupCommitter:
    """Commits the appends of many threads of one process together, a batch at a time."""

    def __init__(self, max_batch: int = MAX_BATCH):
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._pending: list[AppendRequest] = []
        self._leading = False
        # Counters for tests and benchmarks: batches and appends committed, and
        # appends handed back to be retried alone.
        self.batches = 0
        self.appends = 0
        self.retried = 0

    def append(
        self, session_id: str, new: Sequence[NewEvent], *, guard: RunGuard | None = None
    ) -> list[Event]:
        """``append_events(session_id, new, guard=guard)``, committed with whatever
        else this process's threads are appending now. Returns once committed."""
        request = AppendRequest(session_id, new, guard)
        with self._lock:
            self._pending.append(request)
            lead = not self._leading
            self._leading = True
        if not lead:
            request.wake.wait()
        if not request.finished:  # first in, or handed the lead by a finished batch
            self._lead()
        if request.retry:
            return append_events(session_id, new, guard=guard)
        if request.error is not None:
            raise request.error
        return request.result

    def _lead(self) -> None:
        with self._lock:
            batch = self._pending[: self.max_batch]
            del self._pending[: self.max_batch]
        self.lead_batch(batch)

    def lead_batch(self, batch: list[AppendRequest]) -> None:
        """Commit ``batch`` as one transaction, as the leading thread does (a
        failure marks every request of it to retry alone), then wake its
        threads and the next batch's leader."""
        try:
            self._commit(batch)
        except BaseException as exc:  # noqa: BLE001 (handed to every waiting thread)
            for request in batch:
                if request.result is None and request.error is None:
                    request.error = exc
        finally:
            with self._lock:
                following = self._pending[0] if self._pending else None
                self._leading = following is not None
            for request in batch:
                request.finished = True
                request.wake.set()
            if following is not None:
                following.wake.set()  # it leads the next batch

    def _commit(self, batch: list[AppendRequest]) -> None:
        # One lock order for every batch: by session id, each session's
        # requests in arrival order (sorted is stable).
        ordered = sorted(batch, key=lambda r: r.session_id)
        try:
            # Under the leading run's trace: the commit its appends waited on.
            with tracing.span("log.group_commit", appends=len(ordered)):
                results = append_batch([(r.session_id, r.new, r.guard) for r in ordered])
        except DatabaseError as exc:
            if _connection_lost(exc):
                # Whether the batch committed is unknown, as for an append of
                # its own: every request gets the error, none is retried (that
                # could log an event twice).
                raise
            # The server refused the statement (one request's data, a deadlock
            # or lock timeout with another transaction): nothing was committed.
            for request in ordered:  # each appends alone, on its own connection
                request.retry = True
            self.retried += len(ordered)
            metrics.GROUP_COMMIT_RETRIED.inc(len(ordered))
            return
        for request, result in zip(ordered, results, strict=True):
            if isinstance(result, BaseException):  # RunAborted, SessionGone
                request.error = result
            else:
                request.result = result
        self.batches += 1
        self.appends += len(ordered)
        metrics.GROUP_COMMIT_APPENDS.observe(len(ordered))


def _connection_lost(exc: DatabaseError) -> bool:
    """Did ``exc`` end the connection (the statement's fate unknown), rather than
    the server refusing the statement (rolled back, nothing committed)?"""
    if isinstance(exc, InterfaceError):
        return True
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate is None:
        # No answer from a server: on PostgreSQL the connection failed; SQLite
        # gives no codes, and its errors (a locked database) commit nothing.
        return transaction.get_connection().vendor == "postgresql"
    # Class 08: connection exceptions; 57P0x: the server is shutting down.
    return sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03")


committer = GroupCommitter()


def append_event(
    session_id: str, kind: str, data: dict, run_id: str | None, *, guard: RunGuard | None
) -> Event:
    """A run's append of one event, group-committed when ``AGENT_GROUP_COMMIT``
    is on (it is by default), otherwise an append of its own."""
    new = [NewEvent(kind, data, run_id)]
    if settings.AGENT_GROUP_COMMIT and not transaction.get_connection().in_atomic_block:
        return committer.append(session_id, new, guard=guard)[0]
    return append_events(session_id, new, guard=guard)[0]
