"""Compaction: the stretches of a log that a finished text makes superfluous.

A run streams its text as ``assistant.delta`` events and then states it whole
in ``assistant.message``. From then on those deltas are *superseded*: a client
that applies the message shows the same text without them. Two things use that:

- **Compaction on read** (the handshake feature ``compact``): a replay sends
  each superseded stretch as one ``compacted`` frame that moves the client's
  cursor over it, instead of every delta. A run still streaming is replayed in
  full; a client that did not opt in gets plain version 1.
- **Retention** (``purge_superseded``): superseded deltas of runs that finished
  long enough ago are deleted. The transcript keeps everything it shows.

Which deltas a message supersedes: those of its segment, the run's deltas
since its previous tool call, approval or message. Events of other runs that
may fall in between (a ``user.message`` or ``run.queued`` of a turn sent
meanwhile) do not end a segment; any other event does, so a stretch of deltas
followed by anything but its message (a tool call, a cancel, an error) is
kept. One run executes per session at a time, so the deltas before a message
are that message's run's.

All of this reads only the log's *skeleton*, its events other than deltas,
through a partial index (``event_skeleton``): a compacted replay of a 100,000
event session touches a few thousand rows, not the deltas it skips.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Greatest

from sessions_app.models import AgentSession, Run
from sessions_app.wire import protocol as p

# Kinds that may sit between a run's deltas and its message without ending
# the segment: they belong to other runs (inputs queued meanwhile), or say
# that the run went on elsewhere (``run.resumed``: the message that follows
# states the whole text, so the deltas on both sides of it are superseded).
_PASS_THROUGH = frozenset({p.K_USER_MESSAGE, p.K_RUN_QUEUED, p.K_RUN_RESUMED})

# The same predicate as the partial index's, so both databases use it.
_SKELETON = (
    "SELECT seq, kind, run_id FROM sessions_app_event "
    "WHERE session_id = %s AND seq > %s AND seq <= %s "
    "AND NOT (kind = 'assistant.delta') ORDER BY seq"
)

Range = tuple[int, int, str]  # first seq, last seq, run_id of the message that supersedes it


def read_skeleton(session_id: str, after: int, upto: int) -> list[tuple[int, str, str | None]]:
    """``(seq, kind, run_id)`` of the events other than deltas in ``after < seq <= upto``."""
    with connection.cursor() as cursor:
        cursor.execute(_SKELETON, [session_id, after, upto])
        return cursor.fetchall()


def superseded_ranges(
    skeleton: list[tuple[int, str, str | None]], after: int, upto: int
) -> list[Range]:
    """The superseded stretches in ``after < seq <= upto``, in order, given its
    skeleton. Every seq between two skeleton events is a delta (or a purged
    one): a stretch is superseded when the next event that ends its segment
    is an ``assistant.message`` within ``upto``."""
    out: list[Range] = []
    waiting: list[tuple[int, int]] = []
    previous = after
    for seq, kind, run_id in skeleton:
        if seq <= after:
            continue
        if seq > upto:
            break
        if seq > previous + 1:
            waiting.append((previous + 1, seq - 1))
        previous = seq
        if kind in _PASS_THROUGH:
            continue
        if kind == p.K_ASSISTANT_MESSAGE and run_id:
            out.extend((first, last, run_id) for first, last in waiting)
        waiting = []
    return out


def compacted_plan(session_id: str, after: int, upto: int) -> list[Range]:
    """What a compacted replay of ``after < seq <= upto`` skips."""
    if upto <= after:
        return []
    return superseded_ranges(read_skeleton(session_id, after, upto), after, upto)


def purge_superseded(session_id: str, finished_before: datetime, after: int = 0) -> int:
    """Delete the superseded deltas after ``after`` of the session's runs that
    finished before ``finished_before``; returns how many were deleted.

    Only deltas go, and only those a message in the log states whole: the
    transcript (messages, tool calls and results, approvals) is untouched. A
    compacted replay never reads them; a version 1 replay across them is
    told ``cursor_expired`` (``compacted_through``)."""
    head = AgentSession.objects.filter(id=session_id).values_list("head", flat=True).first()
    if not head:
        return 0
    ranges = compacted_plan(session_id, after, head)
    if not ranges:
        return 0
    done = set(
        Run.objects.filter(
            session_id=session_id,
            status=Run.Status.FINISHED,
            finished_at__lt=finished_before,
            id__in={run_id for _, _, run_id in ranges},
        ).values_list("id", flat=True)
    )
    doomed = [(first, last) for first, last, run_id in ranges if run_id in done]
    if not doomed:
        return 0
    deleted = 0
    with transaction.atomic():
        # The field first: a version 1 resume that reads it before the rows go
        # is refused rather than replayed into a hole (a replay under way that
        # meets the hole closes 1013, and its resume is then refused).
        AgentSession.objects.filter(id=session_id).update(
            compacted_through=Greatest(F("compacted_through"), max(last for _, last in doomed))
        )
        with connection.cursor() as cursor:
            for first, last in doomed:
                cursor.execute(
                    "DELETE FROM sessions_app_event WHERE session_id = %s "
                    "AND seq >= %s AND seq <= %s AND kind = 'assistant.delta'",
                    [session_id, first, last],
                )
                deleted += cursor.rowcount
    return deleted
