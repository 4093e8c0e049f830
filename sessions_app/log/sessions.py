"""Session-level operations shared by the socket, the pages, the API and the admin."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from sessions_app import fanout
from sessions_app.log.events import append_event
from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.wire import protocol as p
from sessions_app.wire.protocol import is_session_id


def create_session(owner, title: str = "", external_id: str = "") -> AgentSession:
    """Create a session and log its ``session.created`` (seq 1). ``external_id``:
    the id a client of another protocol names it by (an ``IntegrityError``
    when the owner has one by that id already)."""
    with transaction.atomic():
        session = AgentSession.objects.create(
            owner=owner, title=title[: p.MAX_TITLE_CHARS], external_id=external_id
        )
        append_event(session.id, p.K_SESSION_CREATED, {"title": session.title})
        fanout.session_changed_on_commit(owner.pk, session.id)
    session.refresh_from_db()
    return session


def get_owned_session(owner, session_id: str) -> AgentSession | None:
    """The session if ``owner`` owns it; None otherwise (no enumeration)."""
    if not is_session_id(session_id):
        return None
    return AgentSession.objects.filter(id=session_id, owner=owner).first()


def session_summary(session_id: str, owner_id: int) -> dict | None:
    """What the session list shows of one session (None: gone, or not theirs)."""
    rows = summaries(AgentSession.objects.filter(id=session_id, owner_id=owner_id))
    return rows[0] if rows else None


# Sessions a list shows at most (the page, and the list socket's snapshot).
MAX_LISTED = 200


def _count(rows) -> Coalesce:
    """How many of ``rows`` (filtered by status) belong to the outer session:
    a scalar subquery on the ``(session, status)`` index, so each count reads
    only the matching rows (two joins counted runs × approvals: 1.4 s at
    2,000 of each, a timeout at 20,000 runs)."""
    counted = rows.filter(session=OuterRef("pk")).order_by().values("session")
    return Coalesce(Subquery(counted.annotate(n=Count("pk")).values("n")[:1]), 0)


def listed(sessions):
    """``sessions`` (a queryset) with what a session list shows of each, most
    recent first: ``pending_approvals`` and ``active_runs``."""

    return sessions.annotate(
        pending_approvals=_count(
            ApprovalRequest.objects.filter(status=ApprovalRequest.Status.PENDING)
        ),
        active_runs=_count(Run.objects.filter(status__in=Run.ACTIVE)),
    ).order_by("-updated_at")


def summaries(sessions, limit: int | None = None) -> list[dict]:
    """``session_summary`` of each of ``sessions`` (a queryset), most recent
    first, at most ``limit``."""
    rows = listed(sessions).values(
        "id", "title", "status", "updated_at", "pending_approvals", "active_runs"
    )
    if limit is not None:
        rows = rows[:limit]
    labels = dict(AgentSession.Status.choices)
    return [
        {
            **row,
            "status_label": labels.get(row["status"], row["status"]),
            "updated_at": row["updated_at"].isoformat(),
        }
        for row in rows
    ]


TITLE_CHARS = 80


def title_from(text: str) -> str:
    """A session's title from its first message: the first line, shortened."""
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
