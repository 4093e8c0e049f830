"""Durable runs: checkpoints, and a run going on in another process.

A run is a sequence of steps: a model call and what it streamed, or a tool
call and its result (docs/agents.md, "Steps and checkpoints"). After a step the
executor saves a *checkpoint* on the run (``Run.state``), in the transaction
that logs the step's last event, so the log and the checkpoint never disagree:

``agent``
    the agent's own state (``ctx.state``) at the checkpoint;
``entry``
    which method goes on from it: ``start``, or ``resume`` with ``outcome``
    (the tool call's outcome, once its result is logged);
``gate``
    the tool call the run waits on or is running (its result not yet logged);
``gates``, ``outcomes``
    a step of several calls (``Context.request_tools``): those it waits on
    or has still to run, in the model's order, the first running now, and
    the outcomes of those done (``resume_all`` goes on with them all);
``keep``
    characters of the current message streamed up to the checkpoint;
``crashes``
    how often a worker died in the step after it (reset by every checkpoint);
``cancel``
    a cancel that waits for the tool in flight (``runs.cancel_locked``).

``release`` gives a running run back to the queue at its last checkpoint: the
sweeper does it for a run whose worker stopped renewing its lease (a
*takeover*: kill -9, out of memory, host lost), a stopping worker for its own
runs (a *hand-over*: SIGTERM, a deploy). Either way ``run.resumed`` is logged
with ``keep``: the text a cut step had streamed past its checkpoint is
superseded, and the step is redone from its start by whichever worker claims
the run next. A step that takes its worker down ``AGENT_RUN_MAX_CRASHES``
times finishes the run ``error``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from sessions_app.log.events import append_event
from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime import gates as gate_model
from sessions_app.runtime import lifecycle, questions, runs
from sessions_app.runtime.locks import lock_session
from sessions_app.server import metrics
from sessions_app.wire import protocol as p

log = logging.getLogger(__name__)

# Keys a checkpoint writes; anything else in ``Run.state`` (a waiting cancel)
# is kept as it is.
_CHECKPOINT_KEYS = ("agent", "entry", "outcome", "outcomes", "gate", "gates", "keep", "crashes")
_SAVE = (
    "UPDATE sessions_app_run SET state = (COALESCE(state, '{}'::jsonb) - %s::text[]) || %s::jsonb "
    "WHERE id = %s AND status = 'running' AND worker = %s RETURNING state"
)


# A started tool call's result when its worker stopped before logging one.
UNKNOWN_OUTPUT = "unknown: the worker stopped while this ran, so whether it took effect is unknown"


def _unknown_result(session_id: str, run_id: str, tool_call_id: str | None) -> None:
    """The run ends with a call started and no result: say it is unknown."""
    if (
        tool_call_id
        and ApprovalRequest.objects.filter(
            tool_call_id=tool_call_id, executed_at__isnull=False
        ).exists()
    ):
        data = {"tool_call_id": tool_call_id, "ok": False, "output": UNKNOWN_OUTPUT}
        append_event(session_id, p.K_TOOL_RESULT, data, run_id)


def crash_limit_message(crashes: int) -> str:
    return (
        f"this run's step stopped its worker {crashes} times; it is not retried again "
        "(AGENT_RUN_MAX_CRASHES)"
    )


def save_checkpoint(run_id: str, worker: str, checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """Write ``checkpoint`` on the run if ``worker`` still holds it; returns the
    run's whole state after, or None if the run is no longer this worker's.

    Call it inside the transaction that appended the step's last event,
    holding the session row's lock (``Context.commit_step``), so a cancel or a
    takeover cannot interleave."""
    fresh = {k: v for k, v in checkpoint.items() if v is not None}
    fresh["crashes"] = 0
    if connection.vendor == "postgresql":
        # One statement (a checkpoint a second a run: its round trips count).
        with connection.cursor() as cursor:
            cursor.execute(_SAVE, [list(_CHECKPOINT_KEYS), json.dumps(fresh), run_id, worker])
            row = cursor.fetchone()
        if row is None:
            return None
        return row[0] if isinstance(row[0], dict) else json.loads(row[0])
    held = Run.objects.filter(id=run_id, status=Run.Status.RUNNING, worker=worker)
    saved = held.values_list("state", flat=True).first()
    if saved is None:
        return None
    state = {k: v for k, v in (saved or {}).items() if k not in _CHECKPOINT_KEYS}
    state.update(fresh)
    if not held.update(state=state):
        return None
    return state


def release(
    run_id: str,
    worker: str,
    reason: str,
    *,
    lease_expired: bool = False,
    enqueue: bool = True,
    redo: bool = True,
) -> str | None:
    """Give a running run held by ``worker`` back to the queue at its last
    checkpoint, with ``run.resumed``; what it was doing since is redone.

    ``reason``: ``takeover`` (its worker died: counts against the crash
    budget; with ``lease_expired`` only if the lease lapsed, checked under the
    lock) or ``handover`` (its worker is stopping). ``enqueue`` False leaves
    it for the next start-up to enqueue (an embedded server shutting down);
    ``redo`` False: released right at a checkpoint, no step is cut.
    Returns ``resumed``, ``error`` (the budget is spent) or None (the run was
    not ``worker``'s any more: finished, cancelled, or released already)."""
    with transaction.atomic():
        session_id = Run.objects.values_list("session_id", flat=True).filter(id=run_id).first()
        if session_id is None:
            return None
        lock_session(session_id)
        held = Run.objects.filter(id=run_id, status=Run.Status.RUNNING, worker=worker)
        if lease_expired:
            held = held.filter(lease_expires_at__lt=Now())
        state = held.values_list("state", flat=True).first()
        if state is None:
            return None
        state = dict(state or {})
        crashed = reason == p.RESUMED_TAKEOVER
        if crashed:
            state["crashes"] = int(state.get("crashes", 0)) + 1
            if state["crashes"] >= settings.AGENT_RUN_MAX_CRASHES:
                _budget_spent(run_id, session_id, worker, state)
                return "error"
        if not lifecycle.transition(
            Run.objects.filter(id=run_id, worker=worker), lifecycle.RELEASE, state=state
        ):
            return None  # (the held read above, under the lock, says it cannot be)
        append_event(
            session_id,
            p.K_RUN_RESUMED,
            {"reason": reason, "keep": int(state.get("keep", 0))},
            run_id,
        )
        if enqueue:
            runs.enqueue(run_id)
    _count_release(run_id, worker, crashed, redo)
    return "resumed"


def _budget_spent(run_id: str, session_id: str, worker: str, state: dict[str, Any]) -> None:
    """The run's step stopped its worker ``AGENT_RUN_MAX_CRASHES`` times: it
    ends ``error``, its open questions closed and its gated call's outcome
    logged unknown (in the caller's transaction)."""
    Run.objects.filter(id=run_id).update(state=state)
    questions.close_open(run_id, session_id, p.GATE_CANCELLED, "the worker stopped")
    _unknown_result(session_id, run_id, gate_model.current_call(state))
    runs.finish_run(
        run_id,
        p.STOP_ERROR,
        crash_limit_message(state["crashes"]),
        worker=worker,
        # A turn sent with a cancel that waited starts first.
        first=(state.get("cancel") or {}).get("next"),
    )
    log.error(
        "run %s finished error: its step stopped its worker %s times",
        run_id,
        state["crashes"],
        extra={"run_id": run_id},
    )


def _count_release(run_id: str, worker: str, crashed: bool, redo: bool) -> None:
    if redo:
        metrics.STEPS_REDONE.inc()
    if crashed:
        metrics.RUNS_TAKEN_OVER.inc()
        log.warning(
            "run %s taken over from %s at its last checkpoint",
            run_id,
            worker,
            extra={"run_id": run_id},
        )
    else:
        metrics.RUNS_HANDED_OVER.inc()
        log.info("run %s handed over by %s", run_id, worker, extra={"run_id": run_id})
