"""Concurrent runs: one process executes many runs at once, each with its own lease.

Against real processes (the embedded daphne, or one ``run_agent_worker`` on
PostgreSQL + Redis): many runs held by one process at the same moment, a
cancel among them, gates decided out of order, kill -9 and SIGTERM of a busy
worker, and the per-user limit.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from django.conf import settings

from sessions_app.log.events import read_events
from sessions_app.models import Run
from sessions_app.runtime.tools import workspace_for
from tests.harness import Daphne, Worker, WsClient, session_cookie
from tests.support.rig import Hold
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_executor(_shared_server, transactional_db, tmp_path):
    """Start a daphne and, in production, exactly one run worker: every run
    executes in one process. The shared processes are stopped meanwhile (in the
    embedded profile the shared daphne executes runs and sweeps too)."""
    for worker in getattr(_shared_server, "workers", []):
        worker.kill()
    embedded = settings.AGENT_RUNNER == "embedded"
    if embedded:
        _shared_server.kill()
    procs: list = []

    def start(**env):
        worker = None
        if settings.AGENT_RUNNER == "worker":
            worker = Worker(tmp_path, **env).start()
            procs.append(worker)
        daphne = Daphne(tmp_path, **env).start()
        procs.append(daphne)
        return daphne, worker

    yield start
    for proc in procs:
        proc.kill()
    if embedded:
        _shared_server.restart()


async def _sessions(server, cookie, n: int) -> list[tuple[WsClient, str]]:
    out = []
    for i in range(n):
        c = await WsClient.connect(server.ws, cookie)
        ok = await c.start(tab_id=f"t-{i}")
        out.append((c, ok["session_id"]))
    return out


async def _send(c: WsClient, text: str, cmid: str) -> dict:
    reply = await c.request({"type": "send", "client_message_id": cmid, "text": text})
    assert reply["type"] == "send_ok", reply
    return reply


def _held_by_one_process(run_ids: list[str]) -> str | None:
    """The one worker holding every run in ``run_ids`` right now, if there is one."""
    workers = set(
        Run.objects.filter(id__in=run_ids, status="running").values_list("worker", flat=True)
    )
    count = Run.objects.filter(id__in=run_ids, status="running").exclude(worker="").count()
    if count == len(run_ids) and len(workers) == 1:
        return workers.pop()
    return None


def _finishes(session_id: str, run_id: str) -> list[dict]:
    return [
        e.data
        for e in read_events(session_id, 0)
        if e.kind == "run.finished" and e.run_id == run_id
    ]


async def test_one_process_executes_many_runs_at_once_and_cancels_one(one_executor, cookie):
    """Six streams are held by one process at the same moment; cancelling one leaves the
    other five streaming to the end, each socket contiguous."""
    server, _ = one_executor()
    tabs = await _sessions(server, cookie, 6)
    holds = [Hold(pace=50) for _ in tabs]
    sent = [
        await _send(c, hold.text, f"m{i}")
        for i, ((c, _), hold) in enumerate(zip(tabs, holds, strict=True))
    ]
    run_ids = [s["run_id"] for s in sent]
    holder = await wait_until(lambda: _held_by_one_process(run_ids), timeout=20)
    assert holder
    victim = tabs[2][0]
    reply = await victim.request({"type": "cancel", "run_id": run_ids[2]})
    assert reply["type"] == "cancel_ok"
    await victim.wait_event(lambda f: f["kind"] == "run.finished", timeout=30)
    for hold in holds:
        hold.release()
    for (c, _), run_id in zip(tabs, run_ids, strict=True):
        end = await c.wait_event(
            lambda f, r=run_id: f["kind"] == "run.finished" and f["run_id"] == r, timeout=30
        )
        expected = "cancelled" if run_id == run_ids[2] else "end_turn"
        assert end["data"]["stop_reason"] == expected
        assert c.seqs() == list(range(1, c.seqs()[-1] + 1))
    for (c, sid), run_id in zip(tabs, run_ids, strict=True):
        deltas = [e.data["text"] for e in read_events(sid, 0) if e.kind == "assistant.delta"]
        if run_id != run_ids[2]:
            [message] = [
                e.data["text"]
                for e in read_events(sid, 0)
                if e.kind == "assistant.message" and e.run_id == run_id
            ]
            assert "".join(deltas) == message and len(deltas) == Hold.answer(message)
        assert len(_finishes(sid, run_id)) == 1
        # Nothing of a run follows its run.finished.
        assert [e.kind for e in read_events(sid, 0) if e.run_id == run_id][-1] == "run.finished"
        await c.close()


async def test_gates_parked_together_decided_in_another_order(one_executor, cookie):
    """Four runs park at gates; deciding them in reverse order runs each tool exactly once."""
    server, _ = one_executor()
    tabs = await _sessions(server, cookie, 4)
    for i, (c, _) in enumerate(tabs):
        await _send(c, f"/write out{i}.txt line-{i}", f"m{i}")
    approvals = []
    for c, _ in tabs:
        req = await c.wait_event(lambda f: f["kind"] == "approval.requested")
        await c.wait_event(lambda f: f["kind"] == "run.paused")
        approvals.append(req["data"]["approval_id"])
    for i in reversed(range(4)):
        c = tabs[i][0]
        decision = "deny" if i == 1 else "approve"
        ok = await c.request({"type": "decide", "approval_id": approvals[i], "decision": decision})
        assert ok["type"] == "decide_ok"
    for i, (c, sid) in enumerate(tabs):
        await c.wait_event(lambda f: f["kind"] == "run.finished")
        results = [e for e in c.events() if e["kind"] == "tool.result"]
        assert len(results) == 1
        path = workspace_for(sid) / f"out{i}.txt"
        if i == 1:
            assert results[0]["data"]["output"] == "denied" and not path.exists()
        else:
            assert results[0]["data"]["ok"] is True
            assert path.read_text() == f"line-{i}\n"
        await c.close()


@pytest.mark.postgres
async def test_kill_9_of_a_busy_worker_has_each_of_its_runs_taken_over_once(
    one_executor, cookie, tmp_path
):
    """kill -9 of the one worker, holding four runs: the server's sweeper takes
    each over once (run.resumed, takeover) and the next worker to start
    finishes each end_turn, with its whole answer, once."""
    env = {"AGENT_LEASE_SECONDS": "2", "AGENT_SWEEP_SECONDS": "0.5"}
    server, worker = one_executor(**env)
    tabs = await _sessions(server, cookie, 4)
    holds = [Hold(pace=30) for _ in tabs]
    run_ids = [
        (await _send(c, hold.text, f"m{i}"))["run_id"]
        for i, ((c, _), hold) in enumerate(zip(tabs, holds, strict=True))
    ]
    holder = await wait_until(lambda: _held_by_one_process(run_ids), timeout=20)
    os.kill(int(holder.split(":")[1]), signal.SIGKILL)
    # The daphne's sweeper takes them over (no worker is left alive) ...
    for c, _ in tabs:
        await c.wait_event(lambda f: f["kind"] == "run.resumed", timeout=30)
    # ... and a worker started afterwards goes on with each, to its release.
    for hold in holds:
        hold.release()
    fresh = Worker(tmp_path, **env).start()
    try:
        for (c, sid), run_id in zip(tabs, run_ids, strict=True):
            end = await c.wait_event(
                lambda f, r=run_id: f["kind"] == "run.finished" and f["run_id"] == r, timeout=30
            )
            assert end["data"] == {"stop_reason": "end_turn"}
            assert len(_finishes(sid, run_id)) == 1
            kinds = [e.kind for e in read_events(sid, 0) if e.run_id == run_id]
            assert kinds.count("run.resumed") == 1
            messages = [
                e.data["text"]
                for e in read_events(sid, 0)
                if e.run_id == run_id and e.kind == "assistant.message"
            ]
            assert len(messages) == 1 and Hold.answer(messages[0])
            await c.close()
    finally:
        fresh.kill()


@pytest.mark.postgres
async def test_sigterm_hands_every_run_over_at_a_checkpoint(one_executor, cookie):
    """SIGTERM of a busy worker: each run it executes goes back to the queue at
    its next checkpoint (run.resumed 'handover' keeping every character
    streamed: nothing redone), long before the grace period ends; none is
    finished, none keeps an owner, and the worker logs each hand-over."""
    server, worker = one_executor(AGENT_WORKER_GRACE_SECONDS="30", AGENT_LEASE_SECONDS="30")
    tabs = await _sessions(server, cookie, 3)
    holds = [Hold() for _ in tabs]  # never released: busy until handed over
    run_ids = [
        (await _send(c, hold.text, f"m{i}"))["run_id"]
        for i, ((c, _), hold) in enumerate(zip(tabs, holds, strict=True))
    ]
    await wait_until(lambda: _held_by_one_process(run_ids), timeout=20)
    worker.proc.send_signal(signal.SIGTERM)
    # Checkpoints come every second of output: the worker is gone long before
    # its 30 s grace, and the 30 s lease means no sweeper took these runs.
    await asyncio.to_thread(worker.proc.wait, 15)
    assert worker.proc.returncode == 0
    for (c, sid), run_id in zip(tabs, run_ids, strict=True):
        run = Run.objects.get(id=run_id)
        assert (run.status, run.worker) == ("running", "")
        events = [e for e in read_events(sid, 0) if e.run_id == run_id]
        assert events[-1].kind == "run.resumed"
        assert events[-1].data["reason"] == "handover"
        streamed = "".join(e.data["text"] for e in events if e.kind == "assistant.delta")
        assert events[-1].data["keep"] == len(streamed)
        assert f"handed over run {run_id}" in worker.log_text()
        await c.close()


async def test_user_limit_queues_beyond_it_and_does_not_delay_others(
    one_executor, cookie, django_user_model
):
    """With AGENT_USER_MAX_RUNS=2 a user's third run is queued (send_ok 'queued',
    run.queued) while another user's run starts at once; it starts when one of the
    first two ends."""
    server, _ = one_executor(AGENT_USER_MAX_RUNS="2")
    tabs = await _sessions(server, cookie, 3)
    first = await _send(tabs[0][0], Hold().text, "a0")  # busy until cancelled
    second = await _send(tabs[1][0], Hold().text, "a1")
    third = await _send(tabs[2][0], "/stream 3 0", "a2")
    assert [first["status"], second["status"], third["status"]] == [
        "started",
        "started",
        "queued",
    ]
    queued = await tabs[2][0].wait_event(lambda f: f["kind"] == "run.queued")
    assert queued["run_id"] == third["run_id"]

    bob = django_user_model.objects.create_user("bob", password="bob-pass-1")
    b = await WsClient.connect(server.ws, session_cookie(bob))
    await b.start()
    theirs = await _send(b, "/stream 3 0", "b0")
    assert theirs["status"] == "started"
    await b.wait_event(lambda f: f["kind"] == "run.finished")
    assert Run.objects.get(id=third["run_id"]).status == "queued"

    await tabs[0][0].request({"type": "cancel", "run_id": first["run_id"]})
    started = await tabs[2][0].wait_event(lambda f: f["kind"] == "run.started", timeout=20)
    assert started["run_id"] == third["run_id"]
    end = await tabs[2][0].wait_event(lambda f: f["kind"] == "run.finished", timeout=20)
    assert end["data"] == {"stop_reason": "end_turn"}
    await tabs[1][0].request({"type": "cancel", "run_id": second["run_id"]})
    for c, _ in tabs:
        await c.close()
    await b.close()
