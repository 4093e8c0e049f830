"""Questions (sessions_app/runtime/questions.py): an MCP server that asks the
user during a call (an elicitation) gets a gate, decided once like any
gate, while its run stays on its worker; against a real daphne (and run
workers in production) and the notes server over stdio."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from types import SimpleNamespace

import httpx
import pytest
from django.conf import settings

from sessions_app.models import ApprovalRequest, Event, Run
from sessions_app.runtime.durable import UNKNOWN_OUTPUT
from sessions_app.wire.forms import defaults
from tests.harness import api_key
from tests.mcp import servers
from tests.runtime.test_mcp import finished, kinds, send
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def question(run_id: str) -> ApprovalRequest | None:
    return ApprovalRequest.objects.filter(
        run_id=run_id, tool_call_id__startswith="ask_", status="pending"
    ).first()


def asked_and_approved(c: httpx.Client, text: str) -> tuple[str, str, ApprovalRequest]:
    """Send the call, approve it; the session, the run and the question it asks."""
    sid, run_id = send(c, text, "m1")
    gate = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run_id).first())
    assert c.post(f"/api/approvals/{gate.id}/decide/", json={"decision": "approve"}).is_success
    return sid, run_id, wait_for(lambda: question(run_id))


def results(sid: str) -> list[tuple[str, bool, str]]:
    return [
        (d["tool_call_id"][:4], d["ok"], d["output"]) for k, d in kinds(sid) if k == "tool.result"
    ]


@pytest.fixture
def c(mcp_server, user):
    server, _notes = mcp_server
    with httpx.Client(
        base_url=server.http, headers={"Authorization": f"Token {api_key(user)}"}, timeout=30
    ) as client:
        yield client


def test_a_question_is_a_gate_that_approving_answers_once(c, mcp_server):
    """forget() asks "Forget the note?": the log shows a gate (its tool.call,
    approval.requested with the server's message and what approving answers,
    run.paused) while the run stays running on its worker; approving it
    accepts, once (a second decision is 409), and the tool goes on."""
    _server, notes = mcp_server
    sid, run_id, asked = asked_and_approved(c, '/tool notes__forget {"name": "a"}')
    assert Run.objects.get(id=run_id).status == "running"
    assert asked.tool == "notes__forget"
    assert asked.args["message"] == "Forget the note 'a'?"
    assert asked.args["answer"] == {"sure": True}  # what approving answers
    assert asked.args["schema"]["properties"]["sure"]["type"] == "boolean"
    logged = kinds(sid)
    at = next(i for i, (k, d) in enumerate(logged) if d.get("tool_call_id") == asked.tool_call_id)
    assert [k for k, _ in logged[at : at + 3]] == ["tool.call", "approval.requested", "run.paused"]
    note = logged[at + 1][1]["note"]
    assert note == "Forget the note 'a'?\n\nApproving answers: sure = true"
    decided = c.post(f"/api/approvals/{asked.id}/decide/", json={"decision": "approve"})
    assert decided.status_code == 200
    again = c.post(f"/api/approvals/{asked.id}/decide/", json={"decision": "deny"})
    assert again.status_code == 409
    run = wait_for(lambda: finished(run_id))
    assert run.stop_reason == "end_turn"
    assert notes.read_text() == "forgot a\n"
    assert results(sid) == [("ask_", True, "accepted"), ("call", True, "forgot a")]


def test_denying_a_question_declines_and_the_tool_says_so(c, mcp_server):
    """Deny: the server is told "decline", forgets nothing, and the run ends."""
    _server, notes = mcp_server
    sid, run_id, asked = asked_and_approved(c, '/tool notes__forget {"name": "b"}')
    c.post(f"/api/approvals/{asked.id}/decide/", json={"decision": "deny"})
    assert wait_for(lambda: finished(run_id)).stop_reason == "end_turn"
    assert notes.read_text() == ""
    assert results(sid) == [("ask_", False, "declined"), ("call", True, "kept b: decline")]


def test_a_cancel_while_a_question_waits_answers_it_and_ends_the_run(c, mcp_server):
    """Stop while the question waits: it is declined at once, the tool's
    result is logged, then the run ends cancelled (nothing waits forever)."""
    _server, notes = mcp_server
    sid, run_id, asked = asked_and_approved(c, '/tool notes__forget {"name": "c"}')
    assert c.post(f"/api/runs/{run_id}/cancel/").is_success
    assert wait_for(lambda: finished(run_id)).stop_reason == "cancelled"
    assert notes.read_text() == ""
    assert results(sid) == [("ask_", False, "declined"), ("call", True, "kept c: decline")]
    assert ApprovalRequest.objects.get(id=asked.id).status == "denied"
    assert not Event.objects.filter(session_id=sid, kind="run.finished").count() > 1


def test_a_form_that_needs_typed_input_is_answered_with_it(c, mcp_server):
    """rename() asks for a new name, which no default gives: approving is
    refused (the form must be answered), an answer missing the name is
    refused with why, and the typed answer is what the server accepts."""
    sid, run_id, asked = asked_and_approved(c, '/tool notes__rename {"name": "d"}')
    assert "answer" not in asked.args
    decide = f"/api/approvals/{asked.id}/decide/"
    refused = c.post(decide, json={"decision": "approve"})
    assert refused.status_code == 400 and "answer its form" in refused.json()["message"]
    refused = c.post(decide, json={"decision": "answer", "answer": {"new_name": ""}})
    assert refused.json()["message"] == "the answer does not fit the form: new_name: required"
    assert c.post(decide, json={"decision": "answer", "answer": {"new_name": "e"}}).is_success
    assert wait_for(lambda: finished(run_id)).stop_reason == "end_turn"
    assert results(sid) == [("ask_", True, "accepted"), ("call", True, "renamed d to e")]
    row = ApprovalRequest.objects.get(id=asked.id)
    assert (row.status, row.answer, row.decided_via) == ("answered", {"new_name": "e"}, "api_key")


def test_a_form_the_cards_cannot_show_is_declined_without_a_gate(c, mcp_server):
    """A field no card checks (a pattern): the server is told
    "decline" at once, and no question is logged."""
    sid, run_id = send(c, '/tool notes__tag {"name": "f"}', "m1")
    gate = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run_id).first())
    c.post(f"/api/approvals/{gate.id}/decide/", json={"decision": "approve"})
    assert wait_for(lambda: finished(run_id)).stop_reason == "end_turn"
    assert results(sid) == [("call", True, "untagged f: decline")]
    assert ApprovalRequest.objects.filter(run_id=run_id).count() == 1


def test_what_approving_answers_is_the_forms_defaults_and_yes():
    """Each field's default, true for a required yes/no, an optional field
    without one left out; a required field with neither cannot be answered."""
    form = {
        "type": "object",
        "properties": {
            "sure": {"type": "boolean"},
            "copies": {"type": "integer", "default": 2},
            "why": {"type": "string"},
        },
        "required": ["sure"],
    }
    assert defaults(form) == {"sure": True, "copies": 2}
    assert defaults({"properties": {"name": {"type": "string"}}, "required": ["name"]}) is None
    assert defaults({"type": "object"}) == {}


def chunks(text: str) -> list[dict]:
    return [json.loads(x[6:]) for x in text.splitlines() if x.startswith("data: {")]


def test_both_dialects_show_the_question_as_a_gate_and_answer_it(c, mcp_server):
    """An AI SDK chat gets the question as a second tool-approval-request
    (its response ends there, as at any gate) and approves it with its
    next request; an AG-UI run gets it as a second interrupt and denies it
    with its resume. Each tool runs once, each question is decided once."""
    _server, notes = mcp_server
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": ""}]}

    def approve(chat: str, gate: dict) -> dict:
        part = {
            "type": "tool-notes__forget",
            "toolCallId": gate["toolCallId"],
            "state": "approval-responded",
            "approval": {"id": gate["approvalId"], "approved": True},
        }
        return {"id": chat, "messages": [user, {"id": "a", "role": "assistant", "parts": [part]}]}

    user["parts"][0]["text"] = '/tool notes__forget {"name": "ai"}'
    first = chunks(c.post("/api/ai-sdk/chat", json={"id": "q1", "messages": [user]}).text)
    call = next(x for x in first if x["type"] == "tool-approval-request")
    second = chunks(c.post("/api/ai-sdk/chat", json=approve("q1", call)).text)
    asked = next(x for x in second if x["type"] == "tool-approval-request")
    assert asked["toolCallId"].startswith("ask_")
    # A new message meanwhile would queue behind the question: refused, as at any gate.
    other = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "/echo later"}]}
    refused = c.post("/api/ai-sdk/chat", json={"id": "q1", "messages": [user, other]})
    assert refused.status_code == 409 and refused.json()["code"] == "approval_pending"
    assert "tool-output-available" not in [x["type"] for x in second]  # it waits
    third = chunks(c.post("/api/ai-sdk/chat", json=approve("q1", asked)).text)
    outputs = [x["output"] for x in third if x["type"] == "tool-output-available"]
    assert outputs == ["accepted", "forgot ai"] and third[-1]["type"] == "finish"

    def resume(approval_id: str, approved: bool) -> dict:
        entry = {
            "interruptId": approval_id,
            "status": "resolved",
            "payload": {"approved": approved},
        }
        return {"threadId": "q2", "runId": "r", "messages": [], "resume": [entry]}

    start = {
        "threadId": "q2",
        "runId": "r",
        "messages": [{"id": "u2", "role": "user", "content": '/tool notes__forget {"name": "ag"}'}],
    }
    (gate,) = chunks(c.post("/api/ag-ui/", json=start).text)[-1]["outcome"]["interrupts"]
    events = chunks(c.post("/api/ag-ui/", json=resume(gate["id"], True)).text)
    (question,) = events[-1]["outcome"]["interrupts"]
    events = chunks(c.post("/api/ag-ui/", json=resume(question["id"], False)).text)
    results = [e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert results[-2:] == ["declined", "kept ag: decline"]
    assert events[-1]["outcome"] == {"type": "success"}
    assert notes.read_text() == "forgot ai\n"
    decided = ApprovalRequest.objects.filter(tool_call_id__startswith="ask_").order_by("created_at")
    assert [q.status for q in decided] == ["approved", "denied"]


def test_a_question_whose_worker_dies_is_cancelled_and_its_call_asked_again(
    mcp_server, own_server, user
):
    """kill -9 of the process whose tool waits on a question: the drive that
    takes the run over closes the question (cancelled, with its result), logs
    the call's outcome as unknown and asks again whether to run it; the old
    question can no longer be decided."""
    server, notes = mcp_server
    start, procs = own_server
    key = {"Authorization": f"Token {api_key(user)}"}
    with httpx.Client(base_url=server.http, headers=key, timeout=30) as c:
        sid, run_id, asked = asked_and_approved(c, '/tool notes__forget {"name": "k"}')
    if settings.AGENT_RUNNER == "worker":
        os.kill(int(Run.objects.get(id=run_id).worker.split(":")[1]), signal.SIGKILL)
    else:
        for proc in procs:
            proc.kill()
        procs.clear()
        server = start(AGENT_MCP_SERVERS=json.dumps(servers(notes)))
    again = wait_for(
        lambda: ApprovalRequest.objects.filter(
            run_id=run_id, status="pending", tool_call_id__startswith="call_"
        ).first()
    )
    assert ApprovalRequest.objects.get(id=asked.id).status == "cancelled"
    assert results(sid) == [("ask_", False, "cancelled"), ("call", False, UNKNOWN_OUTPUT)]
    with httpx.Client(base_url=server.http, headers=key, timeout=30) as c:
        late = c.post(f"/api/approvals/{asked.id}/decide/", json={"decision": "approve"})
        assert late.status_code == 409
        c.post(f"/api/approvals/{again.id}/decide/", json={"decision": "deny"})
    assert wait_for(lambda: finished(run_id)).stop_reason == "end_turn"
    assert notes.read_text() == ""


def test_a_question_nobody_answers_is_cancelled_and_the_tool_told(own_server, tmp_path, user):
    """Past AGENT_MCP_ASK_SECONDS the question is closed (cancelled,
    'unanswered'), the server hears "cancel", and the run goes on."""
    start, _procs = own_server
    notes = tmp_path / "notes.txt"
    notes.touch()
    server = start(AGENT_MCP_SERVERS=json.dumps(servers(notes)), AGENT_MCP_ASK_SECONDS="1")
    key = {"Authorization": f"Token {api_key(user)}"}
    with httpx.Client(base_url=server.http, headers=key, timeout=30) as c:
        sid, run_id = send(c, '/tool notes__forget {"name": "t"}', "m1")
        gate = wait_for(lambda: ApprovalRequest.objects.filter(run_id=run_id).first())
        c.post(f"/api/approvals/{gate.id}/decide/", json={"decision": "approve"})
    assert wait_for(lambda: finished(run_id)).stop_reason == "end_turn"
    closed = ApprovalRequest.objects.get(run_id=run_id, tool_call_id__startswith="ask_")
    assert (closed.status, closed.decided_by) == ("cancelled", "unanswered")
    assert results(sid) == [("ask_", False, "cancelled"), ("call", True, "kept t: cancel")]


def test_a_server_that_dies_while_its_question_waits_is_a_tool_error_once_answered(c, mcp_server):
    """The server exits while its question waits (between two rounds of the
    call, on the 2026-07-28 protocol): the question stays answerable, and
    once answered the call fails as any call to a server gone does; the run
    ends normally."""
    _server, notes = mcp_server
    sid, run_id, asked = asked_and_approved(c, '/tool notes__forget {"name": "z"}')
    mine = f"NOTES_FILE={notes}".encode()
    found = subprocess.run(["pgrep", "-f", "tests.mcp.notes_server"], capture_output=True)
    for pid in found.stdout.split():
        with contextlib.suppress(OSError), open(f"/proc/{int(pid)}/environ", "rb") as env:
            if mine in env.read():
                os.kill(int(pid), signal.SIGKILL)
    c.post(f"/api/approvals/{asked.id}/decide/", json={"decision": "approve"})
    assert wait_for(lambda: finished(run_id)).stop_reason == "end_turn"
    (question, call) = results(sid)
    assert question == ("ask_", True, "accepted")
    assert call[:2] == ("call", False) and "MCP server 'notes' failed" in call[2]
    assert notes.read_text() == ""


def test_a_run_stopped_before_its_server_asks_gets_no_question(user):
    """A cancel that waits for the tool (recorded on the run) comes before
    the server's question: no gate is logged, the server hears "cancel"."""
    from sessions_app.log.events import RunGuard
    from sessions_app.log.sessions import create_session
    from sessions_app.runtime.questions import Asker

    session = create_session(user)
    run = Run.objects.create(
        session=session,
        client_message_id="m1",
        text="/tool notes__forget {}",
        message_seq=2,
        status="running",
        worker="w1",
        state={"gate": "call_x", "cancel": {"by": "alice", "message": "", "gates": "deny"}},
    )
    ctx = SimpleNamespace(
        run_id=run.id,
        session_id=session.id,
        worker="w1",
        guard=RunGuard(run.id, "w1"),
        aborted=threading.Event(),
    )
    sure = {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}
    assert Asker(ctx, "notes__forget").ask("Forget?", sure) == ("cancelled", None)
    assert not ApprovalRequest.objects.filter(run=run).exists()
    assert not Event.objects.filter(session=session, kind="approval.requested").exists()
