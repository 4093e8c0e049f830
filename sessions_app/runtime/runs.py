"""Run and approval-gate transitions: every change of a run's status is here.

Each transition is one transaction that first locks the session row, so that
"is a run active?", "which run is next?" and "is this gate still pending?" are
answered and acted on atomically, and its events commit with it. Work for a
run (starting it, continuing it after a decision) is enqueued through the task
framework in the same transaction (durable backends) or right after it
commits (the embedded one), so it is never lost and never runs on rows that
could still roll back.

Fairness: a session has at most one active run (the others queue behind it),
and a user has at most ``AGENT_USER_MAX_RUNS`` runs executing at once across
their sessions. A run over that limit is logged ``run.queued`` and starts,
oldest first, when one of the user's runs finishes or parks. Admission locks
the session row, then the owner's user row: every transaction takes at most
one session lock before the user lock, so none can deadlock on them. A run
continuing after a decision is never held back (a person is waiting on that
very call); it counts towards the limit like any executing run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from sessions_app.log.events import append_event, append_events
from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime import cancels, questions, wakeups
from sessions_app.runtime.gates import Gate
from sessions_app.runtime.leases import pickup_deadline
from sessions_app.runtime.locks import lock_session, lock_user, set_session_status
from sessions_app.server import metrics, tracing
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import (
    AlreadyDecided,
    ApprovalCancelled,
    NotFound,
    NotPending,
)

log = logging.getLogger(__name__)

# A run executing or parked at a gate: at most one a session.
EXECUTING = (Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL)


def user_has_room(owner_id: int) -> bool:
    """May one more of this user's runs execute now? (Locks the user row.)"""
    cap = settings.AGENT_USER_MAX_RUNS
    if cap <= 0:
        return True
    lock_user(owner_id)
    executing = Run.objects.filter(session__owner_id=owner_id, status=Run.Status.RUNNING)
    return executing.count() < cap


def admit_waiting(owner_id: int) -> list[str]:
    """Start the user's oldest runs that wait for room (not behind another run
    of their own session), while the user has room. Returns the ids started."""
    started: list[str] = []
    while True:
        waiting = (
            Run.objects.filter(session__owner_id=owner_id, status=Run.Status.QUEUED)
            .exclude(session__runs__status__in=(Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL))
            .order_by("created_at", "message_seq")
            .values_list("session_id", flat=True)
            .first()
        )
        if waiting is None:
            return started
        with transaction.atomic():
            try:
                session = lock_session(waiting)
            except NotFound:
                continue
            run_id = start_next_run(session)
        if run_id is None:
            return started
        started.append(run_id)


def admit_all_waiting() -> list[str]:
    """``admit_waiting`` for every user with a run waiting longer than a lease
    period (the sweeper's net for an admission lost with its process; younger
    ones are being admitted by the transition that freed their room)."""
    settled = Now() - timedelta(seconds=settings.AGENT_LEASE_SECONDS)
    owners = (
        Run.objects.filter(status=Run.Status.QUEUED, created_at__lt=settled)
        .exclude(session__runs__status__in=(Run.Status.RUNNING, Run.Status.AWAITING_APPROVAL))
        .values_list("session__owner_id", flat=True)
        .distinct()
    )
    started: list[str] = []
    for owner_id in list(owners):
        started += admit_waiting(owner_id)
    return started


def decide(
    approval_id: str, decision: str, decided_by: str, *, session_id: str | None = None
) -> ApprovalRequest:
    """Decide a gate exactly once: compare-and-set from pending, log, continue the run.

    The socket, the admin and the API all come through here. ``session_id``
    confines the lookup to one session (a socket may only decide its own).
    """
    if decision not in p.DECISIONS:
        raise ValueError(decision)
    lookup = ApprovalRequest.objects.filter(id=approval_id)
    if session_id is not None:
        lookup = lookup.filter(session_id=session_id)
    found = lookup.values_list("session_id", "run__trace").first()
    if found is None:
        raise NotFound("no such approval in this session")
    # The decision belongs to its run's trace (server.tracing): the send that
    # asked for the tool, the wait at the gate, this, and the tool after it.
    ids = {"approval.id": approval_id, "decision": decision}
    with tracing.continued(found[1]), tracing.span("approval.decide", **ids):
        return _decide_locked(found[0], approval_id, decision, decided_by)


def _decide_locked(
    session_id: str, approval_id: str, decision: str, decided_by: str
) -> ApprovalRequest:
    with transaction.atomic():
        session = lock_session(session_id)
        approval = ApprovalRequest.objects.select_related("run").get(id=approval_id)
        if approval.status != ApprovalRequest.Status.PENDING:
            raise _decided_error(approval)
        _record_decision(approval, decision, decided_by)
        run = approval.run
        # The wait at the gate: from the request to now.
        tracing.record(
            "approval.wait",
            int(approval.created_at.timestamp() * 1e9),
            time.time_ns(),
            **{"run.id": run.id, "approval.id": approval.id, "decision": decision},
        )
        waits_at = (run.state or {}).get("gate", approval.tool_call_id)
        if (
            run.status == Run.Status.AWAITING_APPROVAL
            and waits_at == approval.tool_call_id
            and not questions.is_question(approval.tool_call_id)
        ):
            # Approved or denied, the parked run goes on at the same tool
            # call: the continuation runs the tool or reports the denial. (A
            # gate whose run is not parked at it is only recorded: a
            # question, whose tool waits for it, is woken by the record.)
            Run.objects.filter(id=run.id, status=Run.Status.AWAITING_APPROVAL).update(
                status=Run.Status.RUNNING, worker="", lease_expires_at=pickup_deadline()
            )
            set_session_status(session, AgentSession.Status.RUNNING)
            enqueue(run.id)
    return approval


def _decided_error(approval: ApprovalRequest) -> AlreadyDecided | ApprovalCancelled:
    """Why a gate that is no longer pending cannot be decided."""
    if approval.status == ApprovalRequest.Status.CANCELLED:
        return ApprovalCancelled(approval.decided_by)
    word = p.APPROVE if approval.status == ApprovalRequest.Status.APPROVED else p.DENY
    return AlreadyDecided(word, approval.decided_by)


_GATE_STATUS = {
    p.APPROVE: ApprovalRequest.Status.APPROVED,
    p.DENY: ApprovalRequest.Status.DENIED,
    p.GATE_CANCELLED: ApprovalRequest.Status.CANCELLED,
}


def _record_decision(approval: ApprovalRequest, decision: str, decided_by: str) -> None:
    status = _GATE_STATUS[decision]
    now = timezone.now()
    updated = ApprovalRequest.objects.filter(
        id=approval.id, status=ApprovalRequest.Status.PENDING
    ).update(status=status, decided_by=decided_by, decided_at=now)
    if not updated:
        approval.refresh_from_db()
        raise _decided_error(approval)
    approval.status, approval.decided_by, approval.decided_at = status, decided_by, now
    if questions.is_question(approval.tool_call_id):
        wakeups.wake_on_commit(approval.id)
    append_event(
        approval.session_id,
        p.K_APPROVAL_DECIDED,
        {"approval_id": approval.id, "decision": decision, "decided_by": decided_by},
        approval.run_id,
    )


def cancel(run_id: str, cancelled_by: str, *, session_id: str | None = None) -> Run:
    """End a running or parked run, or dequeue a queued one, with ``cancelled``."""
    lookup = Run.objects.filter(id=run_id)
    if session_id is not None:
        lookup = lookup.filter(session_id=session_id)
    found = lookup.values_list("session_id", flat=True).first()
    if found is None:
        raise NotFound("no such run in this session")
    with transaction.atomic():
        lock_session(found)
        run = Run.objects.get(id=run_id)
        if run.status == Run.Status.FINISHED:
            raise NotPending()
        cancel_locked(run, cancelled_by)
        run.refresh_from_db()
    return run


def cancel_locked(
    run: Run,
    cancelled_by: str,
    message: str = "",
    *,
    start_next=True,
    gates: str = p.DENY,
    first: str | None = None,
) -> None:
    """Cancel ``run`` (not finished; the caller holds its session's lock):
    its open gates closed (``gates``: denied, or cancelled when their branch
    was left) with their results, then ``run.finished``.

    A run whose approved tool is running now is not finished under it: the
    cancel is recorded on the run and carried out right after the tool's
    ``tool.result`` (``runtime.toolcalls``), so the log always says what the
    tool did before it says the run ended; a turn sent meanwhile waits for it
    (``turns.open_turn``, ``cancels``)."""
    run_id = run.id
    if cancels.defer_for_tool_in_flight(run_id, cancelled_by, message, gates):
        # A question that tool asks is answered now (denied, or cancelled),
        # so that the tool ends and the cancel is carried out.
        questions.close_open(run_id, run.session_id, gates, cancelled_by)
        return
    for approval in ApprovalRequest.objects.filter(
        run_id=run_id, status=ApprovalRequest.Status.PENDING
    ):
        _record_decision(approval, gates, cancelled_by)
    # Every gate of the run whose tool never ran (denied just now, or
    # decided but its continuation not yet started) gets its result, and
    # the mark keeps a late continuation from running it.
    now = timezone.now()
    for approval in ApprovalRequest.objects.filter(run_id=run_id, executed_at__isnull=True):
        if ApprovalRequest.objects.filter(id=approval.id, executed_at__isnull=True).update(
            executed_at=now
        ):
            # Re-read after the denials above: nothing is pending any more.
            if gates == p.GATE_CANCELLED:
                output = "cancelled: the conversation moved to another branch"
            elif approval.status != ApprovalRequest.Status.APPROVED:
                output = "denied"
            else:
                output = "cancelled before it ran"
            append_event(
                run.session_id,
                p.K_TOOL_RESULT,
                {"tool_call_id": approval.tool_call_id, "ok": False, "output": output},
                run_id,
            )
    finish_run(run_id, p.STOP_CANCELLED, message, start_next=start_next, first=first)


def finish_run(
    run_id: str,
    stop_reason: str,
    message: str = "",
    *,
    worker: str | None = None,
    start_next: bool = True,
    first: str | None = None,
) -> bool:
    """Finish an active run with ``run.finished`` and start the next queued
    one (``first`` first, when given; none unless ``start_next``).

    With ``worker``, only if that worker still holds it running. Returns
    False if the run was no longer active (someone else finished it first).
    """
    with transaction.atomic():
        session_id = Run.objects.values_list("session_id", flat=True).get(id=run_id)
        session = lock_session(session_id)
        lock_user(session.owner_id)
        runs = Run.objects.filter(id=run_id, status__in=Run.ACTIVE)
        if worker is not None:
            runs = runs.filter(status=Run.Status.RUNNING, worker=worker)
        updated = runs.update(
            status=Run.Status.FINISHED,
            stop_reason=stop_reason,
            error=message,
            finished_at=timezone.now(),
            worker="",
            lease_expires_at=None,
        )
        if not updated:
            return False
        data = {"stop_reason": stop_reason}
        if stop_reason == p.STOP_ERROR:
            data["message"] = message or "the run failed"
        elif message:
            data["message"] = message
        append_event(session_id, p.K_RUN_FINISHED, data, run_id)
        if start_next:
            start_next_run(session, first)
        admit_after_commit(session.owner_id)
    return True


def admit_after_commit(owner_id: int) -> None:
    """A run of this user stopped executing: once that commits, start what waits."""
    if settings.AGENT_USER_MAX_RUNS > 0:
        transaction.on_commit(lambda: _admit_quietly(owner_id))


def _admit_quietly(owner_id: int) -> None:
    try:
        admit_waiting(owner_id)
    except Exception:
        # The sweeper admits them on its next pass.
        log.exception("admitting the waiting runs of user %s failed", owner_id)


def start_next_run(session: AgentSession, first: str | None = None) -> str | None:
    """Start the oldest queued run (``first``, if it is queued) if nothing else
    is active and its user has room (caller holds the session lock). Returns
    the run started, if any."""
    if Run.objects.filter(session_id=session.id, status__in=EXECUTING).exists():
        return None
    queued = Run.objects.filter(session_id=session.id, status=Run.Status.QUEUED)
    nxt = (first and queued.filter(id=first).first()) or queued.order_by("message_seq").first()
    if nxt is None:
        set_session_status(session, AgentSession.Status.IDLE)
        return None
    if not user_has_room(session.owner_id):
        # Stays queued; admit_waiting starts it when one of the user's runs ends.
        set_session_status(session, AgentSession.Status.RUNNING)
        return None
    now = timezone.now()
    Run.objects.filter(id=nxt.id).update(
        status=Run.Status.RUNNING, started_at=now, lease_expires_at=pickup_deadline()
    )
    metrics.QUEUE_WAIT_SECONDS.observe((now - nxt.created_at).total_seconds())
    append_event(session.id, p.K_RUN_STARTED, {"client_message_id": nxt.client_message_id}, nxt.id)
    set_session_status(session, AgentSession.Status.RUNNING)
    enqueue(nxt.id)
    return nxt.id


def park(run_id: str, worker: str, session_id: str, gate: Gate, state: dict) -> str | None:
    """Log ``gate`` (tool.call, approval.requested, run.paused) and release
    the run, its saved ``state`` with it.

    The gate row, its events and the run's saved state commit together: a
    refresh, a restart or another tab sees all of it or none of it. Returns the
    approval id, or None if the worker no longer held the run.
    """
    with transaction.atomic():
        session = lock_session(session_id)
        lock_user(session.owner_id)
        updated = Run.objects.filter(id=run_id, status=Run.Status.RUNNING, worker=worker).update(
            status=Run.Status.AWAITING_APPROVAL, worker="", lease_expires_at=None, state=state
        )
        if not updated:
            return None
        approval = ApprovalRequest.objects.create(
            session_id=session_id,
            run_id=run_id,
            tool_call_id=gate.tool_call_id,
            tool=gate.tool,
            args=gate.args,
        )
        append_events(session_id, gate.events(run_id, approval.id))
        set_session_status(session, AgentSession.Status.AWAITING_APPROVAL)
        admit_after_commit(session.owner_id)
    return approval.id


# How a run reaches an executor: ``tasks.enqueue_run``, set when the app is
# ready (``apps``). A hook, not an import: the executor drives runs, and the
# task runs the executor, so runs importing tasks would close a cycle.
_enqueue_hook: Callable[[str], None] | None = None


def set_enqueue(hook: Callable[[str], None]) -> None:
    global _enqueue_hook
    _enqueue_hook = hook


def enqueue(run_id: str) -> None:
    """Hand the run to the task framework: durably in this transaction, or after it."""
    if _enqueue_hook is None:
        raise ImproperlyConfigured("runs.enqueue before the app is ready (apps.ready sets it)")
    _enqueue_hook(run_id)
