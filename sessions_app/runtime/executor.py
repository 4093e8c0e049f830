"""Executing one run: claim it, drive the agent, keep the lease, finish it.

``execute_run`` is what the task framework calls, on a thread of the process's
run pool (``runtime.pool``), in a worker process or in the embedded server. It
claims the run with a compare-and-set (so a task delivered twice executes
once), has the process's ``LeaseKeeper`` renew the run's lease while it works,
and appends every event under a ``RunGuard`` so that a run which was cancelled
or taken away cannot log another event. Many runs execute at once in one
process; each has its own context, guard and lease.

A drive goes on from the run's last checkpoint (``runtime.durable``): at its
start, at the gated tool call it waits on (``runtime.toolcalls``: run exactly
once, its outcome logged exactly once), or in ``resume`` after that call's
result. A process that stops hands its runs to the queue at their next
checkpoint (``hand_over_all``); a process that dies has them taken over by
the sweeper of another once their leases lapse.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import close_old_connections

from sessions_app.models import Run
from sessions_app.runtime import durable, leases, runs
from sessions_app.runtime.agents import get_agent
from sessions_app.runtime.base import AgentError, AutoApproved, Parked
from sessions_app.runtime.context import Context, cut_marker
from sessions_app.runtime.toolcalls import continue_gate, continue_step
from sessions_app.server import metrics, tracing
from sessions_app.server.identity import worker_id
from sessions_app.server.logs import is_outage
from sessions_app.wire import protocol as p
from sessions_app.wire.errors import RunAborted, SessionGone

log = logging.getLogger(__name__)

__all__ = ["abort_all", "cut_marker", "execute_run", "hand_over_all", "live_runs"]

# The runs this process is executing (run id -> context), so a shutdown can
# stop them promptly and hand them back.
_live: dict[str, Context] = {}
_live_lock = threading.Lock()


metrics.RUNS_IN_FLIGHT.set_function(lambda: len(_live))


def live_runs() -> list[str]:
    """Ids of the runs this process is executing now."""
    with _live_lock:
        return list(_live)


def abort_all(*, enqueue: bool = True) -> int:
    """Stop every run this process executes at its next step (shutdown) and
    hand each to the queue at its last checkpoint (``enqueue`` False: left for
    the next start-up to enqueue, as an embedded server does)."""
    with _live_lock:
        contexts = list(_live.values())
    for ctx in contexts:
        ctx.enqueue_on_release = enqueue
        ctx.handover.set()
        ctx.aborted.set()
    return len(contexts)


def hand_over_all(
    grace: float,
    hurry: threading.Event | None = None,
    busy: Callable[[], bool] | None = None,
) -> list[str]:
    """A stopping worker: every run it executes is handed to another worker at
    its next checkpoint, with nothing redone. What has not reached one within
    ``grace`` seconds (or once ``hurry`` is set) is stopped and handed over
    from its last checkpoint, its cut step redone elsewhere. ``busy``: whether
    the process still has run tasks (one taken just before the stop may not
    have started its run yet). Returns the ids handed over."""
    flagged: dict[str, Context] = {}
    deadline = time.monotonic() + grace
    while True:
        # Again every pass: a task taken just before the stop starts its run
        # here after the first pass, and is handed over like the others.
        with _live_lock:
            contexts = list(_live.values())
        for ctx in contexts:
            flagged[ctx.run_id] = ctx
            ctx.handover.set()
        idle = not contexts and not (busy and busy())
        if idle or time.monotonic() >= deadline or (hurry and hurry.is_set()):
            break
        time.sleep(0.05)
    if live_runs():
        abort_all()
        deadline = time.monotonic() + 5
        while live_runs() and time.monotonic() < deadline:
            time.sleep(0.05)
    me = worker_id()
    stuck = []
    for run_id in live_runs():
        # Stuck in a tool or a model call: released from here, its drive's
        # next append is refused.
        try:
            if durable.release(run_id, me, p.RESUMED_HANDOVER):
                stuck.append(run_id)
        except Exception:
            log.exception("could not hand over run %s", run_id, extra={"run_id": run_id})
    # What went back to the queue (not what finished or parked meanwhile).
    return [r for r, ctx in flagged.items() if ctx.handed_over or r in stuck]


# The run this thread's task claimed when a worker took it (``leases.Picked``).
_picked = threading.local()


@contextmanager
def picked(pick: leases.Picked | None) -> Iterator[None]:
    """Around a worker's task that claimed its run at the pickup: its
    ``execute_run`` drives the run it holds, and the pickup's lease is
    forgotten when the task ends."""
    _picked.run = pick
    try:
        yield
    finally:
        _picked.run = None
        if pick is not None:
            pick.done()


def execute_run(run_id: str) -> None:
    """Start or continue a run, if it is still there to be run: claimed now,
    or held since its worker took the task (and not taken over since)."""
    worker = worker_id()
    pick = getattr(_picked, "run", None)
    try:
        if pick is not None and pick.run_id == run_id:
            mine = leases.holds(run_id, worker, pick.generation)
        else:
            mine = leases.claim(run_id, worker)
        if mine:
            _drive(run_id, worker)
    finally:
        close_old_connections()


def _drive(run_id: str, worker: str) -> None:

    run = Run.objects.filter(id=run_id, worker=worker).first()
    if run is None:  # deleted with its session, or lost, since the claim
        return
    ctx = Context(run, worker)
    keeper = leases.keeper()
    with _live_lock:
        _live[run_id] = ctx
    keeper.hold(run_id, ctx.aborted)
    saved = run.state or {}
    waits = saved.get("gates") if isinstance(saved.get("gates"), list) else saved.get("gate")
    phase = "resume" if waits or ctx.entry == "resume" else "start"
    # The send's trace goes on here, on whichever worker: one span a drive.
    ids = {"session.id": run.session_id, "run.id": run_id, "phase": phase}
    # One line as a drive starts and one as it ends (the operator's trail of a run).
    log.info("run %s %s on %s", run_id, phase, worker, extra={"run_id": run_id})
    ended = "failed"
    try:
        with tracing.continued(run.trace), tracing.span("run", **ids):
            _run_agent(ctx, waits)
            runs.finish_run(run_id, p.STOP_END_TURN, worker=worker)
            ended = "finished end_turn"
    except Parked:
        ended = "parked at a gate"
    except (RunAborted, SessionGone):
        ended = "stopped: cancelled, handed over, taken over or deleted"
        if ctx.handover.is_set():
            # This process is stopping: whatever was not handed over at a
            # checkpoint goes back to the queue now (a no-op if it was).
            _release_quietly(ctx)
    except AgentError as exc:
        _finish_error(run_id, worker, str(exc) or "the agent failed")
        ended = "finished error"
    except Exception as exc:
        if is_outage(exc):
            # The database (or Redis) failed under the run, not the run: one
            # line, and the run goes on from its last checkpoint.
            log.error("run %s failed: %r", run_id, exc, extra={"run_id": run_id})
            ended = _take_over_now(run_id, worker)
        else:
            log.exception("run %s failed", run_id, extra={"run_id": run_id})
            _finish_error(run_id, worker, f"internal error: {type(exc).__name__}")
            ended = "finished error"
    finally:
        log.info("run %s %s", run_id, ended, extra={"run_id": run_id})
        # Only this drive's entries: a continuation of the same run in this
        # process may already hold newer ones.
        keeper.release(run_id, ctx.aborted)
        with _live_lock:
            if _live.get(run_id) is ctx:
                del _live[run_id]


def _run_agent(ctx: Context, waits: str | list[str] | None) -> None:
    """The agent, from where the run stands: the gated call it waits on
    (``waits``: its id), the step of several it waits on (their ids), the
    tool result's checkpoint, or its start. An auto-approved call runs at
    once, and the agent goes on with resume."""
    agent = get_agent()
    while True:
        try:
            if isinstance(waits, list):
                agent.resume_all(ctx, continue_step(ctx, waits))
            elif waits:
                agent.resume(ctx, continue_gate(ctx, waits))
            elif ctx.entry == "resume" and ctx.outcomes is not None:
                # A step's last result's checkpoint: on with all its outcomes.
                outcomes, ctx.entry, ctx.outcomes = ctx.outcomes, "start", None
                agent.resume_all(ctx, outcomes)
            elif ctx.entry == "resume" and ctx.outcome is not None:
                # Only the tool result's own checkpoint goes on with resume:
                # any checkpoint this drive takes goes on with start.
                outcome, ctx.entry, ctx.outcome = ctx.outcome, "start", None
                agent.resume(ctx, outcome)
            else:
                agent.start(ctx)
            return
        except AutoApproved as auto:
            waits = auto.args[0]  # run it now, and go on with resume


def _release_quietly(ctx: Context) -> None:
    try:
        ctx.hand_over()
    except Exception:
        log.exception("could not hand over run %s", ctx.run_id, extra={"run_id": ctx.run_id})


def _take_over_now(run_id: str, worker: str) -> str:
    """A drive an outage stopped: its run back to the queue at its last
    checkpoint, as a takeover (counted against its crash budget, which each
    checkpoint resets), now if the database is back, else by the sweeper
    once the lease lapses. A blip never ends an answer with an error."""
    close_old_connections()  # the one the outage broke
    try:
        outcome = durable.release(run_id, worker, p.RESUMED_TAKEOVER)
    except Exception as exc:
        log.error("run %s: left to its lease (%r)", run_id, exc, extra={"run_id": run_id})
        return "stopped by an outage: taken over when its lease lapses"
    if outcome == "error":
        return "finished error: its crash budget is spent"
    if outcome is None:
        return "stopped by an outage: no longer this drive's"
    return "stopped by an outage: taken over at its last checkpoint"


def _finish_error(run_id: str, worker: str, message: str) -> None:
    try:
        runs.finish_run(run_id, p.STOP_ERROR, message, worker=worker)
    except Exception:
        log.exception("could not finish run %s", run_id, extra={"run_id": run_id})
