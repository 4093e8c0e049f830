"""The ``RunContext`` an agent sees while the executor drives it (see ``runtime.base``).

Every append of a run goes through here, guarded (a run that was cancelled or
taken away cannot log another event). Most appends are plain (a delta, group
committed with the process's other runs); the last event of a step commits
with a *checkpoint* (``runtime.durable``): ``message`` always, ``delta(...,
checkpoint=True)`` when the agent asks, ``checkpoint()`` with no event.
A process that is stopping hands its runs over at their next checkpoint.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from django.conf import settings
from django.db import transaction

from sessions_app.log.events import NewEvent, RunGuard, append_events
from sessions_app.log.group_commit import append_event
from sessions_app.models import ApprovalRequest, Event, Run
from sessions_app.runtime import durable, registry, runs, turns
from sessions_app.runtime.base import AgentError, AutoApproved, Parked, ToolOutcome
from sessions_app.runtime.gates import Gate
from sessions_app.runtime.locks import lock_run_session
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import RunAborted

# How many earlier messages of its path a run's agent sees, at most.
HISTORY_MESSAGES = 50


def cut_marker(cap: int) -> str:
    """What ends a message cut at ``cap`` characters."""
    return f"\n\n[message cut at {cap:,} characters]"


def new_call_id() -> str:
    return "call_" + secrets.token_urlsafe(9)


class Context:
    """One drive of one run: what the agent sees, and the run's checkpoints."""

    def __init__(self, run: Run, worker: str):
        saved = run.state or {}
        self.run_id = run.id
        self.session_id = run.session_id
        self.text = run.text
        self.state: dict[str, Any] = dict(saved.get("agent", {}))
        # Which agent method this drive goes on with, and its outcome.
        self.entry: str = saved.get("entry", "start")
        self.outcome: ToolOutcome | None = (
            ToolOutcome(**saved["outcome"]) if saved.get("outcome") else None
        )
        # A step of several calls: the outcomes of those done so far, in order.
        self.outcomes: list[ToolOutcome] | None = (
            [ToolOutcome(**done) for done in saved["outcomes"]]
            if isinstance(saved.get("outcomes"), list)
            else None
        )
        self.worker = worker
        # This holder's fencing token (``runtime.journal``): the generation of
        # the lease its claim took.
        self.fence = run.lease_generation
        self.guard = RunGuard(run.id, worker)
        self.aborted = threading.Event()
        # Set when this process stops: the run is handed to another worker at
        # its next checkpoint (``enqueue_on_release`` False: left for the next
        # start-up, an embedded server going down).
        self.handover = threading.Event()
        self.enqueue_on_release = True
        self.handed_over = False  # released to the queue by this drive
        # Characters of the current message's deltas (a checkpoint's ``keep``).
        self._streamed = int(saved.get("keep", 0))

    # --- appends -------------------------------------------------------------------

    def append(self, kind: str, data: dict[str, Any]) -> None:
        """Append one event of this run, guarded; ``RunAborted`` once it was stopped."""
        if self.aborted.is_set():
            raise RunAborted(self.run_id)
        append_event(self.session_id, kind, data, self.run_id, guard=self.guard)

    def commit_step(
        self,
        events: list[NewEvent],
        then: Callable[[dict[str, Any]], None] | None = None,
        *,
        even_if_stopping: bool = False,
        **checkpoint: Any,
    ) -> dict[str, Any]:
        """Append ``events`` and save the checkpoint after them, in one
        transaction (with ``then(state)`` last in it); returns the run's state.
        A stopping process then hands the run over (``RunAborted`` here ends
        this drive). ``even_if_stopping``: a tool that ran has its result
        logged even when this process was asked to stop meanwhile (only the
        run's guard can refuse it)."""
        if self.aborted.is_set() and not even_if_stopping:
            raise RunAborted(self.run_id)
        saved = {
            "agent": self.state,
            "entry": self.entry,
            "outcome": asdict(self.outcome) if self.outcome else None,
            "outcomes": None if self.outcomes is None else [asdict(o) for o in self.outcomes],
            "keep": self._streamed,
            **checkpoint,
        }
        with transaction.atomic():
            # The session row's lock first: a takeover or a cancel (which take
            # it too) is seen here or waits for this commit. An append takes
            # it itself (its head bump, before its guard).
            if events:
                append_events(self.session_id, events, guard=self.guard)
            else:
                lock_run_session(self.session_id)
            state = durable.save_checkpoint(self.run_id, self.worker, saved)
            if state is None:
                raise RunAborted(self.run_id)
            if then is not None:
                then(state)
        if self.handover.is_set():
            self.hand_over(redo=False)
            raise RunAborted(self.run_id)
        return state

    def hand_over(self, *, redo: bool = True) -> None:
        """Give the run back to the queue at its last checkpoint (this process
        is stopping); a no-op if it is no longer this drive's."""
        outcome = durable.release(
            self.run_id,
            self.worker,
            p.RESUMED_HANDOVER,
            enqueue=self.enqueue_on_release,
            redo=redo,
        )
        self.handed_over = self.handed_over or outcome is not None

    # --- what an agent calls ------------------------------------------------------

    def delta(self, text: str, *, checkpoint: bool = False) -> None:
        # A message is cut at AGENT_MAX_MESSAGE_CHARS (a model looping, or
        # steered to flood the log and every tab): the deltas past it are
        # dropped, and the cut is said once, in the text itself.
        cap = settings.AGENT_MAX_MESSAGE_CHARS
        room = cap - self._streamed
        if room <= 0:
            if checkpoint:
                self.commit_step([])
            return
        if len(text) > room:
            text = text[:room] + cut_marker(cap)
        self._streamed += len(text)
        event = NewEvent(p.K_ASSISTANT_DELTA, {"text": text}, self.run_id)
        if checkpoint:
            self.commit_step([event])
        else:
            self.append(event.kind, event.data)

    def message(self, text: str) -> None:
        """The current message, whole: the end of a step, so a checkpoint."""
        self._streamed = 0  # the next message starts afresh
        cap = settings.AGENT_MAX_MESSAGE_CHARS
        if len(text) > cap:
            text = text[:cap] + cut_marker(cap)
        self.commit_step([NewEvent(p.K_ASSISTANT_MESSAGE, {"text": text}, self.run_id)])

    def checkpoint(self) -> None:
        """Save ``state`` now, with no event (between steps that log nothing)."""
        self.commit_step([])

    def request_tool(self, tool: str, args: dict[str, Any], state: dict[str, Any]) -> None:
        """One gated call: the run parks at it (``Parked``); ``resume`` goes on."""
        self._request([(tool, args)], state, alone=True)

    def request_tools(self, calls: list[tuple[str, dict[str, Any]]], state: dict[str, Any]) -> None:
        """A step of several calls (``[(tool, args), …]``, in the model's
        order): their gates open together, each decided on its own, and once
        the last is decided the approved calls run in this order;
        ``resume_all`` goes on with every outcome."""
        if not calls:
            raise AgentError("a step of no tool calls")
        self._request(calls, state, alone=False)

    def _request(
        self, calls: list[tuple[str, dict[str, Any]]], state: dict[str, Any], *, alone: bool
    ) -> None:
        for tool, args in calls:
            problem = registry.validate_args(tool, args)
            if problem:
                # No gate for a call no tool can take (an unknown tool, bad arguments).
                raise AgentError(problem)
        self.state = dict(state)
        ids = [new_call_id() for _ in calls]
        step = "" if alone else ids[0]
        asked = [
            Gate(tool_call_id, tool, args, step=step, auto=registry.is_auto_approved(tool))
            for tool_call_id, (tool, args) in zip(ids, calls, strict=True)
        ]
        where = {"gate": ids[0]} if alone else {"gates": ids}
        if all(gate.auto for gate in asked):
            self._auto_step(asked, where)
            raise AutoApproved(ids[0] if alone else ids)
        if self.park(asked, where) is None:
            raise RunAborted(self.run_id)
        raise Parked(ids[0])

    def _auto_step(self, step: list[Gate], where: dict[str, Any]) -> None:
        """Calls that run without asking (``Tool.auto_approve``), one or a
        step of them: their ``tool.call``, their gate rows approved at once
        and the checkpoint that goes on with them (``where``: its ``gate`` or
        ``gates``) commit together; the executor then runs each as any
        decided gate (marked started, its result logged once)."""
        if self._streamed:
            step = [replace(step[0], close_text=self.open_text()), *step[1:]]
        events = [event for gate in step for event in gate.opening(self.run_id, "")]

        def approve(_state: dict[str, Any]) -> None:
            ApprovalRequest.objects.bulk_create(
                [gate.row(self.session_id, self.run_id) for gate in step]
            )

        self.commit_step(events, approve, keep=0, **where)
        self._streamed = 0

    def park(self, step: list[Gate], where: dict[str, Any]) -> list[str] | None:
        """Park the run at ``step``'s gates (``where``: the checkpoint's
        ``gate`` or ``gates``, and a step's ``outcomes`` so far): their
        approval ids, or None when this worker no longer holds the run."""
        if self._streamed:  # text streamed before the calls ends here, stated whole
            step = [replace(step[0], close_text=self.open_text()), *step[1:]]
        state = {"agent": self.state, "keep": 0, **where}
        approval_ids = runs.park(self.run_id, self.worker, self.session_id, step, state=state)
        self._streamed = 0
        return approval_ids

    def open_text(self) -> str:
        """The current message's text as streamed so far (its deltas since the
        run's last message, tool call or result, each ``run.resumed`` cutting
        it back), read from the log: a drive taken over knows only its length."""
        boundary = (
            Event.objects.filter(session_id=self.session_id, run_id=self.run_id)
            .filter(kind__in=(p.K_ASSISTANT_MESSAGE, p.K_TOOL_CALL, p.K_TOOL_RESULT))
            .order_by("-seq")
            .values_list("seq", flat=True)
            .first()
        ) or 0
        text = ""
        for kind, data in (
            Event.objects.filter(session_id=self.session_id, run_id=self.run_id, seq__gt=boundary)
            .filter(kind__in=(p.K_ASSISTANT_DELTA, p.K_RUN_RESUMED))
            .order_by("seq")
            .values_list("kind", "data")
        ):
            text = text + data["text"] if kind == p.K_ASSISTANT_DELTA else text[: data["keep"]]
        return text

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and self.aborted.wait(seconds):
            raise RunAborted(self.run_id)
        if self.aborted.is_set():
            raise RunAborted(self.run_id)

    def history(self) -> list[dict[str, str]]:
        """Earlier turns of this run's path, oldest first (the last 50
        messages): a branch left behind is not part of its conversation."""
        path = turns.history_path(self.session_id, self.run_id, HISTORY_MESSAGES)
        if not path:
            return []
        texts = dict(Run.objects.filter(id__in=path).values_list("id", "text"))
        answers: dict[str, list[str]] = {}
        for run_id, data in (
            Event.objects.filter(
                session_id=self.session_id, run_id__in=path, kind=p.K_ASSISTANT_MESSAGE
            )
            .order_by("seq")
            .values_list("run_id", "data")
        ):
            answers.setdefault(run_id, []).append(data["text"])
        messages = []
        for run_id in path:
            messages.append({"role": "user", "content": texts.get(run_id, "")})
            messages += [{"role": "assistant", "content": t} for t in answers.get(run_id, ())]
        return messages[-HISTORY_MESSAGES:]
