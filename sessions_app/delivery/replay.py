"""A stretch of a session's log as the frames that carry it, for any transport.

``frames(session_id, after, upto, plan=…, first_page=…)`` reads the logged
events ``after < seq <= upto`` in pages and yields them a page at a time, as
the delivery core's steps: ``Send`` (an event's frame) and, where a
compacted replay skips a superseded stretch, ``Compacted``. A transport
writes each step under its flow control (``flow``) and may pack a page into
one message (the socket's ``batch``); it stops iterating when it closes.

A hole is never skipped: a page that does not follow on from the cursor, or
a log that ends short of ``upto`` (purged under the replay, or the session
deleted), raises ``LogHole`` after what came before it. The socket then
closes 1013 and the SSE stream ends with its ``reset`` event; either way the
reader resumes and is told what happened (``cursor_expired``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sessions_app.delivery import reads
from sessions_app.delivery.core import Compacted, LogHole, Refill, Send, contiguous, interleave

# A range this short is sent whole even to a reader that compacts: looking for
# what it could skip would cost a query on a path (refills) that is usually a
# few events long.
COMPACT_MIN_EVENTS = 64

Step = Send | Compacted


async def plan_for(
    session_id: str, after: int, upto: int, compacted_through: int
) -> list[tuple[int, int, str]]:
    """What a compacted replay of ``after < seq <= upto`` skips (nothing for a
    short range after the compacted point)."""
    if upto - after <= COMPACT_MIN_EVENTS and after >= compacted_through:
        return []
    return await reads.replay_plan(session_id, after, upto)


async def frames(
    session_id: str,
    after: int,
    upto: int,
    plan: list[tuple[int, int, str]] | None = None,
    first_page: list[tuple[str, int]] | None = None,
) -> AsyncIterator[list[Step]]:
    """The steps for ``after < seq <= upto``, a page at a time (see the module).
    With a ``plan``, ``first_page`` holds the skeleton's first frames;
    otherwise the first frames."""
    if not plan:
        async for page in _plain(session_id, after, upto, first_page):
            yield page
        return
    superseded = {first: (last, run_id) for first, last, run_id in plan}
    cursor, page = after, first_page
    while cursor < upto:
        if page is None:
            page = await reads.skeleton_page(session_id, cursor, upto)
        if not page:  # deltas to the end (a run still streaming), or nothing
            async for part in _plain(session_id, cursor, upto):
                yield part
            return
        chunk: list[Step] = []
        for step in interleave(cursor, page, superseded):
            if isinstance(step, Refill):
                if chunk:
                    yield chunk  # not held behind the read
                    chunk = []
                async for part in _plain(session_id, step.after, step.upto):
                    yield part
                cursor = step.upto
                continue
            chunk.append(step)
            cursor = step.last if isinstance(step, Compacted) else step.seq
        if chunk:
            yield chunk
        page = None


async def _plain(
    session_id: str, after: int, upto: int, first_page: list[tuple[str, int]] | None = None
) -> AsyncIterator[list[Step]]:
    cursor = after
    while cursor < upto:
        if first_page is not None:
            page, first_page = first_page, None
        else:
            page = await reads.events_page(session_id, cursor, upto)
        if not page:
            raise LogHole(cursor)  # short of what was committed
        sends: list[Step] = []
        try:
            for step in contiguous(cursor, page):
                sends.append(step)
        except LogHole:
            if sends:
                yield sends
            raise
        yield sends
        cursor = sends[-1].seq


def last_seq(step: Step) -> int:
    """The seq a reader has once ``step`` went out."""
    return step.last if isinstance(step, Compacted) else step.seq


def text_of(step: Step, session_id: str) -> str:
    """The wire text of ``step``."""
    return step.text(session_id) if isinstance(step, Compacted) else step.text
