"""Gates: what a gate is, its life, and the one function that moves it.

A gate (``ApprovalRequest``) is one thing a run waits on a person for. Its
``kind`` says which:

``approval``
    may this tool call run? The run parks (``runs.park``); the decision
    continues it at the same call (``runtime.toolcalls``).
``question``
    a question a running tool asks (``runtime.questions``): the run stays
    on its worker, whose tool waits for the answer.
``unknown_outcome``
    a worker stopped while this call ran: run it again? (``toolcalls``)

Its life is one table, ``MOVES``: a gate is born ``pending`` and leaves it
once, to the status its decision names; ``move`` is the only code that
changes a gate's status, a compare-and-set from ``pending`` in the caller's
transaction, so two deciders (two tabs, a tab and the admin, a cancel and a
person) never both win. Who won, when, and through which channel
(``CHANNELS``) is written with it.

``Gate`` is the request a run parks on: one object per gate, as the
protocol's ``Push`` is one per request. Several gates a step asks for at
once (``Step``) open together and share the step's id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from sessions_app.log.events import NewEvent
from sessions_app.models import ApprovalRequest
from sessions_app.runtime import registry
from sessions_app.wire import protocol as p
from sessions_app.wire.frames import iso

Status = ApprovalRequest.Status
Kind = ApprovalRequest.Kind

# A gate's life: from each status, the statuses it may move to. A decided
# gate is final (an empty row): deciding it again is refused, never redone.
MOVES: dict[str, frozenset[str]] = {
    Status.PENDING: frozenset(
        {
            Status.APPROVED,
            Status.EDITED,
            Status.DENIED,
            Status.ANSWERED,
            Status.EXPIRED,
            Status.CANCELLED,
        }
    ),
    Status.APPROVED: frozenset(),
    Status.EDITED: frozenset(),
    Status.DENIED: frozenset(),
    Status.ANSWERED: frozenset(),
    Status.EXPIRED: frozenset(),
    Status.CANCELLED: frozenset(),
}
# The status each decision word moves a gate to, and back (the log's word).
STATUS_OF = {
    p.APPROVE: Status.APPROVED,
    p.EDIT: Status.EDITED,
    p.DENY: Status.DENIED,
    p.RESPOND: Status.ANSWERED,
    p.ANSWER: Status.ANSWERED,
    p.GATE_EXPIRED: Status.EXPIRED,
    p.GATE_CANCELLED: Status.CANCELLED,
}
# The statuses whose call runs (with the person's arguments, when edited).
RUNS = (Status.APPROVED, Status.EDITED)
# (A question ``answered`` was answered, a call ``answered`` responded to: ``word_of``.)
DECISION_OF = {status: word for word, status in STATUS_OF.items() if word != p.ANSWER}

# Through which channel a decision came (``ApprovalRequest.decided_via``).
VIA_TAB = "tab"  # the native socket: a tab of the app
VIA_API = "api"  # the REST API, signed in (a session cookie)
VIA_API_KEY = "api_key"  # the REST API with an API key
VIA_ADMIN = "admin"
VIA_AG_UI = "ag_ui"
VIA_AI_SDK = "ai_sdk"
VIA_SERVER = "server"  # the server itself: a cancel, a branch left, a question closed
VIA_AUTO = "auto"  # a tool that runs without asking
VIA_DEADLINE = "deadline"  # nobody decided in time: the sweeper did
CHANNELS = (
    VIA_TAB,
    VIA_API,
    VIA_API_KEY,
    VIA_ADMIN,
    VIA_AG_UI,
    VIA_AI_SDK,
    VIA_SERVER,
    VIA_AUTO,
    VIA_DEADLINE,
)
# Who decided a gate its deadline decided (``decided_by``), and what the
# model is told of its call (it never ran).
DEADLINE = "deadline"
EXPIRED_OUTPUT = "expired: nobody decided before its deadline, so it did not run"

# Who decided a call that runs without asking (its gate row's ``decided_by``).
AUTO_APPROVER = "auto-approve"


@dataclass(frozen=True)
class Decision:
    """One decision of a gate, as ``deciding.decide`` takes it: the word
    (``approve``, ``deny``, ``edit``, ``respond``, ``answer``), who decides
    (``by``) through which channel (``via``), a denial's ``reason``, an
    edit's ``args``, a response's text (``response``), a question's
    ``answer`` (its form's fields), and ``whole_step``: every gate of its
    step still pending, decided alike (Approve all / Deny all)."""

    word: str
    by: str
    via: str
    reason: str = ""
    whole_step: bool = False
    args: dict | None = None
    response: str = ""
    answer: dict | None = None

    @classmethod
    def of(cls, fields: Mapping[str, Any], by: str, via: str) -> Decision:
        """A decision from its validated fields (``wire.decisions.fields_of``,
        or the socket's ``Decide``), made by ``by`` through ``via``."""
        more = {name: fields[name] for name in _FIELDS if name in fields}
        return cls(fields["decision"], by, via, **more)


_FIELDS = ("reason", "whole_step", "args", "response", "answer")


def can_move(status: str, to: str) -> bool:
    """May a gate at ``status`` move to ``to``?"""
    return to in MOVES.get(status, frozenset())


def move(approval: ApprovalRequest, decision: Decision) -> bool:
    """Decide ``approval`` with ``decision``: a compare-and-set from
    ``pending``, in the caller's transaction. False, with the row re-read,
    when it was decided first by someone else; the object holds what stands
    either way. An edit keeps the call's own arguments in ``args`` and the
    person's in ``edited_args``."""
    to = STATUS_OF[decision.word]
    if decision.via not in CHANNELS:
        raise ValueError(f"unknown channel {decision.via!r}")
    if not can_move(Status.PENDING, to):  # the table is the rule
        raise ValueError(f"a pending gate cannot become {to}")
    fields: dict[str, Any] = {
        "status": to,
        "decided_by": decision.by,
        "decided_at": timezone.now(),
        "decided_via": decision.via,
        "reason": decision.reason[: p.MAX_REASON_CHARS] if to == Status.DENIED else "",
        "edited_args": decision.args if to == Status.EDITED else None,
        "response": decision.response if to == Status.ANSWERED else "",
        "answer": decision.answer if decision.word == p.ANSWER else None,
    }
    moved = ApprovalRequest.objects.filter(id=approval.id, status=Status.PENDING).update(**fields)
    if not moved:
        approval.refresh_from_db()
        return False
    for name, value in fields.items():
        setattr(approval, name, value)
    return True


def deadline_of(tool: str) -> float:
    """How long a gate of ``tool`` waits for a person, in seconds (0: for
    ever): ``AGENT_GATE_DEADLINES[tool]``, else ``AGENT_GATE_DEADLINE_SECONDS``."""
    per_tool = settings.AGENT_GATE_DEADLINES
    per_tool = per_tool if isinstance(per_tool, dict) else {}  # the check names it
    seconds = per_tool.get(tool, settings.AGENT_GATE_DEADLINE_SECONDS)
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else 0.0


def expired_output(approval: ApprovalRequest) -> str:
    """What the model is told of a call its gate's deadline decided."""
    if approval.kind == Kind.UNKNOWN_OUTCOME:  # it may have run before
        return "expired: nobody decided in time whether to run it again, so it was not"
    return EXPIRED_OUTPUT


def word_of(approval: ApprovalRequest) -> str:
    """The decision that stands at a decided gate, as the log says it."""
    if approval.status == Status.ANSWERED and approval.answer is not None:
        return p.ANSWER
    return DECISION_OF[approval.status]


def call_args(approval: ApprovalRequest) -> dict:
    """The arguments the call runs with: the person's, when edited."""
    return approval.edited_args if approval.status == Status.EDITED else approval.args


def is_question(approval: ApprovalRequest) -> bool:
    """Is this gate a question a tool asks? Its kind says so; a row written
    by a version before kinds (a rolling deploy) says so by its prefix."""
    return approval.kind == Kind.QUESTION or approval.tool_call_id.startswith(QUESTION_PREFIX)


def current_call(state: dict[str, Any]) -> str | None:
    """The tool call a run's checkpoint waits on or runs now: its gate, or
    the first its step has still to run."""
    step = state.get("gates")
    if isinstance(step, list):
        return str(step[0]) if step else None
    return state.get("gate")


# A question's tool call id starts so (``runtime.questions``).
QUESTION_PREFIX = "ask_"


@dataclass(frozen=True)
class Gate:
    """A gated call a run parks on (``park``'s request). ``note`` says why the
    gate is asked, on both its events (an unknown outcome asked again:
    ``runtime.toolcalls``); ``close_text`` is the text streamed before the
    call that no message stated, logged as its ``assistant.message`` first."""

    tool_call_id: str
    tool: str
    args: dict
    note: str = ""
    close_text: str | None = None
    kind: str = Kind.APPROVAL
    step: str = ""
    # A call of a tool that runs without asking (``Tool.auto_approve``), in
    # a step with others: its row is approved at once and no card asks.
    auto: bool = False
    # When the server decides it ``expired`` (None: never; ``with_deadline``).
    expires_at: datetime | None = None

    def with_deadline(self, now: datetime) -> Gate:
        """This gate with its deadline from now (``deadline_of`` its tool), if
        a person decides it (not a question: it has its own, nor a call that
        runs without asking)."""
        seconds = deadline_of(self.tool)
        if not seconds or self.auto or self.kind == Kind.QUESTION or self.expires_at:
            return self
        return replace(self, expires_at=now + timedelta(seconds=seconds))

    def call(self) -> dict[str, Any]:
        """The call as its ``tool.call`` and ``approval.requested`` carry it."""
        call: dict[str, Any] = {"tool_call_id": self.tool_call_id, "tool": self.tool}
        call["args"] = self.args
        # How the cards show the arguments (the tool's own ``display``).
        if display := registry.display_of(self.tool):
            call["display"] = display
        if self.note:
            call["note"] = self.note
        return call

    def row(self, session_id: str, run_id: str) -> ApprovalRequest:
        """The gate's row, pending (not saved)."""
        row = ApprovalRequest(
            session_id=session_id,
            run_id=run_id,
            tool_call_id=self.tool_call_id,
            tool=self.tool,
            args=self.args,
            kind=self.kind,
            step=self.step,
            expires_at=self.expires_at,
        )
        if self.auto:
            row.status, row.decided_by, row.decided_via = Status.APPROVED, AUTO_APPROVER, VIA_AUTO
            row.decided_at = timezone.now()
        return row

    def events(self, run_id: str, approval_id: str) -> list[NewEvent]:
        """A gate alone: its call, its request and the run's pause."""
        return [*self.opening(run_id, approval_id), self.paused(run_id, approval_id)]

    def opening(self, run_id: str, approval_id: str) -> list[NewEvent]:
        """The text it closes, its ``tool.call`` and its ``approval.requested``."""
        call = self.call()
        # Text streamed before the call and never stated whole ends here:
        # every client's open segment closes (no caret left streaming).
        closing = (
            []
            if self.close_text is None
            else [NewEvent(p.K_ASSISTANT_MESSAGE, {"text": self.close_text}, run_id)]
        )
        opening = [*closing, NewEvent(p.K_TOOL_CALL, call, run_id)]
        if self.auto:
            return opening
        requested: dict[str, Any] = {"approval_id": approval_id, **call, "kind": self.kind}
        if self.step:
            requested["step"] = self.step
        if self.expires_at is not None:
            requested["expires_at"] = iso(self.expires_at)
        return [*opening, NewEvent(p.K_APPROVAL_REQUESTED, requested, run_id)]

    @staticmethod
    def paused(run_id: str, approval_id: str) -> NewEvent:
        paused = {"stop_reason": p.STOP_REQUIRES_APPROVAL, "approval_id": approval_id}
        return NewEvent(p.K_RUN_PAUSED, paused, run_id)
