"""What a session list shows (sessions_app/log/sessions.py): its counts are
right, and cost what the matching rows cost, not runs × approvals."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app.log.sessions import create_session, session_summary, summaries
from sessions_app.models import AgentSession, ApprovalRequest, Run

pytestmark = pytest.mark.django_db


def _crowded(user, runs: int, gates: int, active: int, pending: int, tag: str = "") -> AgentSession:
    """A session with ``runs`` runs (``active`` of them running) and ``gates``
    gates (``pending`` of them waiting), made in bulk (``tag`` in their ids)."""
    s = create_session(user)
    now = timezone.now()
    Run.objects.bulk_create(
        Run(
            id=f"run_{tag}{i:06d}",
            session=s,
            client_message_id=f"m{i}",
            text="x",
            message_seq=i + 2,
            status=Run.Status.RUNNING if i < active else Run.Status.FINISHED,
            created_at=now,
        )
        for i in range(runs)
    )
    ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            id=f"ap_{tag}{i:06d}",
            session=s,
            run_id=f"run_{tag}{i % runs:06d}",
            tool_call_id=f"call_{tag}{i}",
            tool="write_file",
            status=ApprovalRequest.Status.PENDING if i < pending else "approved",
        )
        for i in range(gates)
    )
    return s


def test_the_summary_counts_pending_gates_and_active_runs(user, other_user):
    """Each session's counts are its own: pending gates and active runs."""
    busy = _crowded(user, runs=30, gates=12, active=1, pending=3)
    calm = create_session(user)
    create_session(other_user)
    rows = {r["id"]: r for r in summaries(AgentSession.objects.filter(owner=user))}
    assert (rows[busy.id]["pending_approvals"], rows[busy.id]["active_runs"]) == (3, 1)
    assert (rows[calm.id]["pending_approvals"], rows[calm.id]["active_runs"]) == (0, 0)
    assert session_summary(busy.id, other_user.pk) is None


def test_the_summary_of_a_session_with_20k_runs_and_2k_gates_is_one_quick_query(user):
    """The review's session list timed out at 20,000 runs and 2,000 gates
    (its joins counted their product); each count is now a subquery on the
    (session, status) index: one query, well under a second here (the
    figure at scale is bench/listing.py's)."""
    s = _crowded(user, runs=20_000, gates=2_000, active=1, pending=2)
    with CaptureQueriesContext(connection) as queries:
        began = time.perf_counter()
        summary = session_summary(s.id, user.pk)
        took = time.perf_counter() - began
    assert (summary["pending_approvals"], summary["active_runs"]) == (2, 1)
    assert len(queries) == 1 and " JOIN " not in queries[0]["sql"].upper()
    assert took < 1.0, f"{took:.2f} s"
