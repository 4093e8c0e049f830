"""The conversation as the dialects' requests see it, on the database side:
a client's thread or chat id as the caller's session (made on first use),
gates answered from a request, the run a reconnect follows, and the
finished turns a page or a late joiner is given.

Shared by ``web.ai_sdk`` and ``web.ag_ui`` (sync code: the views call it
through ``sync_to_async``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from django.db import IntegrityError
from django.db.models import Q

from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, ApprovalRequest, Event, Run
from sessions_app.runtime import runs, turns
from sessions_app.server import tracing
from sessions_app.web.dialects import Refused
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import AlreadyDecided, ApprovalCancelled


def owned_session(user, session_id: str) -> AgentSession:
    """The user's session with this id; made with that id when there is none
    (a client names its chat or thread first). Another user's is 404."""
    found = AgentSession.objects.filter(id=session_id).first()
    if found is None:
        try:
            return create_session(user, "", session_id=session_id)
        except IntegrityError:  # made meanwhile, by a retry or by someone else
            found = AgentSession.objects.filter(id=session_id).first()
    if found is None or found.owner_id != user.pk:
        raise Refused(404, "not_found", "no such conversation")
    return found


def send(session: AgentSession, send: p.Send, by: str, via: str) -> tuple[str, int]:
    """The socket's ``send``, once per ``client_message_id``: the run and the
    seq of its ``user.message`` (a response starts after it)."""
    with tracing.span("session.send", **{"session.id": session.id, "via": via}):
        result = turns.send(session.id, send, by, tracing.carrier())
    return result.run_id, result.seq


def answer_gates(session: AgentSession, answers, by: str) -> tuple[str, int]:
    """Decide each gate answered, exactly once (a gate decided already, from
    another tab or the admin, keeps that decision: the stream says which);
    the run and the seq after which it goes on (its ``run.paused``)."""
    run_id, after = "", 0
    for approval_id, approved in answers:
        gate = (
            ApprovalRequest.objects.filter(id=approval_id, session_id=session.id)
            .values_list("run_id", flat=True)
            .first()
        )
        if gate is None:
            raise Refused(404, "not_found", "no such approval in this conversation")
        with contextlib.suppress(AlreadyDecided, ApprovalCancelled):
            runs.decide(approval_id, p.APPROVE if approved else p.DENY, by, session_id=session.id)
        paused = (
            Event.objects.filter(
                session_id=session.id,
                run_id=gate,
                kind=p.K_RUN_PAUSED,
                data__approval_id=approval_id,
            )
            .values_list("seq", flat=True)
            .first()
        )
        run_id, after = gate, paused or 0
    return run_id, after


def active_run(user_id: int, session_id: str) -> tuple[str, int] | None:
    """The oldest run of the user's session that is not finished, and the seq
    before its message; None when there is none (or no such session)."""
    if not p.is_session_id(session_id):
        return None
    found = (
        Run.objects.filter(session_id=session_id, session__owner_id=user_id, status__in=Run.ACTIVE)
        .order_by("created_at", "message_seq")
        .values_list("id", "message_seq")
        .first()
    )
    return None if found is None else (found[0], found[1] - 1)


@dataclass
class Turn:
    """One run on the active path: the user's message (its id, its text) and,
    once the run finished, its events but the deltas (the messages say it all)."""

    message_id: str
    text: str
    run_id: str
    finished: bool
    events: list[Event] = field(default_factory=list)


def path_turns(session: AgentSession, upto: int | None = None) -> list[Turn]:
    """The turns of the session's active path, oldest first; with ``upto``,
    the events of the runs not finished up to that seq too (what a client
    was given of a run parked at a gate)."""
    path = turns.ancestry(session.leaf_run_id or None)
    rows = Run.objects.filter(id__in=path).values(
        "id", "client_message_id", "text", "answers_id", "status"
    )
    by_id = {row["id"]: row for row in rows}
    asked = {row["id"]: row["client_message_id"] for row in rows}
    asked.update(
        Run.objects.filter(id__in={row["answers_id"] for row in rows} - {None}).values_list(
            "id", "client_message_id"
        )
    )
    out = {
        run_id: Turn(
            asked[by_id[run_id]["answers_id"] or run_id],
            by_id[run_id]["text"],
            run_id,
            by_id[run_id]["status"] == Run.Status.FINISHED,
        )
        for run_id in path
    }
    finished = [run_id for run_id in path if out[run_id].finished]
    wanted = Q(run_id__in=finished)
    if upto is not None:
        wanted |= Q(run_id__in=[r for r in path if not out[r].finished], seq__lte=upto)
    if path:
        events = (
            Event.objects.filter(wanted, session_id=session.id)
            .exclude(kind=p.K_ASSISTANT_DELTA)
            .order_by("seq")
        )
        for event in events:
            out[event.run_id].events.append(event)
    return [out[run_id] for run_id in path]
