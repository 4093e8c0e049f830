"""The one way events enter a session's log.

``append_events`` assigns seqs by bumping the session row's ``head`` while it
holds that row's lock (PostgreSQL: ``sessions_append``, one server-side
statement, see migration 0003) or the database's write lock (SQLite,
IMMEDIATE transactions) until commit, so seqs are handed out in commit order
with no holes and no duplicates however many writers race. A guarded append
(a run's) checks, after taking the lock, that its worker still holds the run.
Frames are published to the session's group only after the
transaction commits (``transaction.on_commit``), so no socket ever sees an
event that could still roll back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from sessions_app import fanout
from sessions_app.models import AgentSession, Event
from sessions_app.server import metrics, tracing
from sessions_app.wire import frames
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import RunAborted, SessionGone

_BUMP_HEAD = (
    "UPDATE sessions_app_agentsession SET head = head + %s, updated_at = %s "
    "WHERE id = %s RETURNING head"
)
# Checked in a statement of its own after the head bump took the session row's
# lock: under READ COMMITTED each statement sees what committed before it, so
# a cancel or takeover (which lock the session row first) is either seen here
# or waits for this append to commit. A read, not an update: the lease keeper
# renews leases, so appends and renewals never wait for each other's row locks.
_HELD = "SELECT 1 FROM sessions_app_run WHERE id = %s AND status = 'running' AND worker = %s"
_INSERT = (
    "INSERT INTO sessions_app_event (session_id, seq, kind, run_id, data, created_at) "
    "VALUES (%s, %s, %s, %s, %s, %s)"
)


@dataclass(frozen=True)
class NewEvent:
    kind: str
    data: dict[str, Any]
    run_id: str | None = None


@dataclass(frozen=True)
class RunGuard:
    """Only append while this worker still holds this run; renews its lease."""

    run_id: str
    worker: str


def append_event(
    session_id: str,
    kind: str,
    data: dict[str, Any] | None = None,
    run_id: str | None = None,
    *,
    guard: RunGuard | None = None,
) -> Event:
    """Append one event; see ``append_events``."""
    return append_events(session_id, [NewEvent(kind, data or {}, run_id)], guard=guard)[0]


def append_events(
    session_id: str, new: Sequence[NewEvent], *, guard: RunGuard | None = None
) -> list[Event]:
    """Append ``new`` to the session's log, in order, in one transaction.

    Joins the caller's transaction if there is one (the events then commit, and
    are published, with it). With ``guard``, raises ``RunAborted`` instead of
    appending when the run was cancelled or taken from this worker.
    """
    if not new:
        return []
    with tracing.span("log.append", **{"session.id": session_id, "events": len(new)}) as span:
        began = time.perf_counter()
        now = timezone.now()
        payloads = _payloads(new)
        if connection.vendor == "postgresql":
            # One round trip (see migration 0003); in autocommit it commits in it too.
            head = _append_postgresql(session_id, new, payloads, now, guard)
        else:
            head = _append_python(session_id, new, payloads, now, guard)
        metrics.APPEND_SECONDS.observe(time.perf_counter() - began)
        if span is not None:
            span.set_attribute("seq.last", head)
        return _appended(session_id, new, head, now)


Append = tuple[str, Sequence[NewEvent], "RunGuard | None"]


def append_batch(batch: Sequence[Append]) -> list[list[Event] | BaseException]:
    """Several appends, each as ``append_events`` does it (its own guard, its
    own seqs), committed together (``group_commit``). Returns, per append, its
    events or what befell it alone: ``RunAborted``, ``SessionGone``, or the
    ``TypeError``/``ValueError`` of data that is not JSON.

    On PostgreSQL one statement (migration 0005): outside a transaction it is
    its own commit, one round trip for the batch. Elsewhere one transaction.
    Either way a failing statement rolls back every append of the batch. Session
    rows are locked in ``batch``'s order: callers sort it, so batches never
    deadlock each other. Published on commit, like every append."""
    began = time.perf_counter()
    now = timezone.now()
    # Per append: its data as JSON, or why it has none (it then fails alone).
    results: list = []
    for _, new, _ in batch:
        try:
            results.append(_payloads(new))
        except (TypeError, ValueError) as exc:
            results.append(exc)
    todo = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
    if todo and connection.vendor == "postgresql":
        items = [(batch[i], results[i]) for i in todo]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT sessions_append_many(%s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    [session_id for (session_id, _, _), _ in items],
                    [guard.run_id if guard else None for (_, _, guard), _ in items],
                    [guard.worker if guard else None for (_, _, guard), _ in items],
                    [len(new) for (_, new, _), _ in items],
                    [item.kind for (_, new, _), _ in items for item in new],
                    [item.run_id for (_, new, _), _ in items for item in new],
                    [text for _, texts in items for text in texts],
                    now,
                ],
            )
            heads = cursor.fetchone()[0]
        for i, head in zip(todo, heads, strict=True):
            session_id, _, guard = batch[i]
            results[i] = _refusal(head, session_id, guard) or head
    elif todo:
        with transaction.atomic():
            for i in todo:
                session_id, new, guard = batch[i]
                try:  # a savepoint each: a refused append leaves nothing behind
                    results[i] = _append_python(session_id, new, results[i], now, guard)
                except (RunAborted, SessionGone) as exc:
                    results[i] = exc
    metrics.APPEND_SECONDS.observe(time.perf_counter() - began)
    # After the commit (outside the caller's transaction, if any): each
    # append's events are published at once.
    return [
        result if isinstance(result, BaseException) else _appended(session_id, new, result, now)
        for (session_id, new, _), result in zip(batch, results, strict=True)
    ]


def _payloads(new: Sequence[NewEvent]) -> list[str]:
    # No NaN or infinity (allow_nan): a tab's JSON.parse could not read it
    # back (wire.strict_json); such data fails its append like any not JSON.
    return [json.dumps(item.data, separators=(",", ":"), allow_nan=False) for item in new]


def _appended(session_id: str, new: Sequence[NewEvent], head: int, now) -> list[Event]:
    """The events an append stored (its last seq: ``head``), published on commit."""
    first = head - len(new) + 1
    events = [
        Event(
            session_id=session_id,
            seq=first + i,
            kind=item.kind,
            run_id=item.run_id,
            data=item.data,
            created_at=now,
        )
        for i, item in enumerate(new)
    ]
    built = [frames.event_frame(e) for e in events]
    # In the caller's transaction: published when it commits. Outside one the
    # append has committed already, and this publishes at once.
    # Robust: a publication that fails (the server's loop closing at shutdown)
    # is logged, and never makes an append that committed look failed.
    transaction.on_commit(lambda: _publish(session_id, built), robust=True)
    return events


def _refusal(head: int, session_id: str, guard: RunGuard | None) -> RunAborted | SessionGone | None:
    """What ``sessions_append``'s negative heads mean."""
    if head == -1:
        return SessionGone(session_id)
    if head == -2:
        return RunAborted(guard.run_id)
    return None


def _append_postgresql(session_id, new, payloads, now, guard) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sessions_append(%s, %s, %s, %s, %s, %s, %s)",
            [
                session_id,
                guard.run_id if guard else None,
                guard.worker if guard else None,
                [item.kind for item in new],
                [item.run_id for item in new],
                payloads,
                now,
            ],
        )
        head = cursor.fetchone()[0]
    refusal = _refusal(head, session_id, guard)
    if refusal is not None:
        raise refusal
    return head


def _append_python(session_id, new, payloads, now, guard) -> int:
    stamp = connection.ops.adapt_datetimefield_value(now)
    # The session row first, the run second: the same lock order as every run
    # transition, so a cancel and a streaming worker never deadlock.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_BUMP_HEAD, [len(new), stamp, session_id])
        row = cursor.fetchone()
        if row is None:
            raise SessionGone(session_id)
        if guard is not None:
            cursor.execute(_HELD, [guard.run_id, guard.worker])
            if cursor.fetchone() is None:
                raise RunAborted(guard.run_id)
        first = row[0] - len(new) + 1
        # Raw rows: one statement per batch, no model instances to build.
        cursor.executemany(
            _INSERT,
            [
                (session_id, first + i, item.kind, item.run_id, payload, stamp)
                for i, (item, payload) in enumerate(zip(new, payloads, strict=True))
            ],
        )
    return row[0]


def _publish(session_id: str, built: Iterable[dict[str, Any]]) -> None:
    built = list(built)
    with tracing.span("fanout.publish", **{"session.id": session_id, "events": len(built)}):
        for frame in built:
            fanout.publish_event(session_id, frame)


def check_resume_cursor(
    row: dict[str, Any], after: int, epoch: str | None, compact: bool = False
) -> None:
    """The log's rules for resuming at ``after`` (``row``: the session's epoch,
    head, earliest and compacted_through), checked in the protocol's order;
    ``protocol.Rejection`` if one fails. A client that compacts replays across
    purged superseded deltas; one that does not cannot, and for it the log
    is complete only after ``compacted_through``."""
    if after > 0 and epoch != row["epoch"]:
        raise p.Rejection(
            p.R_EPOCH_MISMATCH,
            "the session's log was rebuilt: drop the cached transcript and resume from 0",
        )
    if after > row["head"]:
        raise p.Rejection(
            p.R_CURSOR_AHEAD, "the cursor is past the end of the log", head=row["head"]
        )
    earliest = row["earliest"]
    if not compact:
        earliest = max(earliest, row.get("compacted_through", 0) + 1)
    if after + 1 < earliest:
        # The epoch too: the client may rebuild from ``earliest - 1`` at once.
        raise p.Rejection(
            p.R_CURSOR_EXPIRED,
            "events after this cursor were purged",
            earliest=earliest,
            epoch=row["epoch"],
        )


class PurgeError(ValueError):
    """A purge that cannot be done as asked (the message says why)."""


def purge_events(session_id: str, *, before: int | None = None, keep: int | None = None):
    """Delete the session's events with ``seq < before`` (or all but the newest
    ``keep``) and raise ``earliest``; returns ``(deleted, earliest)``.

    Under the session's lock, like every append: a resume after this sees the new
    ``earliest`` (``cursor_expired`` for a cursor before it), and a replay under
    way that meets the missing range closes 1013 instead of skipping it."""
    with transaction.atomic():
        session = AgentSession.objects.select_for_update().filter(id=session_id).first()
        if session is None:
            raise PurgeError(f"no session {session_id}")
        if keep is not None:
            if keep < 1:
                raise PurgeError("--keep must be at least 1")
            before = session.head - keep + 1
        if before is None or before < 1 or before > session.head:
            raise PurgeError(f"--before must be between 1 and head ({session.head})")
        if before <= session.earliest:
            return 0, session.earliest
        deleted, _ = Event.objects.filter(session=session, seq__lt=before).delete()
        AgentSession.objects.filter(id=session.id).update(earliest=before)
    return deleted, before


# A replay page as ready-to-send text: one indexed range read, no model
# instances, no JSON parse and re-serialisation of each event's data.
_FRAMES = (
    "SELECT seq, kind, run_id, {ts}, {data} FROM sessions_app_event "
    "WHERE session_id = %s AND seq > %s AND seq <= %s{skeleton} ORDER BY seq LIMIT %s"
)
_TS = {
    "postgresql": """to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')""",
    "sqlite": "created_at",
}
_DATA = {"postgresql": "data::text", "sqlite": "data"}
# The skeleton's predicate is the partial index's (compaction.py), so the
# database reads it through that index.
_FRAMES_SQL = {
    (vendor, skeleton): _FRAMES.format(
        ts=_TS[vendor],
        data=_DATA[vendor],
        skeleton=" AND NOT (kind = 'assistant.delta')" if skeleton else "",
    )
    for vendor in _TS
    for skeleton in (False, True)
}


def read_frames(
    session_id: str, after: int, upto: int, limit: int, skeleton: bool = False
) -> list[tuple[str, int]]:
    """The ``event`` frames' texts (and seqs) of ``after < seq <= upto``, at most
    ``limit``, in order: what ``frames.event_frame`` gives for each, as wire text.
    ``skeleton``: only the events that are not deltas."""
    sql = _FRAMES_SQL.get((connection.vendor, skeleton))
    if sql is None:  # another database: through the ORM
        qs = Event.objects.filter(session_id=session_id, seq__gt=after, seq__lte=upto)
        if skeleton:
            qs = qs.exclude(kind=p.K_ASSISTANT_DELTA)
        events = list(qs.order_by("seq")[:limit])
        return [(frames.dumps(frames.event_frame(e)), e.seq) for e in events]
    with connection.cursor() as cursor:
        cursor.execute(sql, [session_id, after, upto, limit])
        rows = cursor.fetchall()
    # sqlite's driver parses the timestamp column: a naive datetime, in UTC.
    return frames.event_texts(session_id, rows, naive_utc=connection.vendor == "sqlite")


def read_events(session_id: str, after: int, upto: int | None = None, limit: int | None = None):
    """Events with ``after < seq <= upto``, in order (an index range scan)."""
    qs = Event.objects.filter(session_id=session_id, seq__gt=after)
    if upto is not None:
        qs = qs.filter(seq__lte=upto)
    qs = qs.order_by("seq")
    if limit is not None:
        qs = qs[:limit]
    return list(qs)
