"""Sessions with long logs, written in bulk: setup for tests and benches
(``bench/`` imports it too), never the path under test."""

from __future__ import annotations

from collections.abc import Callable

from django.utils import timezone

from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, Event


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
