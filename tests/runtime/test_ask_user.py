"""A form the agent asks (runtime/ask_user.py, the scripted ``/ask``): a
question gate carrying its form, answered with typed fields checked by the
server (a bad value refused, the gate still waiting), once, from any
socket; the answer reaches the agent as the call's result."""

from __future__ import annotations

import json

from channels.db import database_sync_to_async

from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime.agents.scripted import ASK_FORM, ASK_MESSAGE
from tests.support.clients import connect
from tests.support.sessions import kinds, open_session, send_text

GOOD = {"name": "Ada", "email": "ada@example.org", "age": 36, "plan": "team", "news": True}


async def _asked(c, cmid: str = "m1") -> tuple[str, dict]:
    run_id = (await send_text(c, "/ask", cmid))["run_id"]
    asked = await c.wait_event(
        lambda f: f["kind"] == "approval.requested" and f["run_id"] == run_id
    )
    return run_id, asked["data"]


async def _decide(c, approval_id: str, decision: str, **more) -> dict:
    frame = {"type": "decide", "approval_id": approval_id, "decision": decision, **more}
    return await c.request(frame)


def _row(approval_id: str) -> ApprovalRequest:
    return ApprovalRequest.objects.get(id=approval_id)


async def test_a_form_is_asked_refused_when_bad_and_answered_once(server, cookie):
    """/ask: the card's gate is a question with the form and no answer that
    approving could give (required fields have no default); approve and a
    bad answer are refused with what is wrong, the gate still pending; a
    good answer from another socket stands, a second answer is refused; the
    agent is told exactly the fields answered, and the run ends."""
    a, sid = await open_session(server, cookie)
    b = await connect(server, cookie)
    await b.resume(sid, 0)
    run_id, asked = await _asked(a)
    assert asked["kind"] == "question" and asked["tool"] == "ask_user"
    assert asked["args"] == {"message": ASK_MESSAGE, "schema": ASK_FORM}
    assert asked["note"] == ASK_MESSAGE
    approval_id = asked["approval_id"]
    refused = await _decide(a, approval_id, "approve")
    assert refused["code"] == "bad_frame" and "answer its form" in refused["message"]
    bad = {**GOOD, "email": "ada", "age": 200, "color": "red"}
    refused = await _decide(a, approval_id, "answer", answer=bad)
    assert refused["type"] == "error" and refused["code"] == "bad_frame"
    assert refused["message"] == (
        "the answer does not fit the form: age: must be at most 150; "
        "color: this form has no such field; email: must be an email address"
    )
    missing = await _decide(a, approval_id, "answer", answer={"email": "ada@example.org"})
    assert "name: required" in missing["message"]
    row = await database_sync_to_async(_row)(approval_id)
    assert row.status == "pending"
    assert (await _decide(b, approval_id, "answer", answer=GOOD))["type"] == "decide_ok"
    again = await _decide(a, approval_id, "answer", answer=GOOD)
    assert again["code"] == "already_decided" and again["decision"] == "answer"
    for c in (a, b):
        end = await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
        assert end["data"] == {"stop_reason": "end_turn"}
    decided = [e["data"] for e in a.events() if e["kind"] == "approval.decided"]
    assert decided == [
        {"approval_id": approval_id, "decision": "answer", "decided_by": "alice", "answer": GOOD}
    ]
    results = [e["data"] for e in a.events() if e["kind"] == "tool.result"]
    answered = "answered: " + json.dumps(GOOD, sort_keys=True)
    assert [(r["tool_call_id"][:4], r["ok"], r["output"]) for r in results] == [
        ("ask_", True, "accepted"),
        ("call", True, answered),
    ]
    [said] = [e["data"]["text"] for e in a.events() if e["kind"] == "assistant.message"]
    assert said == f"Thank you. The form was {answered}"
    row = await database_sync_to_async(_row)(approval_id)
    assert (row.status, row.answer, row.decided_via) == ("answered", GOOD, "tab")
    assert kinds(a.events(), run_id) == [
        "user.message",
        "run.started",
        "tool.call",
        "tool.call",
        "approval.requested",
        "run.paused",
        "approval.decided",
        "tool.result",
        "tool.result",
        "assistant.message",
        "run.finished",
    ]
    assert a.seqs() == b.seqs() == list(range(1, end["seq"] + 1))
    await a.close()
    await b.close()


async def test_declining_a_form_tells_the_agent(server, cookie):
    """Deny declines: the agent is told the user chose not to answer."""
    a, _sid = await open_session(server, cookie)
    run_id, asked = await _asked(a)
    assert (await _decide(a, asked["approval_id"], "deny"))["type"] == "decide_ok"
    await a.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    [said] = [e["data"]["text"] for e in a.events() if e["kind"] == "assistant.message"]
    assert said == "Thank you. The form was declined: the user chose not to answer"
    assert await database_sync_to_async(lambda: Run.objects.get(id=run_id).status)() == "finished"
    await a.close()


async def test_an_answer_fits_only_a_question_with_a_form(server, cookie):
    """A gated call cannot be answered with a form, nor edited with one:
    each refusal names why, and the gate still waits."""
    a, _sid = await open_session(server, cookie)
    run_id = (await send_text(a, "/write f.txt hi", "m1"))["run_id"]
    asked = await a.wait_event(
        lambda f: f["kind"] == "approval.requested" and f["run_id"] == run_id
    )
    approval_id = asked["data"]["approval_id"]
    refused = await _decide(a, approval_id, "answer", answer={"x": 1})
    assert refused["message"] == "'answer' answers a question's form; this gate has none"
    refused = await _decide(a, approval_id, "approve", answer={"x": 1})
    assert refused["message"] == "an answer, and only an answer, carries 'answer' (an object)"
    assert await database_sync_to_async(lambda: _row(approval_id).status)() == "pending"
    await a.close()
