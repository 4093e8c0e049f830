"""Sessions with long logs, written in bulk: setup for tests and benches
(``bench/`` imports it too), never the path under test."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.utils import timezone

from sessions_app.log.events import NewEvent, append_events
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, Event, Run
from sessions_app.wire import protocol as p


def session_with_deltas(
    user, head: int, title: str = "", text: Callable[[int], str] = lambda seq: f"t{seq} "
) -> AgentSession:
    """A new session of ``user`` whose log is ``session.created`` and then
    ``assistant.delta`` events up to ``head``, the one at seq N saying ``text(N)``."""
    session = create_session(user, title)
    now = timezone.now()
    for start in range(2, head + 1, 5_000):
        Event.objects.bulk_create(
            Event(
                session=session,
                seq=seq,
                kind="assistant.delta",
                data={"text": text(seq)},
                created_at=now,
            )
            for seq in range(start, min(start + 5_000, head + 1))
        )
    AgentSession.objects.filter(id=session.id).update(head=head)
    session.refresh_from_db()
    return session


def session_with_turns(
    user,
    turns: int,
    title: str = "",
    *,
    question: Callable[[int], str] = lambda t: f"question {t}",
    answer: Callable[[int], list[str]] = lambda t: [f"answer {t}"],
    streamed: bool = False,
    linked: bool = False,
) -> AgentSession:
    """A new session of ``user`` with ``turns`` finished turns, turn T asking
    ``question(T)``: a user message, ``run.started``, the pieces of
    ``answer(T)`` as deltas when ``streamed``, the whole answer as the
    message, ``run.finished``. ``linked``: the turns are one path (each
    run's parent the one before, the last the session's leaf)."""
    session = create_session(user, title)
    now = timezone.now()
    parent = None
    for t in range(turns):
        run = Run.objects.create(
            session=session,
            client_message_id=f"m{t}",
            text=question(t),
            message_seq=session.head + 1,
            status=Run.Status.FINISHED,
            stop_reason=p.STOP_END_TURN,
            started_at=now,
            finished_at=now,
            parent_id=parent,
        )
        if linked:
            parent = run.id
        pieces = answer(t)
        events = [
            NewEvent(p.K_USER_MESSAGE, {"client_message_id": f"m{t}", "text": run.text}, run.id),
            NewEvent(p.K_RUN_STARTED, {"client_message_id": f"m{t}"}, run.id),
            *(NewEvent(p.K_ASSISTANT_DELTA, {"text": x}, run.id) for x in pieces if streamed),
            NewEvent(p.K_ASSISTANT_MESSAGE, {"text": "".join(pieces)}, run.id),
            NewEvent(p.K_RUN_FINISHED, {"stop_reason": p.STOP_END_TURN}, run.id),
        ]
        with transaction.atomic():
            append_events(session.id, events)
        session.head += len(events)
    if linked and parent:
        AgentSession.objects.filter(id=session.id).update(leaf_run_id=parent)
    session.refresh_from_db()
    return session
