"""Executing one run: claim it, drive the agent, keep the lease, finish it.

``execute_run`` is what the task framework calls, on a thread of the process's
run pool (``runtime.pool``), in a worker process or in the embedded server. It
claims the run with a compare-and-set (so a task delivered twice executes
once), has the process's ``LeaseKeeper`` renew the run's lease while it works,
and appends every event under a ``RunGuard`` so that a run which was cancelled
or taken away cannot log another event. Many runs execute at once in one
process; each has its own context, guard and lease.

A gated tool call executes at most once: the continuation marks the gate's
``executed_at`` in its own transaction before running the tool. If the process
dies between that mark and the result, the run is finished ``interrupted`` by
the sweeper and the tool is never run a second time.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from sessions_app.log.events import RunGuard
from sessions_app.log.group_commit import append_event
from sessions_app.models import ApprovalRequest, Event, Run
from sessions_app.runtime import leases, registry, runs, turns
from sessions_app.runtime.agents import get_agent
from sessions_app.runtime.base import AgentError, Parked, ToolOutcome
from sessions_app.runtime.registry import execute
from sessions_app.runtime.tools import workspace_for
from sessions_app.server import tracing
from sessions_app.server.identity import worker_id
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import RunAborted, SessionGone

log = logging.getLogger(__name__)

# How many earlier messages of its path a run's agent sees, at most.
HISTORY_MESSAGES = 50

# The runs this process is executing (run id -> context), so a shutdown can
# stop them promptly and hand them back.
_live: dict[str, _Context] = {}
_live_lock = threading.Lock()


def live_runs() -> list[str]:
    """Ids of the runs this process is executing now."""
    with _live_lock:
        return list(_live)


def abort_all() -> int:
    """Stop every run this process executes at its next step (shutdown). Their
    leases lapse and the next sweep or start-up finishes them interrupted."""
    with _live_lock:
        contexts = list(_live.values())
    for ctx in contexts:
        ctx.aborted.set()
    return len(contexts)


def hand_back_all(wait: float = 5.0) -> list[str]:
    """Stop every run this process executes and finish each ``interrupted`` now,
    rather than when its lease lapses. Returns the ids finished here.

    Each run is stopped first (its next append or sleep raises), and finished
    under this worker's identity: a run another process took meanwhile is
    left alone, and no event can follow its ``run.finished``.
    """
    ids = live_runs()
    abort_all()
    deadline = time.monotonic() + wait
    while live_runs() and time.monotonic() < deadline:
        time.sleep(0.05)
    me = worker_id()
    done = []
    for run_id in ids:
        try:
            if runs.finish_run(
                run_id, p.STOP_INTERRUPTED, worker=me, from_statuses=(Run.Status.RUNNING,)
            ):
                done.append(run_id)
        except Exception:
            log.exception("could not hand back run %s", run_id, extra={"run_id": run_id})
    return done


def execute_run(run_id: str) -> None:
    """Start or continue a run, if it is still there to be run."""
    worker = worker_id()
    try:
        if leases.claim(run_id, worker):
            _drive(run_id, worker)
    finally:
        close_old_connections()


def cut_marker(cap: int) -> str:
    """What ends a message cut at ``cap`` characters."""
    return f"\n\n[message cut at {cap:,} characters]"


class _Context:
    """The ``RunContext`` an agent sees (see ``runtime.base``)."""

    def __init__(self, run: Run, worker: str):
        self.run_id = run.id
        self.session_id = run.session_id
        self.text = run.text
        self.state: dict[str, Any] = dict(run.state.get("agent", {}))
        self._worker = worker
        self.guard = RunGuard(run.id, worker)
        self.aborted = threading.Event()
        self._streamed = 0  # characters of the current message's deltas

    def append(self, kind: str, data: dict[str, Any]) -> None:
        """Append one event of this run, guarded; ``RunAborted`` once it was stopped."""
        if self.aborted.is_set():
            raise RunAborted(self.run_id)
        append_event(self.session_id, kind, data, self.run_id, guard=self.guard)

    def delta(self, text: str) -> None:
        # A message is cut at AGENT_MAX_MESSAGE_CHARS (a model looping, or
        # steered to flood the log and every tab): the deltas past it are
        # dropped, and the cut is said once, in the text itself.
        cap = settings.AGENT_MAX_MESSAGE_CHARS
        room = cap - self._streamed
        if room <= 0:
            return
        if len(text) > room:
            text = text[:room] + cut_marker(cap)
            self._streamed = cap
        else:
            self._streamed += len(text)
        self.append(p.K_ASSISTANT_DELTA, {"text": text})

    def message(self, text: str) -> None:
        self._streamed = 0  # the next message starts afresh
        cap = settings.AGENT_MAX_MESSAGE_CHARS
        if len(text) > cap:
            text = text[:cap] + cut_marker(cap)
        self.append(p.K_ASSISTANT_MESSAGE, {"text": text})

    def request_tool(self, tool: str, args: dict[str, Any], state: dict[str, Any]) -> None:
        problem = registry.validate_args(tool, args)
        if problem:
            # No gate for a call no tool can take (an unknown tool, bad arguments).
            raise AgentError(problem)
        tool_call_id = "call_" + secrets.token_urlsafe(9)
        approval_id = runs.park(
            self.run_id,
            self._worker,
            self.session_id,
            tool_call_id=tool_call_id,
            tool=tool,
            args=args,
            state={"agent": state, "gate": tool_call_id},
        )
        if approval_id is None:
            raise RunAborted(self.run_id)
        raise Parked(approval_id)

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


def _drive(run_id: str, worker: str) -> None:

    run = Run.objects.filter(id=run_id).first()
    if run is None:  # deleted with its session since the claim
        return
    ctx = _Context(run, worker)
    keeper = leases.keeper()
    with _live_lock:
        _live[run_id] = ctx
    keeper.hold(run_id, ctx.aborted)
    gate = run.state.get("gate")
    # The send's trace goes on here, on whichever worker: one span a drive.
    ids = {"session.id": run.session_id, "run.id": run_id, "phase": "resume" if gate else "start"}
    try:
        with tracing.continued(run.trace), tracing.span("run", **ids):
            agent = get_agent()
            if gate:
                outcome = _continue_gate(ctx, gate)
                agent.resume(ctx, outcome)
            else:
                agent.start(ctx)
            runs.finish_run(
                run_id, p.STOP_END_TURN, worker=worker, from_statuses=(Run.Status.RUNNING,)
            )
    except Parked:
        pass
    except (RunAborted, SessionGone):
        log.info(
            "run %s stopped: cancelled, taken over or deleted", run_id, extra={"run_id": run_id}
        )
    except AgentError as exc:
        _finish_error(run_id, worker, str(exc) or "the agent failed")
    except Exception as exc:
        log.exception("run %s failed", run_id, extra={"run_id": run_id})
        _finish_error(run_id, worker, f"internal error: {type(exc).__name__}")
    finally:
        # Only this drive's entries: a continuation of the same run in this
        # process may already hold newer ones.
        keeper.release(run_id, ctx.aborted)
        with _live_lock:
            if _live.get(run_id) is ctx:
                del _live[run_id]


def _finish_error(run_id: str, worker: str, message: str) -> None:
    try:
        runs.finish_run(
            run_id, p.STOP_ERROR, message, worker=worker, from_statuses=(Run.Status.RUNNING,)
        )
    except Exception:
        log.exception("could not finish run %s", run_id, extra={"run_id": run_id})


def _continue_gate(ctx: _Context, tool_call_id: str) -> ToolOutcome:
    """Run (or refuse) the gated tool call exactly once and log its result."""

    approval = ApprovalRequest.objects.get(tool_call_id=tool_call_id)
    approved = approval.status == ApprovalRequest.Status.APPROVED
    first = ApprovalRequest.objects.filter(id=approval.id, executed_at__isnull=True).update(
        executed_at=timezone.now()
    )
    if not first:
        ok, output = False, "interrupted: this call was already started once and is not repeated"
    elif not approved:
        ok, output = False, "denied"
    else:
        ids = {"run.id": ctx.run_id, "tool": approval.tool, "tool_call.id": tool_call_id}
        with tracing.span("tool.execute", **ids) as span:
            ok, output = execute(approval.tool, approval.args, workspace_for(ctx.session_id))
            if span is not None:
                span.set_attribute("ok", ok)
    ctx.append(p.K_TOOL_RESULT, {"tool_call_id": tool_call_id, "ok": ok, "output": output})
    return ToolOutcome(
        tool_call_id=tool_call_id,
        tool=approval.tool,
        args=approval.args,
        approved=approved,
        ok=ok,
        output=output,
    )
