"""The conversation as the dialects' requests see it, on the database side:
a client's thread or chat id as one of the caller's sessions (made on first
use, with an id of its own: ``AgentSession.external_id``),
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


def find(user, client_id: str) -> AgentSession | None:
    """The user's conversation a client names ``client_id``: the session of
    that id, or the one made for that client id (``external_id``); None."""
    if not p.is_session_id(client_id):
        return None
    # One query; the session of that id wins over one made for a client id
    # that happens to equal it.
    named = AgentSession.objects.filter(Q(id=client_id) | Q(external_id=client_id), owner=user)
    found = list(named[:2])
    return next((s for s in found if s.id == client_id), found[0] if found else None)


def find_or_make(user, client_id: str) -> AgentSession:
    """``find``, or a new session of the user's for that client id. Ids are
    per user: another user's session by that id is never found, probed or
    taken, and a new session has an id of its own."""
    found = find(user, client_id)
    if found is not None:
        return found
    try:
        return create_session(user, "", external_id=client_id)
    except IntegrityError:  # made meanwhile, by a retry of this user's
        made = AgentSession.objects.filter(owner=user, external_id=client_id).first()
        if made is None:
            raise
        return made


def send(session: AgentSession, send: p.Send, by: str, via: str) -> tuple[str, int]:
    """The socket's ``send``, once per ``client_message_id``: the run and the
    seq of its ``user.message`` (a response starts after it). A new input
    while a gate waits is refused (409 ``approval_pending``, decided under
    the session's lock): its run would queue behind the gate, and a client
    streaming its answer cannot answer the gate meanwhile. A send again of
    one already made streams it; a regenerate or an edit stops the gated
    run first, as everywhere."""
    with tracing.span("session.send", **{"session.id": session.id, "via": via}):
        result = turns.send(session.id, send, by, tracing.carrier(), not_behind_gate=True)
    return result.run_id, result.seq


def answer_gates(session: AgentSession, answers, by: str) -> tuple[str, int]:
    """Decide each gate answered, exactly once (a gate decided already, from
    another tab or the admin, keeps that decision: the stream says which);
    the run and the seq after which it goes on (its ``run.paused``).

    A request answers at most the gates the session has waiting (at least
    one: a gate another tab decided meanwhile is still answered here), each
    once: a repeated answer to a gate is dropped (the first stands), and
    more answers than that are refused (400 ``too_many_answers``) before
    any is decided."""
    unique: dict[str, bool] = {}
    for approval_id, approved in answers:
        unique.setdefault(approval_id, approved)
    waiting = ApprovalRequest.objects.filter(
        session_id=session.id, status=ApprovalRequest.Status.PENDING
    ).count()
    if len(unique) > max(waiting, 1):
        raise Refused(
            400,
            "too_many_answers",
            f"this request answers {len(unique)} gates; the conversation has {waiting} waiting",
        )
    run_id, after = "", 0
    for approval_id, approved in unique.items():
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


def active_run(session: AgentSession) -> tuple[str, int] | None:
    """The oldest run of the session that is not finished, and the seq before
    its message; None when there is none."""
    found = (
        Run.objects.filter(session=session, status__in=Run.ACTIVE)
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
    message_seq: int = 0
    events: list[Event] = field(default_factory=list)


def path_turns(
    session: AgentSession, upto: int | None = None, leaf: str | None = None
) -> list[Turn]:
    """The turns of the session's active path (``leaf``: the path to that
    run), oldest first: each finished run's events. With ``upto``, the
    conversation as it stood then: the turns asked by then, each run's
    events up to that seq (what a client was given of a run that parked at
    a gate there, whatever happened since)."""
    path = turns.ancestry(leaf or session.leaf_run_id or None)
    rows = Run.objects.filter(id__in=path).values(
        "id", "client_message_id", "text", "answers_id", "status", "message_seq"
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
            by_id[run_id]["message_seq"],
        )
        for run_id in path
    }
    if upto is not None:
        # The conversation as it stood at ``upto``: the turns that had begun
        # by then (a regenerate since shares its message's seq, not its
        # events), every run's events cut there, finished or not.
        begun = set(
            Event.objects.filter(session_id=session.id, run_id__in=path, seq__lte=upto)
            .values_list("run_id", flat=True)
            .distinct()
        )
        path = [run_id for run_id in path if run_id in begun]
        wanted = Q(run_id__in=path, seq__lte=upto)
    else:
        wanted = Q(run_id__in=[run_id for run_id in path if out[run_id].finished])
    if path:
        events = (
            Event.objects.filter(wanted, session_id=session.id)
            .exclude(kind=p.K_ASSISTANT_DELTA)
            .order_by("seq")
        )
        for event in events:
            out[event.run_id].events.append(event)
    return [out[run_id] for run_id in path]


def run_to_resume(session: AgentSession, run_id: str) -> tuple[str, int] | None:
    """That run of the session (a page's cursor: the first run its messages
    left out, finished since or not) and a seq before its first event; None
    if the session has no such run."""
    found = Run.objects.filter(session=session, id=run_id).values_list("message_seq").first()
    return None if found is None else (run_id, found[0] - 1)
