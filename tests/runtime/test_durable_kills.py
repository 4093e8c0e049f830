"""Exactly once under kill -9 (docs/agents.md, "Tool calls and crashes"): a
second-long tool that counts its executions is approved and the process
executing its run is killed at a random moment (before, during or after the
tool), 20 times. Each approved call runs at most once, an ok result is never
missing for a call that counted and never invented for one that did not, and
an unknown outcome is always asked again, never re-run silently."""

from __future__ import annotations

import asyncio
import os
import random
import signal

import pytest
from django.conf import settings

from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime.toolcalls import UNKNOWN_NOTE
from sessions_app.runtime.tools import workspace_for
from tests.durable_tools import TOOLS, lines
from tests.harness import WsClient
from tests.support.sessions import open_session, send_text
from tests.support.waiting import wait_until

ROUNDS = 20
ENV = {"AGENT_TOOLS": TOOLS, "AGENT_LEASE_SECONDS": "1", "AGENT_SWEEP_SECONDS": "0.3"}


def _pending(run_id: str) -> str | None:
    return (
        ApprovalRequest.objects.filter(run_id=run_id, status="pending")
        .values_list("id", flat=True)
        .first()
    )


def _holder_pid(run_id: str) -> int | None:
    worker = Run.objects.filter(id=run_id).values_list("worker", flat=True).first()
    return int(worker.split(":")[1]) if worker else None


@pytest.mark.slow
async def test_kill_9_at_random_moments_never_runs_a_tool_twice(own_server, cookie):
    """20 rounds of approve-then-kill-at-a-random-moment: executions never
    exceed the approvals, every ok result is an execution, every unknown
    outcome is re-asked, and every run ends end_turn."""
    start, procs = own_server
    server = start(**ENV)
    rng = random.Random(7)
    c, sid = await open_session(server, cookie)
    counts = workspace_for(sid) / "counts.txt"
    for i in range(ROUNDS):
        run_id = (await send_text(c, "/tool slow_count", f"m{i}"))["run_id"]
        approval = await wait_until(lambda r=run_id: _pending(r), timeout=30)
        await c.request({"type": "decide", "approval_id": approval, "decision": "approve"})
        await asyncio.sleep(rng.uniform(0, 1.6))  # sleep-ok: the random moment of the kill
        if settings.AGENT_RUNNER == "worker":
            pid = await asyncio.to_thread(_holder_pid, run_id)
            if pid:
                os.kill(pid, signal.SIGKILL)
                procs.remove(next(p for p in procs if p.proc.pid == pid))
                procs.insert(0, await asyncio.to_thread(_fresh_worker, procs, ENV))
        else:
            await c.close()
            for p in procs:
                p.kill()
            procs.clear()
            server = start(**ENV)
            c = await WsClient.connect(server.ws, cookie)
            await c.resume(sid, 0)
        # Approve whatever is asked again, until the run ends.
        while not Run.objects.filter(id=run_id, status="finished").exists():
            again = await asyncio.to_thread(_pending, run_id)
            if again:
                await c.request({"type": "decide", "approval_id": again, "decision": "approve"})
            await asyncio.sleep(0.1)  # sleep-ok: a database state no frame announces
    await c.close()
    runs = Run.objects.filter(session_id=sid)
    assert sorted({r.stop_reason for r in runs}) == ["end_turn"]
    gates = ApprovalRequest.objects.filter(session_id=sid)
    approved = gates.filter(status="approved").count()
    results = [e for e in _events(sid) if e.kind == "tool.result"]
    ok = sum(1 for e in results if e.data["ok"])
    unknown = [e for e in results if e.data["output"].startswith("unknown:")]
    assert ok == ROUNDS  # every run's tool ran, in the end
    assert ok <= lines(counts) <= min(approved, ok + len(unknown))
    reasked = gates.filter(tool_call_id__in=_noted_calls(sid)).count()
    assert reasked == len(unknown)  # every unknown outcome was asked again


def _fresh_worker(procs, env):
    from tests.harness import Worker

    return Worker(procs[-1].log_path.parent, **env).start()


def _events(sid: str):
    from sessions_app.log.events import read_events

    return read_events(sid, 0)


def _noted_calls(sid: str) -> list[str]:
    return [
        e.data["tool_call_id"]
        for e in _events(sid)
        if e.kind == "approval.requested" and e.data.get("note") == UNKNOWN_NOTE
    ]


PICKUP_ROUNDS = 20
PICKUP_ENV = {"AGENT_LEASE_SECONDS": "1", "AGENT_SWEEP_SECONDS": "0.3"}


def _taken_by(run_id: str) -> int | None:
    """The pid of the worker that took the run's newest task (still running)."""
    from django_tasks_db.models import DBTaskResult

    taken = (
        DBTaskResult.objects.filter(status="RUNNING", args_kwargs__args__0=run_id)
        .order_by("-started_at")
        .values_list("worker_ids", flat=True)
        .first()
    )
    return int(taken[-1].split(":")[1]) if taken else None


@pytest.mark.postgres
async def test_a_kill_in_the_pickup_window_leaves_no_run_waiting(own_server, cookie, tmp_path):
    """20 rounds: a worker takes a run's task (a new run's, or one going on
    after its gate was approved) and is killed -9 before it drives the run
    (the failpoint holds it there); the other worker goes on with the run
    within 5 s, and it ends end_turn, its tool run once."""
    if settings.AGENT_RUNNER != "worker":
        pytest.skip("the embedded profile has no worker to kill in its pickup window")
    hold = tmp_path / "hold-pickup"
    env = {**PICKUP_ENV, "AGENT_TEST_PICKUP_HOLD": str(hold)}
    start, procs = own_server
    server = start(**env)
    c, sid = await open_session(server, cookie)
    waits = []
    for i in range(PICKUP_ROUNDS):
        if i % 2:
            hold.touch()
            run_id = (await send_text(c, f"hello {i}", f"m{i}"))["run_id"]
        else:
            run_id = (await send_text(c, f"/write w.txt line{i}", f"m{i}"))["run_id"]
            approval = await wait_until(lambda r=run_id: _pending(r), timeout=30)
            hold.touch()
            await c.request({"type": "decide", "approval_id": approval, "decision": "approve"})
        pid = await wait_until(lambda r=run_id: _taken_by(r), timeout=30)
        os.kill(pid, signal.SIGKILL)
        killed = asyncio.get_running_loop().time()
        hold.unlink()
        procs.remove(next(p for p in procs if p.proc.pid == pid))
        fresh = asyncio.create_task(asyncio.to_thread(_fresh_worker, procs, env))
        end = await c.wait_event(
            lambda f, r=run_id: f["kind"] == "run.finished" and f["run_id"] == r, timeout=30
        )
        waits.append(asyncio.get_running_loop().time() - killed)
        assert end["data"] == {"stop_reason": "end_turn"}
        procs.insert(0, await fresh)
    await c.close()
    assert max(waits) < 5, waits
    written = (workspace_for(sid) / "w.txt").read_text().splitlines()
    assert written == [f"line{i}" for i in range(0, PICKUP_ROUNDS, 2)]
