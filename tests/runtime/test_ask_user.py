"""A form the agent asks (runtime/ask_user.py, the scripted ``/ask``): a
question gate carrying its form, answered with typed fields checked by the
server (a bad value refused, the gate still waiting), once, from any
socket; the answer reaches the agent as the call's result."""

from __future__ import annotations

import json

import pytest
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


async def test_an_answer_keeps_the_fields_given_and_nothing_else(server, cookie):
    """Optional fields sent empty or null are not answered: the log, the row
    and the agent hold exactly the fields given."""
    a, _sid = await open_session(server, cookie)
    run_id, asked = await _asked(a)
    sent = {**GOOD, "start": "", "age": None}
    assert (await _decide(a, asked["approval_id"], "answer", answer=sent))["type"] == "decide_ok"
    await a.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    [decided] = [e["data"] for e in a.events() if e["kind"] == "approval.decided"]
    given = {k: v for k, v in GOOD.items() if k != "age"}
    assert decided["answer"] == given
    [said] = [e["data"]["text"] for e in a.events() if e["kind"] == "assistant.message"]
    assert said == "Thank you. The form was answered: " + json.dumps(given, sort_keys=True)
    await a.close()


async def test_a_form_no_card_renders_fails_the_call_and_the_run_goes_on(server, cookie):
    """ask_user with a field of a type no card shows: no question is asked,
    the call fails with why (the model may ask again), the run ends well."""
    a, _sid = await open_session(server, cookie)
    form = {"properties": {"tags": {"type": "array"}}}
    text = "/tool ask_user " + json.dumps({"message": "Tags?", "schema": form})
    run_id = (await send_text(a, text, "m1"))["run_id"]
    end = await a.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    assert end["data"] == {"stop_reason": "end_turn"}
    [result] = [e["data"] for e in a.events() if e["kind"] == "tool.result"]
    assert result["ok"] is False
    assert result["output"] == (
        "ask_user: the form cannot be shown: field 'tags': its type is one of "
        "string, number, integer, boolean"
    )
    assert not [e for e in a.events() if e["kind"] == "approval.requested"]
    await a.close()


@pytest.mark.django_db
def test_a_form_approved_unchecked_answers_nothing(user):
    """A question whose form needs typing, approved by a version before
    forms (a rolling deploy): no answer (the tool hears cancelled, never an
    empty accept); one without a form answers as before."""
    from sessions_app.log.sessions import create_session
    from sessions_app.runtime import questions
    from sessions_app.runtime.gates import Gate, Kind

    session = create_session(user, "t")
    run = Run.objects.create(session=session, client_message_id="m", text="x", message_seq=1)
    form = Gate("ask_a", "ask_user", questions.asked("Who?", ASK_FORM), kind=Kind.QUESTION)
    old = Gate("ask_b", "notes__forget", {"message": "Sure?", "answer": {"sure": True}})
    rows = [gate.row(session.id, run.id) for gate in (form, old)]
    for row in rows:
        row.status = "approved"
        row.save()
    assert questions.answered(rows[0].id) is None
    assert questions.answered(rows[1].id) == {"sure": True}


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
