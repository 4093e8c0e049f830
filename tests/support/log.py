"""What a session's log and its runs say, read from the database (a test's
check of what was logged, or a state no frame announces)."""

from __future__ import annotations

from sessions_app.models import Event, Run


def logged(session_id: str, kind: str, *, external: bool = False) -> list[dict]:
    """The data of the session's events of ``kind``, in seq order; ``external``:
    the session named by a client's id (a chat's, a thread's)."""
    where = {"session__external_id": session_id} if external else {"session_id": session_id}
    return list(
        Event.objects.filter(kind=kind, **where).order_by("seq").values_list("data", flat=True)
    )


def finished(run_id: str) -> Run | None:
    """The run, once it finished."""
    return Run.objects.filter(id=run_id, status="finished").first()
