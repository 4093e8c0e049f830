"""Session-level operations shared by the socket, the pages, the API and the admin."""

from __future__ import annotations

from django.db import transaction

from . import protocol as p
from .events import append_event
from .models import AgentSession
from .protocol import is_session_id


def create_session(owner, title: str = "") -> AgentSession:
    """Create a session and log its ``session.created`` (seq 1)."""
    with transaction.atomic():
        session = AgentSession.objects.create(owner=owner, title=title[: p.MAX_TITLE_CHARS])
        append_event(session.id, p.K_SESSION_CREATED, {"title": session.title})
    session.refresh_from_db()
    return session


def get_owned_session(owner, session_id: str) -> AgentSession | None:
    """The session if ``owner`` owns it; None otherwise (no enumeration)."""
    if not is_session_id(session_id):
        return None
    return AgentSession.objects.filter(id=session_id, owner=owner).first()
