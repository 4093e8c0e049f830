"""Runs against real processes: no viewer needed, durable gates, queues, recovery.

Each test uses the profile under test: the embedded server (runs in the daphne
process) or PostgreSQL + Redis with separate ``run_agent_worker`` processes.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime.tools import workspace_for
from tests.fakes import FakeOpenAIServer, text_response, tool_call_response
from tests.harness import WsClient, session_cookie
from tests.support.log import logged
from tests.support.rig import Hold
from tests.support.sessions import kinds, open_session, send_text
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


async def test_run_goes_on_with_no_viewer(server, cookie):
    """A run goes on after its only socket closes (it streams until the test
    releases it, with nobody watching); a later resume finds it all."""
    c, sid = await open_session(server, cookie)
    hold = Hold(pace=20)
    sent = await send_text(c, hold.text, "m1")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta")
    await c.close()
    said = await asyncio.to_thread(lambda: logged(sid, "assistant.delta"))
    await wait_until(lambda: len(logged(sid, "assistant.delta")) > len(said) + 3)  # unwatched
    hold.release()
    await wait_until(lambda: Run.objects.filter(id=sent["run_id"], status="finished").exists())
    d = await WsClient.connect(server.ws, cookie)
    ok = await d.resume(sid, 0)
    await d.wait_event(lambda f: f["seq"] == ok["head"])
    deltas = [e["data"]["text"] for e in d.events() if e["kind"] == "assistant.delta"]
    assert len(deltas) == Hold.answer("".join(deltas))
    assert d.seqs() == list(range(1, ok["head"] + 1))
    assert d.events()[-1]["kind"] == "run.finished"
    assert d.events()[-1]["data"] == {"stop_reason": "end_turn"}
    await d.close()


async def test_two_sockets_decide_at_once_one_wins(server, cookie):
    """Simultaneous approve from two sockets: one decide_ok, one already_decided, one line."""
    a, sid = await open_session(server, cookie)
    b = await WsClient.connect(server.ws, cookie)
    await b.resume(sid, 0)
    await send_text(a, "/write notes.txt hello world", "m1")
    req = await a.wait_event(lambda f: f["kind"] == "approval.requested")
    await b.wait_event(lambda f: f["kind"] == "approval.requested")
    aid = req["data"]["approval_id"]
    ra, rb = await asyncio.gather(
        a.request({"type": "decide", "approval_id": aid, "decision": "approve"}),
        b.request({"type": "decide", "approval_id": aid, "decision": "approve"}),
    )
    assert sorted([ra["type"], rb["type"]]) == ["decide_ok", "error"]
    loser = ra if ra["type"] == "error" else rb
    assert loser["code"] == "already_decided"
    assert (loser["decision"], loser["decided_by"]) == ("approve", "alice")
    await a.wait_event(lambda f: f["kind"] == "run.finished")
    decided = [e for e in a.events() if e["kind"] == "approval.decided"]
    assert len(decided) == 1 and decided[0]["data"]["decided_by"] == "alice"
    result = next(e for e in a.events() if e["kind"] == "tool.result")
    assert result["data"]["ok"] is True
    assert (workspace_for(sid) / "notes.txt").read_text() == "hello world\n"
    await a.close()
    await b.close()


async def test_gate_events_and_denial(server, cookie):
    """A gate logs tool.call, approval.requested, run.paused; deny is never executed."""
    c, sid = await open_session(server, cookie)
    sent = await send_text(c, "/write x.txt nope", "m1")
    paused = await c.wait_event(lambda f: f["kind"] == "run.paused")
    assert kinds(c.events(), sent["run_id"]) == [
        "user.message",
        "run.started",
        "tool.call",
        "approval.requested",
        "run.paused",
    ]
    call, req = (e for e in c.events() if e["kind"] in ("tool.call", "approval.requested"))
    assert call["data"] == {
        "tool_call_id": req["data"]["tool_call_id"],
        "tool": "write_file",
        "args": {"path": "x.txt", "text": "nope"},
        "display": [{"arg": "path", "label": "path", "as": "code"}, {"arg": "text", "as": "block"}],
    }
    assert paused["data"]["stop_reason"] == "requires_approval"
    presence = await c.wait(lambda f: f["type"] == "presence" and f["running"] is True)
    assert presence["viewers"] == 1
    aid = req["data"]["approval_id"]
    ok = await c.request({"type": "decide", "approval_id": aid, "decision": "deny"})
    assert ok == {
        "type": "decide_ok",
        "request_id": ok["request_id"],
        "approval_id": aid,
        "decision": "deny",
    }
    await c.wait_event(lambda f: f["kind"] == "run.finished")
    result = next(e for e in c.events() if e["kind"] == "tool.result")
    assert result["data"] == {
        "tool_call_id": req["data"]["tool_call_id"],
        "ok": False,
        "output": "denied",
    }
    assert not (workspace_for(sid) / "x.txt").exists()
    again = await c.request({"type": "decide", "approval_id": aid, "decision": "approve"})
    assert again["code"] == "already_decided" and again["decision"] == "deny"
    await c.close()


async def test_three_sends_during_a_run_queue_in_order(server, cookie):
    """Three inputs sent during a run make three queued runs that run in order."""
    c, sid = await open_session(server, cookie)
    hold = Hold()
    first = await send_text(c, hold.text, "m0")
    queued = [await send_text(c, "/stream 2 0", f"m{i + 1}") for i in range(3)]
    assert first["status"] == "started"
    assert [q["status"] for q in queued] == ["queued"] * 3
    dup = await send_text(c, "whatever", "m2")
    assert dup["status"] == "duplicate" and dup["run_id"] == queued[1]["run_id"]
    hold.release()
    last = queued[-1]["run_id"]
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == last)
    started = [e["run_id"] for e in c.events() if e["kind"] == "run.started"]
    assert started == [first["run_id"]] + [q["run_id"] for q in queued]
    finished = [e["run_id"] for e in c.events() if e["kind"] == "run.finished"]
    assert finished == started
    assert Run.objects.filter(session_id=sid).count() == 4
    await c.close()


@pytest.mark.parametrize(
    "command, reason",
    [
        ("/write ../escape.txt x", ".."),
        ("/write /tmp/abs-escape.txt x", "absolute"),
        ("/write link/owned.txt x", "symlink"),
        ("/sh rm -rf .", "not allowed"),
        ("/sh cat ../../etc/passwd", ".."),
    ],
)
async def test_escapes_fail_as_tool_results_and_execute_nothing(
    server, cookie, command, reason, tmp_path
):
    """Path escapes, symlink escapes and off-list commands fail; nothing is executed."""
    c, sid = await open_session(server, cookie)
    ws = workspace_for(sid)
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "link").symlink_to(outside)
    (ws / "keep.txt").write_text("keep\n")
    await send_text(c, command, "m1")
    req = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    await c.request(
        {"type": "decide", "approval_id": req["data"]["approval_id"], "decision": "approve"}
    )
    result = await c.wait_event(lambda f: f["kind"] == "tool.result")
    assert result["data"]["ok"] is False
    assert reason in result["data"]["output"].lower(), result["data"]["output"]
    await c.wait_event(lambda f: f["kind"] == "run.finished")
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in ws.iterdir()) == ["keep.txt", "link"]
    assert not Path("/tmp/abs-escape.txt").exists()
    await c.close()


async def test_sh_runs_allowed_command_in_workspace(server, cookie):
    """An approved /sh echo runs once in the workspace and reports its output."""
    c, _ = await open_session(server, cookie)
    await send_text(c, "/sh echo hello there", "m1")
    req = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    assert req["data"]["tool"] == "terminal" and req["data"]["args"] == {
        "command": "echo hello there"
    }
    await c.request(
        {"type": "decide", "approval_id": req["data"]["approval_id"], "decision": "approve"}
    )
    result = await c.wait_event(lambda f: f["kind"] == "tool.result")
    assert result["data"]["ok"] is True and result["data"]["output"] == "hello there\n"
    await c.close()


async def test_cancel_running_parked_and_queued(server, cookie):
    """Cancel ends a running run, denies a parked one's gate first, and dequeues a queued one."""
    c, sid = await open_session(server, cookie)
    running = await send_text(c, Hold().text, "m1")
    gated = await send_text(c, "/write a.txt x", "m2")
    queued = await send_text(c, "/stream 1 0", "m3")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta")
    ok = await c.request({"type": "cancel", "run_id": queued["run_id"]})
    assert ok["type"] == "cancel_ok"
    ok = await c.request({"type": "cancel", "run_id": running["run_id"]})
    assert ok["type"] == "cancel_ok"
    await c.wait_event(lambda f: f["kind"] == "run.paused")
    ok = await c.request({"type": "cancel", "run_id": gated["run_id"]})
    assert ok["type"] == "cancel_ok"
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == gated["run_id"])
    ends = {e["run_id"]: e["data"] for e in c.events() if e["kind"] == "run.finished"}
    assert ends == {r["run_id"]: {"stop_reason": "cancelled"} for r in (running, gated, queued)}
    # Nothing of the cancelled stream is logged after its run.finished.
    seq_end = next(
        e["seq"]
        for e in c.events()
        if e["kind"] == "run.finished" and e["run_id"] == running["run_id"]
    )
    assert not [e for e in c.events() if e["seq"] > seq_end and e["run_id"] == running["run_id"]]
    decided = next(e for e in c.events() if e["kind"] == "approval.decided")
    assert decided["data"]["decision"] == "deny" and decided["data"]["decided_by"] == "alice"
    assert queued["run_id"] not in [e["run_id"] for e in c.events() if e["kind"] == "run.started"]
    again = await c.request({"type": "cancel", "run_id": running["run_id"]})
    assert again["code"] == "not_pending"
    assert not (workspace_for(sid) / "a.txt").exists()
    await c.close()


async def test_fail_and_malformed_commands_finish_with_error(server, cookie):
    """/fail and malformed commands finish with stop_reason error and a message."""
    c, _ = await open_session(server, cookie)
    for i, text in enumerate(["/fail", "/stream abc", "/stream 100001", "/write onlypath"]):
        sent = await send_text(c, text, f"m{i}")
        end = await c.wait_event(
            lambda f, r=sent["run_id"]: f["kind"] == "run.finished" and f["run_id"] == r
        )
        assert end["data"]["stop_reason"] == "error" and end["data"]["message"]
    await c.close()


async def test_decide_and_cancel_are_confined_to_the_socketopen_session(server, cookie):
    """An approval or run of another session (same user) is not_found on this socket."""
    a, _ = await open_session(server, cookie)
    b, _ = await open_session(server, cookie)
    sent = await send_text(a, "/write f.txt x", "m1")
    req = await a.wait_event(lambda f: f["kind"] == "approval.requested")
    err = await b.request(
        {"type": "decide", "approval_id": req["data"]["approval_id"], "decision": "approve"}
    )
    assert err["code"] == "not_found"
    err = await b.request({"type": "cancel", "run_id": sent["run_id"]})
    assert err["code"] == "not_found"
    assert ApprovalRequest.objects.get(id=req["data"]["approval_id"]).status == "pending"
    await a.close()
    await b.close()


def _admin_post(server, user, path: str, data: dict) -> str:
    """POST a form to the live server's admin as ``user`` (CSRF token included)."""
    cookie = session_cookie(user)
    opener = urllib.request.build_opener()
    opener.addheaders = [("Cookie", cookie)]
    page = opener.open(server.http + path).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    csrf_cookie = f"csrftoken={token}"
    opener.addheaders = [("Cookie", f"{cookie}; {csrf_cookie}"), ("Referer", server.http + path)]
    body = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": token}).encode()
    return opener.open(server.http + path, body).read().decode()


async def test_admin_decision_reaches_open_sockets(server, cookie, django_user_model):
    """Approving in the admin logs decided_by the admin and resumes the run live."""
    admin = django_user_model.objects.create_superuser("root", password="root-pass-1")
    c, sid = await open_session(server, cookie)
    await send_text(c, "/write admin.txt from admin", "m1")
    req = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    aid = req["data"]["approval_id"]
    await asyncio.to_thread(
        _admin_post,
        server,
        admin,
        "/admin/sessions_app/approvalrequest/",
        {"action": "approve", "_selected_action": aid, "index": "0"},
    )
    decided = await c.wait_event(lambda f: f["kind"] == "approval.decided")
    assert decided["data"] == {"approval_id": aid, "decision": "approve", "decided_by": "root"}
    await c.wait_event(lambda f: f["kind"] == "run.finished")
    assert (workspace_for(sid) / "admin.txt").read_text() == "from admin\n"
    await c.close()


# --- restarts and crashes: dedicated processes ----------------------------------


async def test_gate_survives_kill_9_of_the_server(own_server, cookie):
    """kill -9 while parked; restart; the gate is still pending; approve runs the tool once."""
    start, procs = own_server
    server = start()
    c, sid = await open_session(server, cookie)
    await send_text(c, "/write survive.txt once", "m1")
    req = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    await c.wait_event(lambda f: f["kind"] == "run.paused")
    for p in procs:
        p.kill()
    procs.clear()
    server = start()
    d = await WsClient.connect(server.ws, cookie)
    ok = await d.resume(sid, 0)
    await d.wait_event(lambda f: f["seq"] == ok["head"])
    assert d.events()[-1]["kind"] == "run.paused"
    assert ApprovalRequest.objects.get(id=req["data"]["approval_id"]).status == "pending"
    await d.request(
        {"type": "decide", "approval_id": req["data"]["approval_id"], "decision": "approve"}
    )
    await d.wait_event(lambda f: f["kind"] == "run.finished")
    assert (workspace_for(sid) / "survive.txt").read_text() == "once\n"
    assert [e["kind"] for e in d.events()].count("tool.result") == 1


def assert_text_closed_at_the_gate(c: WsClient) -> None:
    """The text streamed before the call is closed by the runtime at the gate
    (no caret left streaming), then the answer after the tool."""
    said = [
        (e["kind"], e["data"].get("text"))
        for e in c.events()
        if e["kind"] in ("assistant.message", "tool.call")
    ]
    assert said == [
        ("assistant.message", "Let me write that. "),
        ("tool.call", None),
        ("assistant.message", "Done, wrote ai.txt."),
    ]


async def test_openai_agent_streams_and_parks_at_a_gate(own_server, cookie):
    """The openai agent against a fake endpoint: streamed text, a gated tool call, resume."""
    start, _ = own_server
    with FakeOpenAIServer() as fake:
        fake.responses.extend(
            [
                tool_call_response(
                    ("call_a", "write_file", json.dumps({"path": "ai.txt", "text": "hi"})),
                    text="Let me write that. ",
                ),
                text_response("Done", ", wrote ", "ai.txt."),
            ]
        )
        server = start(
            AGENT_CLASS="openai", OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-test"
        )
        c, sid = await open_session(server, cookie)
        await send_text(c, "please write hi to ai.txt", "m1")
        req = await c.wait_event(lambda f: f["kind"] == "approval.requested")
        assert req["data"]["tool"] == "write_file"
        assert req["data"]["args"] == {"path": "ai.txt", "text": "hi"}
        await c.request(
            {"type": "decide", "approval_id": req["data"]["approval_id"], "decision": "approve"}
        )
        end = await c.wait_event(lambda f: f["kind"] == "run.finished")
        assert_text_closed_at_the_gate(c)
        assert end["data"]["stop_reason"] == "end_turn"
        assert (workspace_for(sid) / "ai.txt").read_text() == "hi\n"
        tool_msgs = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
        assert tool_msgs and tool_msgs[0]["tool_call_id"] == "call_a"
        await c.close()


async def test_anthropic_agent_streams_and_parks_at_a_gate(own_server, cookie):
    """The anthropic agent against a fake Messages endpoint, through the real
    server: streamed text, a gated tool use, the tool run once, resume."""
    from tests.fakes import FakeAnthropicServer, anthropic_response

    start, _ = own_server
    with FakeAnthropicServer() as fake:
        fake.responses.extend(
            [
                anthropic_response(
                    "Let me write that. ",
                    ("tool_use", "toolu_a", "write_file", ['{"path": "ai.txt", ', '"text": "hi"}']),
                    stop="tool_use",
                ),
                anthropic_response(["Done", ", wrote ", "ai.txt."]),
            ]
        )
        server = start(
            AGENT_CLASS="anthropic", ANTHROPIC_BASE_URL=fake.base_url, ANTHROPIC_API_KEY="k"
        )
        c, sid = await open_session(server, cookie)
        await send_text(c, "please write hi to ai.txt", "m1")
        req = await c.wait_event(lambda f: f["kind"] == "approval.requested")
        assert req["data"]["args"] == {"path": "ai.txt", "text": "hi"}
        await c.request(
            {"type": "decide", "approval_id": req["data"]["approval_id"], "decision": "approve"}
        )
        end = await c.wait_event(lambda f: f["kind"] == "run.finished")
        assert_text_closed_at_the_gate(c)
        assert end["data"]["stop_reason"] == "end_turn"
        assert (workspace_for(sid) / "ai.txt").read_text() == "hi\n"
        (result,) = fake.requests[1]["messages"][-1]["content"]
        assert result["tool_use_id"] == "toolu_a" and result["is_error"] is False
        await c.close()


async def test_an_agent_message_is_cut_at_the_size_cap(own_server, cookie):
    """AGENT_MAX_MESSAGE_CHARS: a longer answer is logged cut at the cap, its
    deltas and its final message alike, and says so."""
    from sessions_app.runtime.executor import cut_marker

    start, _ = own_server
    d = start(AGENT_MAX_MESSAGE_CHARS="50")
    c, _sid = await open_session(d, cookie)
    text = "".join(f"w{i} " for i in range(60)).strip()
    await send_text(c, "/echo " + text, "m1")
    await c.wait_event(lambda f: f["kind"] == "run.finished")
    shown = text[:50] + cut_marker(50)
    deltas = "".join(e["data"]["text"] for e in c.events() if e["kind"] == "assistant.delta")
    messages = [e["data"]["text"] for e in c.events() if e["kind"] == "assistant.message"]
    assert deltas == shown and messages == [shown]
    await c.close()
