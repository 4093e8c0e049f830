"""Run transitions over the socket (sessions_app/runtime/runs.py): stop and send."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from sessions_app.log.sessions import create_session
from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime import runs, turns
from sessions_app.runtime.tools import workspace_for
from tests.harness import WsClient
from tests.support.rig import Hold
from tests.support.sessions import open_session, send_text

pytestmark = pytest.mark.django_db(transaction=True)


async def test_stop_and_send_stops_the_stream_and_starts_at_once(server, cookie):
    """A send with interrupt during a long stream cancels it, saying why, and
    its run starts at once, ahead of the input already queued (which stays
    queued and runs after it); a repeat of its id stops nothing more."""
    c, sid = await open_session(server, cookie)
    streaming = await send_text(c, Hold().text, "m1")
    queued = await send_text(c, "/stream 1 0", "m2")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta")
    now = await c.request(
        {"type": "send", "client_message_id": "m3", "text": "/stream 3 0", "interrupt": True}
    )
    assert now["type"] == "send_ok" and now["status"] == "started"
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == queued["run_id"])
    ends = {e["run_id"]: e["data"] for e in c.events() if e["kind"] == "run.finished"}
    assert ends[streaming["run_id"]] == {
        "stop_reason": "cancelled",
        "message": "stopped for a newer message",
    }
    assert ends[now["run_id"]] == ends[queued["run_id"]] == {"stop_reason": "end_turn"}
    started = [e["run_id"] for e in c.events() if e["kind"] == "run.started"]
    assert started == [streaming["run_id"], now["run_id"], queued["run_id"]]
    # The interrupting run started right after the cancel: nothing between.
    kinds = [(e["kind"], e["run_id"]) for e in c.events()]
    cut = kinds.index(("run.finished", streaming["run_id"]))
    assert kinds[cut + 1 : cut + 3] == [
        ("user.message", now["run_id"]),
        ("run.started", now["run_id"]),
    ]
    assert not [e for e in c.events()[cut + 1 :] if e["run_id"] == streaming["run_id"]], (
        "nothing of the stopped stream is logged after its end"
    )
    again = await c.request(
        {"type": "send", "client_message_id": "m3", "text": "/stream 3 0", "interrupt": True}
    )
    assert again["status"] == "duplicate"
    assert Run.objects.filter(session_id=sid, stop_reason="cancelled").count() == 1
    bad = await c.request(
        {"type": "send", "client_message_id": "m4", "text": "x", "interrupt": "yes"}
    )
    assert bad["type"] == "error" and bad["code"] == "bad_frame"
    await c.close()


async def test_stop_and_send_closes_a_waiting_gate_and_its_tool_never_runs(server, cookie):
    """Stop and send while the run waits at a gate: the gate is denied by the
    sender, its result logged, the new input starts, and approving the old gate
    afterwards is refused (already decided): the tool never runs."""
    c, sid = await open_session(server, cookie)
    gated = await send_text(c, "/write stopped.txt never", "m1")
    await c.wait_event(lambda f: f["kind"] == "run.paused")
    approval_id = next(e for e in c.events() if e["kind"] == "approval.requested")["data"][
        "approval_id"
    ]
    now = await c.request(
        {"type": "send", "client_message_id": "m2", "text": "hi", "interrupt": True}
    )
    assert now["status"] == "started"
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == now["run_id"])
    gate_events = [e for e in c.events() if e["run_id"] == gated["run_id"]]
    assert [e["kind"] for e in gate_events][-3:] == [
        "approval.decided",
        "tool.result",
        "run.finished",
    ]
    assert gate_events[-3]["data"]["decided_by"] == "alice"
    late = await c.request({"type": "decide", "approval_id": approval_id, "decision": "approve"})
    assert late["type"] == "error" and late["code"] == "already_decided"
    assert not (workspace_for(sid) / "stopped.txt").exists()
    approval = ApprovalRequest.objects.get(id=approval_id)
    assert approval.status == "denied" and approval.executed_at is not None
    await c.close()


async def test_the_handshake_says_interrupt_is_honoured(server, cookie):
    """A client offering "interrupt" is told the server uses it; one that does
    not sees plain version 1."""
    c = await WsClient.connect(server.ws, cookie)
    ok = await c.request({"type": "start", "protocol": 1, "features": ["interrupt"]})
    assert ok["features"] == ["interrupt"]
    await c.close()
    d = await WsClient.connect(server.ws, cookie)
    plain = await d.request({"type": "start", "protocol": 1})
    assert "features" not in plain
    await d.close()


def test_a_run_that_waited_has_its_queue_wait_measured(user, no_enqueue):
    """The queue wait (creation to start) of a run that waited behind another
    is observed once, when it starts; runs in flight are a gauge."""
    count = "agent_run_queue_wait_seconds_count"
    before = REGISTRY.get_sample_value(count) or 0
    s = create_session(user)
    first = turns.submit_message(s.id, "a", "x")
    turns.submit_message(s.id, "b", "y")
    assert (REGISTRY.get_sample_value(count) or 0) == before  # started at once: not a wait
    runs.finish_run(first.run_id, "end_turn")
    assert REGISTRY.get_sample_value(count) == before + 1
    assert REGISTRY.get_sample_value("agent_runs_in_flight") == 0
