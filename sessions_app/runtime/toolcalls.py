"""A decided tool call: run it (or report its denial) and log its outcome exactly once.

The call is recorded as started (``ApprovalRequest.executed_at``) in a commit
of its own before the tool runs, and only while this worker holds the run.
Its ``tool.result`` commits with the run's next checkpoint (the gate cleared,
the outcome saved), so "the gate is still in the run's state" means "no
result was logged". A drive that finds its gate started but without a result
knows a worker stopped while the tool ran (docs/agents.md, "Tool calls and
crashes"):

- a tool that declares itself ``idempotent`` is run again (``write_file``
  appends once per call id, ``terminal`` only reads);
- any other is not re-run blindly: its outcome is logged as unknown and the
  run parks at a new gate asking whether to run it again.

A cancel that arrives while the tool runs waits for it (``runs.cancel_locked``
records it on the run); it is carried out here, right after the result, in the
same transaction.
"""

from __future__ import annotations

from dataclasses import asdict

from django.db import transaction
from django.utils import timezone

from sessions_app.log.events import NewEvent, append_events
from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime import gates, journal, questions, registry, runs
from sessions_app.runtime.base import Parked, ToolOutcome
from sessions_app.runtime.context import Context, new_call_id
from sessions_app.runtime.durable import UNKNOWN_OUTPUT
from sessions_app.runtime.gates import Gate, Kind
from sessions_app.runtime.locks import lock_run_session
from sessions_app.runtime.tools import workspace_for
from sessions_app.server import tracing
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import RunAborted

UNKNOWN_NOTE = "The worker stopped while this ran: run it again?"


def continue_gate(ctx: Context, tool_call_id: str) -> ToolOutcome:
    """Run (or refuse) the gated call and log its result; the outcome for
    ``agent.resume``. Raises ``Parked`` when an unknown outcome is re-gated,
    ``RunAborted`` when the run is no longer this drive's (or was cancelled
    while the tool ran)."""
    return _continue(ctx, tool_call_id, None)


def continue_step(ctx: Context, step: list[str]) -> list[ToolOutcome]:
    """Run (or refuse) a step's decided calls in the model's order, each
    exactly once, after the outcomes its checkpoint holds (``ctx.outcomes``:
    a drive taken over mid-step goes on after the last logged result); every
    outcome for ``agent.resume_all``. Each result commits with a checkpoint
    naming the calls still to run."""
    if runs.wait_again(ctx.run_id, ctx.worker, ctx.session_id, step):
        raise Parked(step[0])  # a gate of it still waits: nothing runs before the last
    done = list(ctx.outcomes or [])
    for index, tool_call_id in enumerate(step):
        ctx.outcomes = done
        done.append(_continue(ctx, tool_call_id, step[index + 1 :]))
    ctx.entry, ctx.outcomes = "start", None
    return done


def _continue(ctx: Context, tool_call_id: str, rest: list[str] | None) -> ToolOutcome:
    """One decided call (``rest``: a step's calls after it, or None alone)."""
    approval = ApprovalRequest.objects.get(tool_call_id=tool_call_id)
    approved = approval.status in gates.RUNS
    # A denial or a response runs nothing: it is marked with its result, in one commit.
    first = approved and _mark_started(ctx, approval)
    if approval.status == ApprovalRequest.Status.ANSWERED:
        ok, output = True, approval.response  # the person's answer is the result
    elif approval.status == ApprovalRequest.Status.EXPIRED:
        ok, output = False, gates.expired_output(approval)
    elif not approved:
        ok, output = False, denial(approval)
    elif first or registry.is_idempotent(approval.tool):
        ok, output = _execute(ctx, approval)
    else:
        _unknown(ctx, approval, rest)  # raises
    outcome = ToolOutcome(
        tool_call_id=tool_call_id,
        tool=approval.tool,
        args=gates.call_args(approval),
        approved=approved,
        ok=ok,
        output=output,
    )
    _log_result(ctx, outcome, rest, mark=None if approved else approval.id)
    return outcome


def denial(approval: ApprovalRequest) -> str:
    """What a denied call answers (the model is told the person's reason)."""
    return f"denied: {approval.reason}" if approval.reason else "denied"


def _mark_started(ctx: Context, approval: ApprovalRequest) -> bool:
    """Record the call as started, if this worker still holds the run (under
    the session lock: a cancel either sees the mark or comes after it).
    False: a drive before this one started it."""
    with transaction.atomic():
        lock_run_session(ctx.session_id)
        held = Run.objects.filter(id=ctx.run_id, status=Run.Status.RUNNING, worker=ctx.worker)
        if not held.exists():
            raise RunAborted(ctx.run_id)
        return bool(
            ApprovalRequest.objects.filter(id=approval.id, executed_at__isnull=True).update(
                executed_at=timezone.now()
            )
        )


def _execute(ctx: Context, approval: ApprovalRequest) -> tuple[bool, str]:
    ids = {"run.id": ctx.run_id, "tool": approval.tool, "tool_call.id": approval.tool_call_id}
    with (
        tracing.span("tool.execute", **ids) as span,
        questions.asking(ctx, approval.tool),
        journal.fenced(ctx.fence),
    ):
        ok, output = registry.execute(
            approval.tool,
            gates.call_args(approval),
            workspace_for(ctx.session_id),
            approval.tool_call_id,
        )
        if span is not None:
            span.set_attribute("ok", ok)
    return ok, output


def _log_result(
    ctx: Context, outcome: ToolOutcome, rest: list[str] | None, mark: str | None = None
) -> None:
    """``tool.result`` and the checkpoint after it, then a cancel that waited.
    ``rest``: a step's calls still to run (the checkpoint's ``gates``), or
    None for a call alone. ``mark``: the gate to mark as done in the same
    commit (a denial's)."""
    result = {"tool_call_id": outcome.tool_call_id, "ok": outcome.ok, "output": outcome.output}
    if rest is None:
        ctx.entry, ctx.outcome = "resume", outcome
        where: dict = {"gate": None}
    else:
        ctx.entry, ctx.outcomes = "resume", [*(ctx.outcomes or []), outcome]
        where = {"gates": rest} if rest else {}
    cancelled = []

    def waited(state: dict) -> None:
        if mark is not None and not ApprovalRequest.objects.filter(
            id=mark, executed_at__isnull=True
        ).update(executed_at=timezone.now()):
            raise RunAborted(ctx.run_id)  # a cancel logged its result first
        if state.get("cancel"):
            _cancel_now(ctx.run_id, state["cancel"])
            cancelled.append(True)

    ctx.commit_step(
        [NewEvent(p.K_TOOL_RESULT, result, ctx.run_id)],
        then=waited,
        even_if_stopping=True,
        **where,
    )
    if cancelled:
        raise RunAborted(ctx.run_id)
    if rest is None:
        # Only this checkpoint goes on with ``resume``; any later one the
        # agent takes holds the outcome in its own state and goes on with
        # ``start``.
        ctx.entry, ctx.outcome = "start", None


def _unknown(ctx: Context, approval: ApprovalRequest, rest: list[str] | None) -> None:
    """A worker stopped while this call ran: say so, then ask again (or carry
    out the cancel that waited for it). In a step, the new gate takes the
    call's place: the step's calls after it and its outcomes so far wait
    with it."""
    result = {"tool_call_id": approval.tool_call_id, "ok": False, "output": UNKNOWN_OUTPUT}
    approval_id = None
    # What the call asked before the worker stopped waits for nobody now.
    questions.close_open(ctx.run_id, ctx.session_id, p.GATE_CANCELLED, "the worker stopped")
    with transaction.atomic():
        append_events(
            ctx.session_id, [NewEvent(p.K_TOOL_RESULT, result, ctx.run_id)], guard=ctx.guard
        )
        saved = Run.objects.values_list("state", flat=True).get(id=ctx.run_id) or {}
        if saved.get("cancel"):
            Run.objects.filter(id=ctx.run_id).update(state={"agent": ctx.state, "keep": 0})
            _cancel_now(ctx.run_id, saved["cancel"])
        else:
            approval_id = _ask_again(ctx, approval, rest)
    if approval_id is None:
        raise RunAborted(ctx.run_id)
    raise Parked(approval_id)


def _ask_again(ctx: Context, approval: ApprovalRequest, rest: list[str] | None) -> str | None:
    """The unknown outcome's gate: run the call again?"""
    tool_call_id = new_call_id()
    args = gates.call_args(approval)  # asked again as it ran: edited, if it was
    again = Gate(tool_call_id, approval.tool, args, UNKNOWN_NOTE, kind=Kind.UNKNOWN_OUTCOME)
    if rest is None:
        where: dict = {"gate": tool_call_id}
    else:
        done = [asdict(outcome) for outcome in ctx.outcomes or []]
        where = {"gates": [tool_call_id, *rest], "outcomes": done}
    parked = ctx.park([again], where)
    return parked[0] if parked else None


def _cancel_now(run_id: str, waiting: dict) -> None:
    run = Run.objects.get(id=run_id)
    # What waited for it starts next: the turn sent with the cancel first.
    runs.cancel_locked(
        run,
        str(waiting.get("by", "")),
        str(waiting.get("message", "")),
        gates=str(waiting.get("gates", p.DENY)),
        first=waiting.get("next"),
    )
