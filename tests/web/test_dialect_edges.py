"""The dialects' edges (sessions_app/web/ai_sdk.py, ag_ui.py): a message sent
while a gate waits, an AG-UI answer to a gate another tab decided long ago,
a page's reconnect that must not miss a run finished meanwhile, and bad
bodies, against a real daphne."""

from __future__ import annotations

import json

import httpx
import pytest

from sessions_app.models import AgentSession, ApprovalRequest, Event, Run
from tests.harness import api_key
from tests.support.log import logged
from tests.support.rig import Hold
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def user_part(text: str, mid: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def data_lines(text: str) -> list[dict]:
    return [json.loads(x[6:]) for x in text.splitlines() if x.startswith("data: {")]


@pytest.fixture
def client(server, user):
    with httpx.Client(
        base_url=server.http, headers={"Authorization": f"Token {api_key(user)}"}, timeout=60
    ) as c:
        yield c


def test_a_new_message_while_a_gate_waits_is_refused_with_409(client):
    """Its run would queue behind the gate while the client, streaming it,
    could not answer the gate: both dialects say so (409 approval_pending);
    the same message sent again is streamed as before, never refused."""
    first = {"id": "edge1", "messages": [user_part("/write a.txt x", "u1")]}
    assert client.post("/api/ai-sdk/chat", json=first).status_code == 200
    second = {"id": "edge1", "messages": [user_part("/echo later", "u2")]}
    refused = client.post("/api/ai-sdk/chat", json=second)
    assert refused.status_code == 409 and refused.json()["code"] == "approval_pending"
    agui = {
        "threadId": "edge1",
        "runId": "r",
        "messages": [{"id": "u3", "role": "user", "content": "hi"}],
    }
    assert client.post("/api/ag-ui/", json=agui).status_code == 409
    again = client.post("/api/ai-sdk/chat", json=first)
    assert again.status_code == 200
    assert [c["type"] for c in data_lines(again.text)].count("tool-approval-request") == 1
    assert Run.objects.count() == 1


def test_an_ag_ui_answer_after_another_tab_finished_the_run_shows_it_once(client):
    """The gate was approved from REST and the run finished before the AG-UI
    client answered: its answer gets the snapshot as it stood at the gate,
    then the rest of the run, each text once."""
    start = {
        "threadId": "edge2",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "/write b.txt y"}],
    }
    first = client.post("/api/ag-ui/", json=start)
    events = [json.loads(x[6:]) for x in first.text.splitlines() if x.startswith("data: ")]
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    assert (
        client.post(
            f"/api/approvals/{interrupt['id']}/decide/", json={"decision": "approve"}
        ).status_code
        == 200
    )
    wait_for(lambda: Run.objects.filter(session__external_id="edge2", status="finished").exists())
    answer = {
        "threadId": "edge2",
        "runId": "r2",
        "messages": [],
        "resume": [
            {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
        ],
    }
    later = client.post("/api/ag-ui/", json=answer)
    events = [json.loads(x[6:]) for x in later.text.splitlines() if x.startswith("data: ")]
    snapshot = next(e for e in events if e["type"] == "MESSAGES_SNAPSHOT")["messages"]
    assert [m["role"] for m in snapshot] == ["user", "assistant"]  # the question, the call
    said = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    final = Event.objects.filter(session__external_id="edge2", kind="assistant.message").last()
    assert said == final.data["text"]
    assert [e["type"] for e in events].count("TOOL_CALL_RESULT") == 1
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    assert ApprovalRequest.objects.get().decided_by != ""


def test_a_page_that_loaded_while_a_run_went_on_reconnects_to_it_even_once_finished(client):
    """…/messages names the first run it left out (X-Agent-Resume-Run); the
    reconnect with ?run= streams that run, whole, even if it finished in
    between (without it a finished run is not streamed: 204)."""
    hold = Hold(pace=30)
    body = {"id": "edge3", "messages": [user_part(hold.text, "u1")]}
    with client.stream("POST", "/api/ai-sdk/chat", json=body) as started:
        assert started.status_code == 200
        wait_for(
            lambda: Event.objects.filter(
                session__external_id="edge3", kind="assistant.delta"
            ).exists()
        )
        loaded = client.get("/api/ai-sdk/chat/edge3/messages")
        hold.release()
    assert [m["role"] for m in loaded.json()] == ["user"]
    left_out = loaded.headers["X-Agent-Resume-Run"]
    assert left_out == Run.objects.get(session__external_id="edge3").id
    wait_for(lambda: Run.objects.filter(session__external_id="edge3", status="finished").exists())
    assert client.get("/api/ai-sdk/chat/edge3/stream").status_code == 204
    resumed = client.get(f"/api/ai-sdk/chat/edge3/stream?run={left_out}")
    chunks = data_lines(resumed.text)
    said = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert Hold.answer(said) and [said] == [
        m["text"] for m in logged("edge3", "assistant.message", external=True)
    ]
    assert chunks[-1]["type"] == "finish" and resumed.text.endswith("data: [DONE]\n\n")
    assert client.get("/api/ai-sdk/chat/edge3/stream?run=../x").status_code == 400
    assert client.get("/api/ai-sdk/chat/edge3/stream?run=run_nope").status_code == 204


@pytest.mark.parametrize(
    "body",
    [
        {"id": "edge4", "messages": [{"id": "a", "role": "assistant", "parts": [1]}]},
        {"id": "edge4", "messages": [user_part("x" * 40_000, "u1")]},
        {"id": "edge4", "messages": [user_part("   ", "u1")]},
    ],
)
def test_bad_bodies_are_400_and_change_nothing(client, body):
    """Malformed parts, a text over the limit, a blank text: 400 with the
    protocol's code, nothing logged."""
    refused = client.post("/api/ai-sdk/chat", json=body)
    assert refused.status_code == 400
    assert refused.json()["code"] in ("bad_frame", "too_large")
    assert not Run.objects.exists()
    assert not AgentSession.objects.exists()  # validated before the chat is made


@pytest.mark.parametrize("thread", ["edge6", ""])
def test_a_refused_ag_ui_input_makes_no_thread(client, thread):
    """A blank message, or a runId holding a lone surrogate (it would be
    echoed in RUN_STARTED): 400, and no thread made, named or new."""
    blank = {
        "threadId": thread,
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": " "}],
    }
    assert client.post("/api/ag-ui/", json=blank).status_code == 400
    raw = json.dumps({**blank, "messages": [{"id": "u", "role": "user", "content": "hi"}]})
    lone = raw.replace('"runId": "r"', '"runId": "\\ud800"')
    refused = client.post("/api/ag-ui/", content=lone, headers={"Content-Type": "application/json"})
    assert refused.status_code == 400 and "surrogate" in refused.json()["message"]
    assert not AgentSession.objects.exists()


DEEP = b"[" * 200_000


@pytest.mark.parametrize("path", ["/api/ai-sdk/chat", "/api/ag-ui/", "/api/sessions/"])
def test_a_body_nested_too_deep_is_a_4xx_with_a_reason_signed_in_or_not(server, client, path):
    """200,000 nested arrays: before sign-in a 403 (the body is not read),
    after it a 400 bad_json; never a 500."""
    anonymous = httpx.post(server.http + path, content=DEEP, timeout=30)
    assert anonymous.status_code in (401, 403), anonymous.text[:200]
    assert anonymous.headers["Content-Type"].startswith("application/json")
    deep = client.post(path, content=DEEP, headers={"Content-Type": "application/json"})
    assert deep.status_code == 400 and deep.json()["code"] == "bad_json", deep.text[:200]
    seventy = b"[" * 70 + b"]" * 70  # under Python's limit, over the app's
    too_deep = client.post(path, content=seventy, headers={"Content-Type": "application/json"})
    assert too_deep.status_code == 400 and too_deep.json()["code"] == "bad_json"
    assert not AgentSession.objects.exists()


def test_one_request_answers_at_most_the_gates_waiting(client):
    """2,000 copies of one approval decide it once (the rest dropped); a
    request naming more than 64 gates is 400 too_many_answers, and one
    naming a gate that is not the session's is 404: neither decides any."""
    start = {"id": "edge8", "messages": [user_part("/write a.txt x", "u1")]}
    chunks = data_lines(client.post("/api/ai-sdk/chat", json=start).text)
    asked = next(c for c in chunks if c["type"] == "tool-approval-request")
    approval = asked["approvalId"]

    def answering(*ids: str) -> dict:
        parts = [
            {
                "type": "tool-write_file",
                "state": "approval-responded",
                "toolCallId": asked["toolCallId"],
                "approval": {"id": gate, "approved": True},
            }
            for gate in ids
        ]
        return {
            "id": "edge8",
            "messages": [start["messages"][0], {"id": "a1", "role": "assistant", "parts": parts}],
        }

    too_many = client.post(
        "/api/ai-sdk/chat", json=answering(approval, *(f"ap_other{n}" for n in range(64)))
    )
    assert too_many.status_code == 400 and too_many.json()["code"] == "too_many_answers"
    unknown = client.post("/api/ai-sdk/chat", json=answering(approval, "ap_other1"))
    assert unknown.status_code == 404
    assert ApprovalRequest.objects.get(id=approval).status == "pending"
    once = client.post("/api/ai-sdk/chat", json=answering(*[approval] * 2000))
    assert once.status_code == 200
    assert ApprovalRequest.objects.get(id=approval).status == "approved"
    assert [c["type"] for c in data_lines(once.text)].count("tool-output-available") == 1


def test_a_cookie_without_its_csrf_header_is_refused(server, cookie):
    """A cookie's write without the CSRF header is 403 csrf_failed, even with
    a form body (read before the check: never a 500)."""
    name, value = cookie.split("=", 1)
    with httpx.Client(base_url=server.http, cookies={name: value}, timeout=30) as c:
        as_json = c.post("/api/ai-sdk/chat", json={"id": "edge5", "messages": []})
        assert as_json.status_code == 403 and as_json.json()["code"] == "csrf_failed"
        as_form = c.post("/api/ag-ui/", files={"f": ("a.txt", b"x")})
        assert as_form.status_code in (400, 403)
