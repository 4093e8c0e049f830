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
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from sessions_app.log.events import append_event, append_events
from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime import cancels, lifecycle, questions, wakeups
from sessions_app.runtime import gates as gate_model
from sessions_app.runtime.gates import VIA_SERVER, Gate
from sessions_app.runtime.locks import lock_session, lock_user, set_session_status
from sessions_app.server import metrics
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import (
    AlreadyDecided,
    ApprovalCancelled,
    NotFound,
    NotPending,
    RunAborted,
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


def waiting_on(run: Run) -> list[str]:
    """The tool calls a parked run waits on, in the order the model asked
    them: its step's (``durable``: ``gates``) or its one ``gate``."""
    state = run.state or {}
    if isinstance(state.get("gates"), list):
        return [str(tool_call_id) for tool_call_id in state["gates"]]
    return [state["gate"]] if state.get("gate") else []


def decided_error(approval: ApprovalRequest) -> AlreadyDecided | ApprovalCancelled:
    """Why a gate that is no longer pending cannot be decided."""
    if approval.status == ApprovalRequest.Status.CANCELLED:
        return ApprovalCancelled(approval.decided_by)
    return AlreadyDecided(gate_model.word_of(approval), approval.decided_by)


def record_decision(approval: ApprovalRequest, decision: gate_model.Decision) -> None:
    """Move a pending gate (``gates.move``) and log its ``approval.decided``
    (the caller holds its session's lock); ``AlreadyDecided`` or
    ``ApprovalCancelled`` when another decision stood first."""
    if not gate_model.move(approval, decision):
        raise decided_error(approval)
    if gate_model.is_question(approval):
        wakeups.wake_on_commit(approval.id)
    decided = {"approval_id": approval.id, "decision": decision.word, "decided_by": decision.by}
    if approval.reason:
        decided["reason"] = approval.reason
    if approval.edited_args is not None:
        decided["args"] = approval.edited_args  # what runs; tool.call keeps the model's
    if approval.response:
        decided["response"] = approval.response
    if approval.answer is not None:
        decided["answer"] = approval.answer
    if decision.whole_step and approval.step:
        decided["step"] = approval.step  # decided with its whole step, at once
    append_event(approval.session_id, p.K_APPROVAL_DECIDED, decided, approval.run_id)


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
    close_gates(run, gates, cancelled_by)
    finish_run(run_id, p.STOP_CANCELLED, message, start_next=start_next, first=first)


def close_gates(run: Run, gates: str, by: str) -> None:
    """Close every gate of a run that ends (its session's lock held): those
    pending decided ``gates`` (denied, or cancelled when their branch was
    left) by ``by``, and every one whose tool never ran (denied just now,
    or decided but its continuation not yet started, a step's later calls)
    given its result; the mark keeps a late continuation from running it."""
    for approval in ApprovalRequest.objects.filter(
        run_id=run.id, status=ApprovalRequest.Status.PENDING
    ):
        record_decision(approval, gate_model.Decision(gates, by, VIA_SERVER))
    now = timezone.now()
    for approval in ApprovalRequest.objects.filter(run_id=run.id, executed_at__isnull=True):
        if not ApprovalRequest.objects.filter(id=approval.id, executed_at__isnull=True).update(
            executed_at=now
        ):
            continue
        # Re-read after the decisions above: nothing is pending any more.
        if gates == p.GATE_CANCELLED:
            output = "cancelled: the conversation moved to another branch"
        elif approval.status in gate_model.RUNS:
            output = "cancelled before it ran"
        elif approval.status == ApprovalRequest.Status.ANSWERED:
            output = "cancelled before the answer reached the agent"
        elif approval.status == ApprovalRequest.Status.EXPIRED:
            output = gate_model.expired_output(approval)
        else:
            output = "denied"
        append_event(
            run.session_id,
            p.K_TOOL_RESULT,
            {"tool_call_id": approval.tool_call_id, "ok": False, "output": output},
            run.id,
        )


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
        runs = Run.objects.filter(id=run_id)
        if worker is not None:
            runs = runs.filter(status=Run.Status.RUNNING, worker=worker)
        updated = lifecycle.transition(
            runs,
            lifecycle.FINISH,
            stop_reason=stop_reason,
            error=message,
            finished_at=timezone.now(),
        )
        if not updated:
            return False
        if stop_reason == p.STOP_ERROR:
            # A run that failed mid-step: no gate of it is left waiting, and
            # no call of it without its result.
            close_gates(Run(id=run_id, session_id=session_id), p.DENY, "the run failed")
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
    if not lifecycle.transition(Run.objects.filter(id=nxt.id), lifecycle.ADMIT, started_at=now):
        return None  # no longer queued (under the lock it always is: a guard)
    metrics.QUEUE_WAIT_SECONDS.observe((now - nxt.created_at).total_seconds())
    append_event(session.id, p.K_RUN_STARTED, {"client_message_id": nxt.client_message_id}, nxt.id)
    set_session_status(session, AgentSession.Status.RUNNING)
    enqueue(nxt.id)
    return nxt.id


def park(
    run_id: str, worker: str, session_id: str, step: list[Gate], state: dict
) -> list[str] | None:
    """Log the ``step``'s gates (each its tool.call and approval.requested,
    then one run.paused) and release the run, its saved ``state`` with it.

    The gate rows, their events and the run's saved state commit together: a
    refresh, a restart or another tab sees all of it or none of it. Returns the
    approval ids in the step's order, or None if the worker no longer held
    the run.
    """
    with transaction.atomic():
        session = lock_session(session_id)
        lock_user(session.owner_id)
        held = Run.objects.filter(id=run_id, worker=worker)
        updated = lifecycle.transition(held, lifecycle.PARK, state=state)
        if not updated:
            return None
        now = timezone.now()
        step = [gate.with_deadline(now) for gate in step]
        rows = ApprovalRequest.objects.bulk_create([gate.row(session_id, run_id) for gate in step])
        events = []
        for gate, row in zip(step, rows, strict=True):
            events += gate.opening(run_id, row.id)
        asked = [row.id for gate, row in zip(step, rows, strict=True) if not gate.auto]
        paused = Gate.paused(run_id, asked[0])
        if len(asked) > 1:
            paused.data["approval_ids"] = asked
        append_events(session_id, [*events, paused])
        set_session_status(session, AgentSession.Status.AWAITING_APPROVAL)
        admit_after_commit(session.owner_id)
    return [row.id for row in rows]


def wait_again(run_id: str, worker: str, session_id: str, step: list[str]) -> bool:
    """A run continued while a gate of its ``step`` still waits (a decision
    made by a version that knew no steps, in a rolling deploy): park it
    again, if this worker holds it and a gate still waits once the session
    is locked (a decision made meanwhile continues it then, or this goes on).
    True when parked."""
    pending = ApprovalRequest.objects.filter(
        run_id=run_id, tool_call_id__in=step, status=ApprovalRequest.Status.PENDING
    )
    if not pending.exists():
        return False  # a gate decided stays decided: no lock needed to know it
    with transaction.atomic():
        session = lock_session(session_id)
        if not pending.exists():
            return False
        parked = lifecycle.transition(Run.objects.filter(id=run_id, worker=worker), lifecycle.PARK)
        if not parked:
            raise RunAborted(run_id)
        # Every tab shows it waiting again.
        first = pending.order_by("created_at").values_list("id", flat=True).first()
        append_events(session_id, [Gate.paused(run_id, first)])
        set_session_status(session, AgentSession.Status.AWAITING_APPROVAL)
        admit_after_commit(session.owner_id)
    return True


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
