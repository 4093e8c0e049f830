"""Questions: a gate that a tool asks while it runs (an MCP server's
elicitation, ``runtime.mcp``), answered by a person like any gate.

A gated call parks its run: the worker lets it go, and the decision starts
it again. A question cannot: the tool is in the middle of its call, and
the MCP connection that asked holds the answer's place. So the run stays
``running`` on its worker, whose tool thread waits here (``wakeups``), and
the log says what a gate says, so that every client shows it as one: the
question's own ``tool.call`` (``tool_call_id`` ``ask_…``, the asking tool's
name, ``args`` ``{"message", "schema", "answer"}``), ``approval.requested``
with the server's message as its ``note``, and ``run.paused``. ``schema`` is
the form (``wire.forms``); the decision ``answer`` fills it in, checked
against it here (``check_answer``); approve answers with ``args.answer``,
the form's defaults, and only a form whose defaults answer it may be
approved (``check_approve``); deny declines. The decision is made once, from
any tab, the API or the admin (``deciding.decide``, which continues only a
parked run at its own gate, never for a question). Then the question's
``tool.result`` (``accepted``, ``declined`` or ``cancelled``), and the tool
goes on with what was answered.

A question unanswered after ``AGENT_MCP_ASK_SECONDS``, asked after its
run was stopped, or whose call, worker or drive ends meanwhile (a deploy, a
takeover after a crash), is closed ``cancelled``; a cancel of its run
denies it (the cancel is carried out when the tool ends). ``close_open``
does it, under the session's lock, for whichever comes first: the waiting
thread, the tool call's end (``asking``: before the call's own result is
logged), a cancel, or the drive that takes the run over; a question is
closed, and its result logged, once.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from sessions_app.log.events import NewEvent, RunGuard, append_events
from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime import gates, wakeups
from sessions_app.runtime.locks import lock_run_session, set_session_status
from sessions_app.wire import forms
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import RunAborted, SessionError, SessionGone

log = logging.getLogger(__name__)

PREFIX = gates.QUESTION_PREFIX
Status = ApprovalRequest.Status
# A waiting thread reads its gate's row at least this often (a wake-up lost
# on its way costs no more).
RECHECK_SECONDS = 2.0
OUTPUTS = {
    ApprovalRequest.Status.APPROVED: "accepted",
    ApprovalRequest.Status.ANSWERED: "accepted",
    ApprovalRequest.Status.DENIED: "declined",
}
# A question's row: by its kind, or by its prefix when a version before
# kinds wrote it (a rolling deploy).
_QUESTIONS = Q(kind=gates.Kind.QUESTION) | Q(tool_call_id__startswith=PREFIX)


_current: ContextVar[Asker | None] = ContextVar("asker", default=None)


@contextmanager
def asking(ctx, tool: str):
    """While ``tool`` runs for the drive ``ctx``, ``current()`` is how it
    asks; when the call ends, what it asked and left open is closed (before
    the call's result is logged)."""
    asker = Asker(ctx, tool)
    token = _current.set(asker)
    try:
        yield
    finally:
        _current.reset(token)
        asker.stop()
        if asker.asked:
            # No longer this drive's (RunAborted): whoever took it closes them.
            with suppress(RunAborted, SessionGone):
                close_open(
                    ctx.run_id,
                    ctx.session_id,
                    p.GATE_CANCELLED,
                    "the call ended",
                    only=asker.asked,
                    guard=ctx.guard,
                )


def current() -> Asker | None:
    return _current.get()


class Asker:
    """How one tool call of one drive asks the user (``ask``, on any thread)."""

    def __init__(self, ctx, tool: str) -> None:
        self.ctx = ctx
        self.tool = tool
        self.stopped = threading.Event()
        self.waiting: str | None = None  # the question it waits on
        self.asked: list[str] = []  # every question it opened

    def stop(self) -> None:
        """The call that asked has ended (its server gone): stop waiting."""
        self.stopped.set()
        if self.waiting is not None:
            wakeups.wake_now(self.waiting)

    def ask(self, message: str, schema: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        """Log the question (``schema``: its form, ``wire.forms``), wait for
        its decision, log its result; the decision (``approve``, ``answer``,
        ``deny``, or ``cancelled`` when it was not decided: the run stopped,
        or nobody answered in time) and what it answered (the form's fields:
        a person's answer, or its defaults approved; None otherwise)."""
        try:
            approval_id = self._open(message, schema)
        except (RunAborted, SessionGone):
            return p.GATE_CANCELLED, None
        except Exception:  # the server hears "cancel"; its connection stays
            log.exception("run %s: could not ask the question", self.ctx.run_id)
            return p.GATE_CANCELLED, None
        if approval_id is None:
            return p.GATE_CANCELLED, None
        why = "unanswered"
        try:
            self._wait(approval_id)
        except Exception:
            log.exception("run %s: waiting for question %s failed", self.ctx.run_id, approval_id)
            why = "failed"
        else:
            if self.ctx.aborted.is_set() or self.stopped.is_set():
                why = "stopped"
        finally:
            self.waiting = None
        try:
            closed = close_open(
                self.ctx.run_id,
                self.ctx.session_id,
                p.GATE_CANCELLED,
                why,
                only=[approval_id],
                guard=self.ctx.guard,
            )
        except Exception:  # gone with its session, or the run no longer this drive's
            return p.GATE_CANCELLED, None
        decision = closed.get(approval_id, p.GATE_CANCELLED)
        if decision not in (p.APPROVE, p.ANSWER):
            return decision, None
        answer = answered(approval_id)
        return (decision, answer) if answer is not None else (p.GATE_CANCELLED, None)

    def _wait(self, approval_id: str) -> None:
        """Until the question is decided, the run or the call stops, or time is up."""
        with wakeups.listening(approval_id) as waiter:
            self.waiting = approval_id
            deadline = time.monotonic() + settings.AGENT_MCP_ASK_SECONDS
            while _status(approval_id) == ApprovalRequest.Status.PENDING:
                left = deadline - time.monotonic()
                if self.ctx.aborted.is_set() or self.stopped.is_set() or left <= 0:
                    return
                waiter.wait(min(RECHECK_SECONDS, left))

    def _open(self, message: str, schema: dict[str, Any]) -> str | None:
        """The question's gate and events, if this drive still holds the run."""
        ctx = self.ctx
        gate = gates.Gate(
            PREFIX + secrets.token_urlsafe(9),
            self.tool,
            asked(message, schema),
            note_of(message, forms.defaults(schema)),
            kind=gates.Kind.QUESTION,
        )
        with transaction.atomic():
            session = lock_run_session(ctx.session_id)
            held = (
                Run.objects.filter(id=ctx.run_id, status=Run.Status.RUNNING, worker=ctx.worker)
                .values_list("state", flat=True)
                .first()
            )
            # Not this drive's, or stopped already (a cancel waits for the tool).
            if held is None or (held or {}).get("cancel") or self.stopped.is_set():
                return None
            approval = gate.row(ctx.session_id, ctx.run_id)
            approval.save()
            append_events(ctx.session_id, gate.events(ctx.run_id, approval.id), guard=ctx.guard)
            set_session_status(session, AgentSession.Status.AWAITING_APPROVAL)
        self.asked.append(approval.id)
        return approval.id


def asked(message: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A question's arguments: its message, its form, and what approving
    answers (the form's defaults; absent when they do not answer it)."""
    args: dict[str, Any] = {"message": message, "schema": schema}
    defaults = forms.defaults(schema)
    if defaults is not None:
        args["answer"] = defaults
    return args


def note_of(message: str, defaults: dict[str, Any] | None) -> str:
    """What the card says: the message, and what approving answers."""
    shown = ", ".join(f"{key} = {json.dumps(value)}" for key, value in (defaults or {}).items())
    return message + (f"\n\nApproving answers: {shown}" if shown else "")


def check_answer(approval: ApprovalRequest, answer: Any) -> dict[str, Any]:
    """What ``answer`` answers of ``approval``'s form (the fields given, as
    the tool gets them): a question with a form, and the fields its form
    asks, each valid (``SessionError`` says what is not)."""
    schema = (approval.args or {}).get("schema") if gates.is_question(approval) else None
    if not isinstance(schema, dict):
        raise SessionError("'answer' answers a question's form; this gate has none")
    clean, errors = forms.check(schema, answer)
    if errors:
        raise SessionError(f"the answer does not fit the form: {forms.errors_text(errors)}")
    return clean


def check_approve(approval: ApprovalRequest) -> None:
    """May approving answer ``approval``? Not a question whose form its
    defaults do not answer (a field to type): that one is answered."""
    args = approval.args or {}
    if gates.is_question(approval) and "schema" in args and "answer" not in args:
        raise SessionError("this question asks for typed fields: answer its form")


def answered(approval_id: str) -> dict[str, Any] | None:
    """What a decided question answers: the person's fields, else what
    approving answers; None when neither is there (a form approved by a
    version that did not check it, in a rolling deploy: no answer)."""
    row = ApprovalRequest.objects.filter(id=approval_id).values_list("answer", "args").first()
    if row is None:
        return None
    answer, args = row
    args = args or {}
    if answer is not None:
        return forms.check(args.get("schema") or {}, answer)[0]
    if "answer" in args:
        return args["answer"]
    return None if "schema" in args else {}


def _status(approval_id: str) -> str | None:
    """The question's status; None once it is gone (with its session)."""
    return ApprovalRequest.objects.filter(id=approval_id).values_list("status", flat=True).first()


def waiting(session_id: str) -> bool:
    """Does a question of the session wait for a person?"""
    pending = ApprovalRequest.objects.filter(
        session_id=session_id, status=ApprovalRequest.Status.PENDING
    )
    return pending.filter(_QUESTIONS).exists()


def close_open(
    run_id: str,
    session_id: str,
    decision: str,
    by: str,
    *,
    only: list[str] | None = None,
    guard: RunGuard | None = None,
) -> dict[str, str]:
    """Close the run's questions still pending with ``decision`` (``only``:
    those), and log the result of each question not yet given one; the
    decision each of them stands at. With ``guard``, only while that drive
    holds the run (``RunAborted`` otherwise). The session goes back to
    ``running`` when its run still is and nothing else waits."""
    out: dict[str, str] = {}
    with transaction.atomic():
        session = lock_run_session(session_id)
        asked = ApprovalRequest.objects.filter(_QUESTIONS, run_id=run_id)
        if only is not None:
            asked = asked.filter(id__in=only)
        events: list[NewEvent] = []
        now = timezone.now()
        for question in asked.filter(executed_at__isnull=True):
            if question.status == ApprovalRequest.Status.PENDING and gates.move(
                question, gates.Decision(decision, by, gates.VIA_SERVER)
            ):
                decided = {"approval_id": question.id, "decision": decision, "decided_by": by}
                events.append(NewEvent(p.K_APPROVAL_DECIDED, decided, run_id))
                wakeups.wake_on_commit(question.id)
            question.executed_at = now
            question.save(update_fields=["executed_at"])
            result = {
                "tool_call_id": question.tool_call_id,
                "ok": question.status in (Status.APPROVED, Status.ANSWERED),
                "output": OUTPUTS.get(question.status, "cancelled"),
            }
            events.append(NewEvent(p.K_TOOL_RESULT, result, run_id))
        append_events(session_id, events, guard=guard)
        for question in asked:
            pending = question.status == ApprovalRequest.Status.PENDING
            out[question.id] = p.GATE_CANCELLED if pending else gates.word_of(question)
        running = Run.objects.filter(id=run_id, status=Run.Status.RUNNING).exists()
        if (
            running
            and session.status == AgentSession.Status.AWAITING_APPROVAL
            and not waiting(session_id)
        ):
            set_session_status(session, AgentSession.Status.RUNNING)
    return out
