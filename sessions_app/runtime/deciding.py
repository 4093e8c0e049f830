"""Deciding a gate: the one door every decision comes through (a tab, the
API, the admin, AG-UI, the AI SDK, a deadline), checked against its gate,
made exactly once under its session's lock, and the run continued once the
last gate of its step is decided (``runs`` holds the transitions it uses).
"""

from __future__ import annotations

import time
from dataclasses import replace

from django.db import transaction

from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime import gates as gate_model
from sessions_app.runtime import lifecycle, questions, registry, runs
from sessions_app.runtime.locks import lock_session, set_session_status
from sessions_app.server import tracing
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import NotFound, SessionError


def decide(
    approval_id: str, decision: gate_model.Decision, *, session_id: str | None = None
) -> ApprovalRequest:
    """Decide a gate exactly once: compare-and-set from pending, log, continue the run.

    The socket, the admin, the API and the dialects all come through here,
    each naming its channel (``Decision.via``: ``gates.CHANNELS``).
    ``session_id`` confines the lookup to one session (a socket may only
    decide its own). A ``Decision`` of its whole step decides every gate of
    the step still pending alike, in one transaction (Approve all / Deny
    all), each ``approval.decided`` naming the step.
    """
    if decision.word not in (*p.ALL_DECISIONS, p.GATE_EXPIRED):
        raise ValueError(decision.word)
    lookup = ApprovalRequest.objects.filter(id=approval_id)
    if session_id is not None:
        lookup = lookup.filter(session_id=session_id)
    found = lookup.values_list("session_id", "run__trace").first()
    if found is None:
        raise NotFound("no such approval in this session")
    if decision.word in CHECKED:
        # Checked before the session's lock: an MCP tool's schema may take a
        # connection to read (a gate's kind, tool and arguments never change).
        gate = lookup.only("kind", "tool", "tool_call_id", "args").get()
        decision = check_decision(gate, decision)
    # The decision belongs to its run's trace (server.tracing): the send that
    # asked for the tool, the wait at the gate, this, and the tool after it.
    ids = {"approval.id": approval_id, "decision": decision.word}
    with tracing.continued(found[1]), tracing.span("approval.decide", **ids):
        with transaction.atomic():
            session = lock_session(found[0])
            approval = ApprovalRequest.objects.select_related("run").get(id=approval_id)
            each = _step_of(approval) if decision.whole_step else [approval]
            if not each:
                raise runs.decided_error(approval)
            if decision.word == p.APPROVE and approval.status == ApprovalRequest.Status.PENDING:
                questions.check_approve(approval)
            for gate in each:
                runs.record_decision(gate, decision)
            # The wait at the gate: from the request to now.
            tracing.record(
                "approval.wait",
                int(approval.created_at.timestamp() * 1e9),
                time.time_ns(),
                **{"run.id": approval.run_id, "approval.id": approval.id, **ids},
            )
            _continue_if_step_decided(session, approval)
        return approval


# The decisions checked against their gate before they are made (``check_decision``).
CHECKED = (p.EDIT, p.RESPOND, p.ANSWER)


def check_decision(approval: ApprovalRequest, decision: gate_model.Decision) -> gate_model.Decision:
    """May ``decision`` decide ``approval`` (whatever its status)? The
    decision as it is made (an answer keeps only the fields given). An edit
    or a response decides one gated call (not a question, not a whole step);
    an edit's arguments are the tool's (its own validation: the JSON schema
    of the built-in ones, ``registry.validate_args``); an answer is a
    question's with a form, its fields checked against the form
    (``wire.forms``); an approval of a form is one its defaults answer.
    ``SessionError`` (``bad_frame``, 400) otherwise."""
    if decision.word == p.ANSWER:
        return replace(decision, answer=questions.check_answer(approval, decision.answer))
    if decision.word == p.APPROVE:
        questions.check_approve(approval)
    if decision.word not in (p.EDIT, p.RESPOND):
        return decision
    if gate_model.is_question(approval) or decision.whole_step:
        raise SessionError(
            f"'{decision.word}' decides one gated tool call, not a question or a step"
        )
    if decision.word == p.EDIT:
        problem = registry.validate_args(approval.tool, decision.args)
        if problem:
            raise SessionError(f"the edited arguments are not {approval.tool}'s: {problem}")
    return decision


def _step_of(approval: ApprovalRequest) -> list[ApprovalRequest]:
    """The gates of ``approval``'s step still pending, in the order asked
    (``approval`` alone if it has no step)."""
    if not approval.step:
        pending = approval.status == ApprovalRequest.Status.PENDING
        return [approval] if pending else []
    found = ApprovalRequest.objects.select_related("run").filter(
        run_id=approval.run_id, step=approval.step, status=ApprovalRequest.Status.PENDING
    )
    order = {tool_call_id: i for i, tool_call_id in enumerate(runs.waiting_on(approval.run))}
    return sorted(found, key=lambda gate: order.get(gate.tool_call_id, len(order)))


def _continue_if_step_decided(session: AgentSession, approval: ApprovalRequest) -> None:
    """Approved or denied, a run parked at this gate goes on at the same
    tool call once every gate it waits on is decided: the continuation runs
    the tools or reports the denials. A gate whose run is not parked at it is
    only recorded (a question, whose tool waits for it, is woken by the
    record)."""
    run = approval.run
    if run.status != Run.Status.AWAITING_APPROVAL or gate_model.is_question(approval):
        return
    # (A state naming no gate parked at this one: as a run parked before
    # checkpoints named it.)
    waits_on = runs.waiting_on(run) or [approval.tool_call_id]
    if approval.tool_call_id not in waits_on:
        return
    undecided = ApprovalRequest.objects.filter(
        run_id=run.id, tool_call_id__in=waits_on, status=ApprovalRequest.Status.PENDING
    )
    if undecided.exists():
        return  # the step goes on when its last gate is decided
    lifecycle.transition(Run.objects.filter(id=run.id), lifecycle.CONTINUE)
    set_session_status(session, AgentSession.Status.RUNNING)
    runs.enqueue(run.id)
