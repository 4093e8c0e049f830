"""Durable runs (docs/agents.md, "Steps and checkpoints"): a run outlives the
process executing it. kill -9 mid-answer: another worker (or the restarted
embedded server) takes it over from its last checkpoint and the answer ends
once, whole. SIGTERM: it is handed over at a checkpoint, nothing redone. A
tool cut mid-run is asked again, never re-run blindly; an idempotent one is
run again and takes effect once. A cancel waits for the tool in flight."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from django.conf import settings
from httpx_sse import connect_sse

from sessions_app.models import Run
from sessions_app.runtime import registry
from sessions_app.runtime.toolcalls import UNKNOWN_NOTE, UNKNOWN_OUTPUT
from sessions_app.runtime.tools import workspace_for
from tests.durable_tools import TOOLS, lines
from tests.harness import WsClient
from tests.support.rig import Hold
from tests.support.sessions import open_session, send_text
from tests.support.waiting import wait_until
from tests.web.test_stream import client_for, read_until


def shown_text(events: list[dict], run_id: str) -> str:
    """The run's text as a tab applying these events shows it (deltas, cut
    back to ``keep`` by run.resumed, replaced by the message)."""
    text = ""
    for e in events:
        if e["run_id"] != run_id:
            continue
        if e["kind"] == "assistant.delta":
            text += e["data"]["text"]
        elif e["kind"] == "run.resumed":
            text = text[: e["data"]["keep"]]
        elif e["kind"] == "assistant.message":
            text = e["data"]["text"]
    return text


def streamed_text(events: list[dict], run_id: str) -> str:
    """The same without the message: what the deltas alone add up to."""
    return shown_text([e for e in events if e["kind"] != "assistant.message"], run_id)


def _holder(run_id: str) -> int:
    return int(Run.objects.get(id=run_id).worker.split(":")[1])


async def _crash(start, procs, run_id: str, cookie, sid: str, client: WsClient, **env):
    """kill -9 the process executing ``run_id`` (embedded: the server, started
    again with ``env``); returns a client following the session, and its server."""
    if settings.AGENT_RUNNER == "worker":
        os.kill(await wait_until(lambda: _holder(run_id)), signal.SIGKILL)
        return client, procs[-1]
    for p in procs:
        p.kill()
    procs.clear()
    server = start(**env)
    live = await WsClient.connect(server.ws, cookie)
    await live.resume(sid, 0)
    return live, server


async def _slow_count_running(c: WsClient, sid: str) -> tuple[dict, dict]:
    """Ask for slow_count, approve its gate and wait until the tool has
    started: (the send's reply, the approval.requested event)."""
    sent = await send_text(c, "/tool slow_count", "m1")
    gate = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    await c.request(
        {"type": "decide", "approval_id": gate["data"]["approval_id"], "decision": "approve"}
    )
    await wait_until(lambda: lines(workspace_for(sid) / "started.txt") == 1)
    return sent, gate


def _sse_frames(server, user, sid: str, head: int, compact: bool) -> list[dict]:
    """The session's event frames from 0 as the SSE stream sends them."""
    query = "?after=0&compact=1" if compact else "?after=0"
    with (
        client_for(server, user) as c,
        connect_sse(c, "GET", f"/api/sessions/{sid}/stream/{query}") as source,
    ):
        got = read_until(source.iter_sse(), lambda e: e.id == str(head))
    return [json.loads(e.data) for e in got if e.event not in ("stream", "compacted")]


async def test_kill_9_mid_answer_is_taken_over_and_ends_once(own_server, cookie, user):
    """kill -9 while streaming: the run is taken over at its last checkpoint
    (run.resumed, takeover), finishes end_turn, the log holds one message with
    the whole answer, and the deltas as a tab applies them equal it: live, and
    over SSE, plain and compacted."""
    start, procs = own_server
    # Embedded, the restart takes the run over at once, whatever its lease: a
    # long one keeps a slow machine's late renewal from a second takeover.
    env = {} if settings.AGENT_RUNNER == "worker" else {"AGENT_LEASE_SECONDS": "15"}
    server = start(**env)
    c, sid = await open_session(server, cookie)
    hold = Hold(pace=50)  # a delta every 50 ms, a checkpoint every second
    sent = await send_text(c, hold.text, "m1")
    run_id = sent["run_id"]
    await c.wait_event(lambda f: f["kind"] == "assistant.delta" and "held25 " in f["data"]["text"])
    live, server = await _crash(start, procs, run_id, cookie, sid, c, **env)
    resumed = await live.wait_event(lambda f: f["kind"] == "run.resumed", timeout=40)
    await live.wait_event(lambda f: f["kind"] == "assistant.delta" and f["seq"] > resumed["seq"])
    hold.release()  # once the run said something more after its takeover
    end = await live.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id, timeout=40
    )
    assert end["data"] == {"stop_reason": "end_turn"}
    events = live.events()
    mine = [e for e in events if e["run_id"] == run_id]
    resumed = [e for e in mine if e["kind"] == "run.resumed"]
    assert [e["data"]["reason"] for e in resumed] == ["takeover"]
    [full] = [e["data"]["text"] for e in mine if e["kind"] == "assistant.message"]
    Hold.answer(full)
    assert 0 < resumed[0]["data"]["keep"] < len(full)
    assert streamed_text(events, run_id) == full
    assert [e["seq"] for e in events] == list(range(1, events[-1]["seq"] + 1))
    head = events[-1]["seq"]
    for compact in (False, True):
        frames = await asyncio.to_thread(_sse_frames, server, user, sid, head, compact)
        assert shown_text(frames, run_id) == full
        assert [f["kind"] for f in frames].count("run.resumed") == 1
    await live.close()


@pytest.mark.postgres
async def test_sigterm_hands_over_at_a_checkpoint_with_nothing_redone(own_server, cookie):
    """A worker stopped with SIGTERM mid-answer hands the run to the other
    worker at its next checkpoint: run.resumed (handover) keeps everything
    streamed so far, the answer ends end_turn, whole and once."""
    if settings.AGENT_RUNNER != "worker":
        pytest.skip("the embedded profile has no second worker to hand over to")
    start, procs = own_server
    server = start()
    c, sid = await open_session(server, cookie)
    hold = Hold(pace=50)
    sent = await send_text(c, hold.text, "m1")
    run_id = sent["run_id"]
    await c.wait_event(lambda f: f["kind"] == "assistant.delta" and "held10 " in f["data"]["text"])
    holder = _holder(run_id)
    stopped = next(p for p in procs if p.proc.pid == holder)
    os.kill(holder, signal.SIGTERM)
    await c.wait_event(lambda f: f["kind"] == "run.resumed", timeout=40)
    hold.release()
    end = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id, timeout=40
    )
    assert end["data"] == {"stop_reason": "end_turn"}
    events = c.events()
    at = next(i for i, e in enumerate(events) if e["kind"] == "run.resumed")
    assert events[at]["data"]["reason"] == "handover"
    before = "".join(e["data"]["text"] for e in events[:at] if e["kind"] == "assistant.delta")
    assert events[at]["data"]["keep"] == len(before)  # nothing to redo
    [message] = [e["data"]["text"] for e in events if e["kind"] == "assistant.message"]
    assert streamed_text(events, run_id) == message and Hold.answer(message)
    assert stopped.proc.wait(30) == 0
    assert f"handed over run {run_id}" in stopped.log_text()
    await c.close()


async def test_a_tool_cut_by_a_crash_is_asked_again_not_rerun(own_server, cookie):
    """kill -9 while a non-idempotent tool runs: its result is logged
    'unknown', the run parks at a new gate that says so, and only an approval
    of that gate runs it again. Executions equal the ok results."""
    start, procs = own_server
    server = start(AGENT_TOOLS=TOOLS)
    c, sid = await open_session(server, cookie)
    sent, first = await _slow_count_running(c, sid)
    run_id = sent["run_id"]
    ws = workspace_for(sid)
    live, _ = await _crash(start, procs, run_id, cookie, sid, c, AGENT_TOOLS=TOOLS)
    again = await live.wait_event(
        lambda f: (
            f["kind"] == "approval.requested"
            and f["data"]["approval_id"] != first["data"]["approval_id"]
        ),
        timeout=40,
    )
    assert again["data"]["note"] == UNKNOWN_NOTE
    assert again["data"]["tool"] == "slow_count"
    results = [e["data"] for e in live.events() if e["kind"] == "tool.result"]
    assert results == [
        {"tool_call_id": first["data"]["tool_call_id"], "ok": False, "output": UNKNOWN_OUTPUT}
    ]
    assert lines(ws / "counts.txt") == 0
    await live.request(
        {"type": "decide", "approval_id": again["data"]["approval_id"], "decision": "approve"}
    )
    end = await live.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id, timeout=40
    )
    assert end["data"] == {"stop_reason": "end_turn"}
    oks = [e for e in live.events() if e["kind"] == "tool.result" and e["data"]["ok"]]
    assert lines(ws / "counts.txt") == len(oks) == 1
    await live.close()


async def test_a_cancel_waits_for_the_tool_in_flight(own_server, cookie):
    """Cancel while an approved tool runs: the tool's result is logged, then
    run.finished cancelled; the log says what the tool did."""
    start, _ = own_server
    server = start(AGENT_TOOLS=TOOLS)
    c, sid = await open_session(server, cookie)
    sent, _ = await _slow_count_running(c, sid)
    run_id = sent["run_id"]
    await c.request({"type": "cancel", "run_id": run_id})
    end = await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    assert end["data"]["stop_reason"] == "cancelled"
    tail = [(e["kind"], e["data"].get("ok")) for e in c.events() if e["run_id"] == run_id][-2:]
    assert tail == [("tool.result", True), ("run.finished", None)]
    assert lines(workspace_for(sid) / "counts.txt") == 1
    await c.close()


@pytest.mark.django_db
def test_write_file_run_again_for_one_call_appends_once(tmp_path, settings):
    """write_file is idempotent by call id: a second attempt of the same call
    (its worker died after the append) leaves the file as after one; another
    call appends again."""
    settings.AGENT_WORKSPACES = tmp_path
    ws = tmp_path / "s_one"
    ws.mkdir()
    args = {"path": "notes.txt", "text": "hello"}
    for _ in range(3):
        assert registry.execute("write_file", args, ws, "call_aaaaaaaa")[0]
    assert (ws / "notes.txt").read_text() == "hello\n"
    assert registry.execute("write_file", args, ws, "call_bbbbbbbb")[0]
    assert (ws / "notes.txt").read_text() == "hello\nhello\n"
    assert not any(p.name.startswith(".") for p in ws.iterdir())  # the journal is elsewhere


async def _pair(server, cookie, sid: str) -> tuple[WsClient, WsClient]:
    """Two fresh sockets on the session (each has its own branch-rate budget)."""
    a = await WsClient.connect(server.ws, cookie)
    b = await WsClient.connect(server.ws, cookie)
    for c in (a, b):
        await c.resume(sid, 0)
    return a, b


async def test_approve_and_switch_at_once_leave_workspace_and_log_agreeing(server, cookie):
    """Tab A approves a /write at the instant tab B switches to another
    branch, 50 rounds: the workspace holds exactly the writes whose ok
    tool.result is in the log, and every approved call that started has its
    result."""
    c, sid = await open_session(server, cookie)
    base = await send_text(c, "hello", "m0")
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == base["run_id"])
    await c.close()
    a = b = None
    for i in range(50):
        if i % 5 == 0:
            if a is not None:
                await a.close()
                await b.close()
            a, b = await _pair(server, cookie, sid)
        reply = await a.request(
            {
                "type": "send",
                "client_message_id": f"e{i}",
                "text": f"/write race.txt {i}",
                "edit_of": base["run_id"],
            }
        )
        run_id = reply["run_id"]
        gate = await a.wait_event(
            lambda f, r=run_id: f["kind"] == "approval.requested" and f["run_id"] == r
        )
        decide = {
            "type": "decide",
            "approval_id": gate["data"]["approval_id"],
            "decision": "approve",
        }
        await asyncio.gather(
            a.request(decide), b.request({"type": "switch", "run_id": base["run_id"]})
        )
        await a.wait_event(lambda f, r=run_id: f["kind"] == "run.finished" and f["run_id"] == r)
    events = a.events()
    await a.close()
    await b.close()
    calls = {
        e["data"]["tool_call_id"]: e["data"]["args"]["text"]
        for e in events
        if e["kind"] == "tool.call"
    }
    results = [e["data"] for e in events if e["kind"] == "tool.result"]
    assert sorted(r["tool_call_id"] for r in results) == sorted(calls)  # one result a call
    written = sorted(calls[r["tool_call_id"]] for r in results if r["ok"])
    path = workspace_for(sid) / "race.txt"
    on_disk = sorted(path.read_text().splitlines()) if path.exists() else []
    assert on_disk == written


@pytest.mark.parametrize("how", ["interrupt", "edit"])
async def test_a_turn_sent_while_a_tool_runs_waits_for_it(own_server, cookie, how):
    """A stop-and-send (or an edit) while an approved tool runs: the old run
    finishes after the tool's result, then the new one starts; two runs of
    one session never execute at once."""
    start, _ = own_server
    server = start(AGENT_TOOLS=TOOLS)
    c, sid = await open_session(server, cookie)
    first = await send_text(c, "hello", "m0")
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == first["run_id"])
    sent, _ = await _slow_count_running(c, sid)
    frame = {"type": "send", "client_message_id": "m2", "text": "/stream 3 0"}
    frame.update({"interrupt": True} if how == "interrupt" else {"edit_of": sent["run_id"]})
    new = await c.request(frame)
    assert new["type"] == "send_ok" and new["status"] == "queued"
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == new["run_id"])
    order = [
        (e["kind"], e["run_id"])
        for e in c.events()
        if e["kind"] in ("tool.result", "run.finished", "run.started")
        and e["run_id"] in (sent["run_id"], new["run_id"])
    ]
    assert order == [
        ("run.started", sent["run_id"]),
        ("tool.result", sent["run_id"]),
        ("run.finished", sent["run_id"]),
        ("run.started", new["run_id"]),
        ("run.finished", new["run_id"]),
    ]
    assert lines(workspace_for(sid) / "counts.txt") == 1
    await c.close()


async def test_a_second_stop_and_send_while_a_tool_runs_replaces_the_first(own_server, cookie):
    """Two stop-and-sends while an approved tool runs: the first waiting turn
    is stopped by the second (as it would have been had it started), and the
    second starts right after the tool's result."""
    start, _ = own_server
    server = start(AGENT_TOOLS=TOOLS)
    c, sid = await open_session(server, cookie)
    sent, _ = await _slow_count_running(c, sid)
    second = await c.request(
        {"type": "send", "client_message_id": "m2", "text": "/stream 2 0", "interrupt": True}
    )
    third = await c.request(
        {"type": "send", "client_message_id": "m3", "text": "/stream 3 0", "interrupt": True}
    )
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == third["run_id"])
    ends = {
        e["run_id"]: e["data"]["stop_reason"] for e in c.events() if e["kind"] == "run.finished"
    }
    assert ends == {
        sent["run_id"]: "cancelled",
        second["run_id"]: "cancelled",
        third["run_id"]: "end_turn",
    }
    started = [e["run_id"] for e in c.events() if e["kind"] == "run.started"]
    assert started == [sent["run_id"], third["run_id"]]
    await c.close()
