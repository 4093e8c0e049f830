"""The row locks every run transition takes, in this order, and the session's
status: what ``runs`` builds its transactions from.

A transition locks the session row first (one at a time: "is a run active?",
"which run is next?" and "is this gate still pending?" are answered and acted
on atomically), then, where it admits a run, its owner's user row. Every
transaction takes at most one session lock before the user lock, so none can
deadlock on them.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from sessions_app import fanout
from sessions_app.fanout.presence import request_presence
from sessions_app.models import AgentSession, Run
from sessions_app.wire.errors import NotFound, SessionGone


def lock_session(session_id: str) -> AgentSession:
    try:
        return AgentSession.objects.select_for_update().get(id=session_id)
    except AgentSession.DoesNotExist:
        raise NotFound("this session no longer exists") from None


def lock_run_session(session_id: str) -> AgentSession:
    """``lock_session`` for a run's own step: a session deleted under it stops
    the run (``SessionGone``, as its next append would)."""
    try:
        return lock_session(session_id)
    except NotFound:
        raise SessionGone(session_id) from None


def lock_user(owner_id: int) -> None:
    """Serialise the user's admissions with the transitions that free room.

    Without it a run that finishes while another is submitted can leave the
    new one queued with room to spare: the submit counted the finishing run,
    and the finish's admission looked before the submit committed. Callers
    hold a session lock first, so the order is always session, user."""
    if settings.AGENT_USER_MAX_RUNS > 0:
        get_user_model().objects.select_for_update().filter(pk=owner_id).values_list("pk").first()


def queued_runs(owner_id: int) -> int:
    """The runs of a user waiting to start, across their sessions."""
    return Run.objects.filter(session__owner_id=owner_id, status=Run.Status.QUEUED).count()


def set_session_status(session: AgentSession, status: str) -> None:
    """Record the session's status; presence goes out when 'running' flips."""
    was_running = session.status != AgentSession.Status.IDLE
    # The list shows status, running and pending approvals: every call is a change.
    fanout.session_changed_on_commit(session.owner_id, session.id)
    if session.status != status:
        AgentSession.objects.filter(id=session.id).update(status=status)
        session.status = status
    if was_running != (status != AgentSession.Status.IDLE):
        transaction.on_commit(lambda: request_presence(session.id))
