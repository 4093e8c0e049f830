"""The database work of a session socket's handshake and commands, one function each
(the log's pages and head are ``delivery.reads``).

Each runs on the sockets' database pool (``server.db_pool``): every call is
self-contained (its own transaction, if any), and each of the pool's threads
keeps one persistent connection.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from django.db import connection

from sessions_app.access.rights import require
from sessions_app.delivery.reads import FIRST_PAGE
from sessions_app.fanout.presence import presence_of, request_presence
from sessions_app.log.compaction import compacted_plan
from sessions_app.log.events import check_resume_cursor, read_frames
from sessions_app.log.sessions import create_session
from sessions_app.runtime.deciding import decide as decide_gate
from sessions_app.runtime.gates import VIA_TAB, Decision
from sessions_app.runtime.runs import cancel as cancel_run
from sessions_app.runtime.turns import Sender
from sessions_app.runtime.turns import send as send_turn
from sessions_app.runtime.turns import switch as switch_branch
from sessions_app.server import tracing
from sessions_app.server.db_pool import in_db_pool, reading_in_db_pool
from sessions_app.wire import protocol as p
from sessions_app.wire.decisions import Decide

# What a resume checks, as plain SQL: the ORM's query building took 0.26 ms of
# a 0.44 ms check on the benchmark machine, for one indexed row.
_RESUME_FIELDS = ("epoch", "head", "earliest", "compacted_through", "title")
_RESUME_ROW = (
    f"SELECT {', '.join(_RESUME_FIELDS)} FROM sessions_app_agentsession "  # noqa: S608 (constants)
    "WHERE id = %s AND owner_id = %s"
)


@in_db_pool
def start_session(user, start: p.Start) -> dict[str, Any]:
    """Create the session a ``start`` asks for."""

    session = create_session(user, start.title)
    return {"id": session.id, "epoch": session.epoch, "head": session.head, "title": session.title}


# Reads of ``check_resume`` that have not begun on the pool yet, by what they
# read: see ``check_resume``.
_queued: dict[tuple, tuple[asyncio.Future, list[bool]]] = {}


async def check_resume(user_id: int, resume: p.Resume) -> dict[str, Any]:
    """The session's epoch, head and earliest, in one read, and the replay's
    first page (``page``) and, for a client that compacts, what the replay
    skips (``plan``), if this user may resume it at this cursor;
    ``protocol.Rejection`` otherwise (another user's session is not_found).

    The socket has joined the session's group before it calls this, so the
    read must begin after that join. Resumes with the same arguments (a
    user's tabs of one session, all back at once after a restart) share a
    read that is still queued for the pool: it begins after each of them
    joined, as a read of its own would. A read already under way is never
    shared. (What the read answers depends on these arguments and on
    whether the client compacts, nothing else: they are its key.)"""
    compact = p.FEATURE_COMPACT in resume.features
    key = (user_id, resume.session_id, resume.after, resume.epoch, compact)
    queued = _queued.get(key)
    loop = asyncio.get_running_loop()
    if queued is None or queued[1][0] or queued[0].get_loop() is not loop:
        begun = [False]
        read = asyncio.ensure_future(_check_resume(user_id, resume, begun))
        queued = _queued[key] = (read, begun)
        read.add_done_callback(
            lambda done: _queued.get(key, (None,))[0] is done and _queued.pop(key)
        )
        # Retrieved: a read whose sockets all left must not log "never retrieved".
        read.add_done_callback(lambda done: done.cancelled() or done.exception())
    # Shielded: one socket that closes does not cancel the others' read.
    row = await asyncio.shield(queued[0])
    return {**row, "page": list(row["page"]), "plan": list(row["plan"])}


@reading_in_db_pool
def _check_resume(user_id: int, resume: p.Resume, begun: list[bool]) -> dict[str, Any]:
    begun[0] = True  # from here on, a later socket's join may come after the read
    found = None
    if p.is_session_id(resume.session_id):
        with connection.cursor() as cursor:
            cursor.execute(_RESUME_ROW, [resume.session_id, user_id])
            found = cursor.fetchone()
    if found is None:
        raise p.Rejection(p.R_NOT_FOUND, "no such session")
    row = dict(zip(_RESUME_FIELDS, found, strict=True))
    compact = p.FEATURE_COMPACT in resume.features
    check_resume_cursor(row, resume.after, resume.epoch, compact)
    plan = compacted_plan(resume.session_id, resume.after, row["head"]) if compact else []
    # The replay's first events in the same trip to the pool: a resume a few
    # events behind is then answered with one database round trip. A short
    # page, so that a long replay's resume_ok does not wait for a full one.
    # A compacted replay pages through the skeleton (``delivery.replay``).
    row["page"] = read_frames(
        resume.session_id, resume.after, row["head"], FIRST_PAGE, skeleton=bool(plan)
    )
    row["plan"] = plan
    return row


# Each command first checks that the socket's user still has the rights it
# was let in with (``rights.require``: deactivated, deleted or a new password
# refuse it with ``rights_revoked``).


@in_db_pool
def submit(session_id: str, send: p.Send, username: str, granted: tuple[int, str], trace=""):

    require(granted)
    # The send's span is the socket's (another thread): continued here.
    with tracing.continued(trace):
        return send_turn(session_id, send, Sender(username, trace))


@in_db_pool
def switch(session_id: str, run_id: str, username: str, granted: tuple[int, str]) -> list[str]:

    require(granted)
    return switch_branch(session_id, run_id, by=username)


@in_db_pool
def decide(session_id: str, decide: Decide, username: str, granted: tuple[int, str]) -> None:

    require(granted)
    decision = Decision.of(asdict(decide), username, VIA_TAB)
    decide_gate(decide.approval_id, decision, session_id=session_id)


@in_db_pool
def cancel(session_id: str, run_id: str, username: str, granted: tuple[int, str]) -> None:

    require(granted)
    cancel_run(run_id, username, session_id=session_id)


@reading_in_db_pool
def presence(session_id: str) -> dict[str, Any] | None:
    """The presence for a socket that just caught up; the other sockets of the
    session get theirs coalesced with other joins and leaves."""

    request_presence(session_id)
    return presence_of(session_id)
