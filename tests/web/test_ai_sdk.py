"""The AI SDK's UI message stream (sessions_app/web/ai_sdk.py), driven by the
``ai`` package's own chat client in node (tests/clients/ai_sdk_chat.mjs:
AbstractChat and DefaultChatTransport, unchanged) against a real daphne:
a turn, an approval, a denial, a cut and the resume of a fresh page."""

from __future__ import annotations

import httpx
import pytest

from sessions_app.models import AgentSession, ApprovalRequest, Event, Run
from tests.harness import api_key
from tests.node_clients import clients_installed, run_node
from tests.support.log import logged
from tests.support.rig import Hold

pytestmark = pytest.mark.django_db(transaction=True)


def chat(server, key: str, chat_id: str, scenario: str, text: str = "") -> dict:
    """Run one scenario of the node client; its JSON report."""
    clients_installed("ai")
    return run_node("ai_sdk_chat.mjs", server.http, key, chat_id, scenario, text)


def texts(message: dict) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def tool_parts(message: dict) -> list[dict]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


def test_a_turn_streams_the_answer_into_one_assistant_message(server, user):
    """A user message sent by useChat's transport becomes the session's
    user.message (its id the client_message_id) and the answer arrives as
    one assistant message whose id is the run and whose text is the
    logged assistant.message."""
    key = api_key(user)
    report = chat(server, key, "chatTurn1", "turn", "/echo Hello, world of streams")
    assert report["errors"] == [] and report["status"] == "ready"
    user_msg, answer = report["messages"]
    assert user_msg["role"] == "user" and answer["role"] == "assistant"
    run = Run.objects.get(session__external_id="chatTurn1")
    assert run.client_message_id == user_msg["id"] and answer["id"] == run.id
    assert texts(answer) == "Hello, world of streams"
    assert [m["text"] for m in logged("chatTurn1", "assistant.message", external=True)] == [
        texts(answer)
    ]
    first, last = answer["metadata"]["first_seq"], answer["metadata"]["last_seq"]
    assert last == Event.objects.filter(session__external_id="chatTurn1").order_by("-seq")[0].seq
    assert first < last and answer["metadata"]["run_id"] == run.id


def test_an_approval_runs_the_tool_once_and_the_message_goes_on(server, user):
    """The gate arrives as tool-approval-request; addToolApprovalResponse and
    the automatic next request decide it once on the server, and the same
    assistant message shows the tool's output and the rest of the answer."""
    key = api_key(user)
    report = chat(server, key, "chatGate1", "approve", "/write notes.txt hello")
    assert report["errors"] == [] and report["status"] == "ready"
    assert report["steps"][0]["approval"] == ApprovalRequest.objects.get().id
    user_msg, answer = report["messages"]
    (tool,) = tool_parts(answer)
    assert tool["type"] == "tool-write_file" and tool["state"] == "output-available"
    assert tool["input"] == {"path": "notes.txt", "text": "hello"}
    assert tool["approval"]["approved"] is True
    gate = ApprovalRequest.objects.get()
    assert gate.status == "approved" and gate.executed_at is not None
    assert len(logged("chatGate1", "tool.result", external=True)) == 1
    assert len(logged("chatGate1", "approval.decided", external=True)) == 1
    assert Run.objects.get().stop_reason == "end_turn"
    assert texts(answer).endswith(
        logged("chatGate1", "assistant.message", external=True)[-1]["text"]
    )


def test_a_denial_is_told_as_output_denied(server, user):
    """A denied gate: the tool never runs and its part ends output-denied."""
    key = api_key(user)
    report = chat(server, key, "chatDeny1", "deny", "/write notes.txt hello")
    assert report["errors"] == []
    (tool,) = tool_parts(report["messages"][-1])
    assert tool["state"] == "output-denied"
    assert ApprovalRequest.objects.get().status == "denied"
    assert logged("chatDeny1", "tool.result", external=True) == [
        {"tool_call_id": tool["toolCallId"], "ok": False, "output": "denied"}
    ]


def test_three_approvals_of_one_step_go_in_one_request_with_a_reason(server, user):
    """/parallel 3: the chat shows three approval requests at once; answered
    (the second denied with a reason), it sends once and the message goes
    on: two writes, the denial's reason told as its output."""
    report = chat(server, api_key(user), "chatStep", "several", "/parallel 3 out.txt")
    assert report["errors"] == [] and report["status"] == "ready"
    gates = sorted(ApprovalRequest.objects.all(), key=lambda g: g.args["text"])
    assert report["steps"][0]["approvals"] == [g.id for g in gates]
    assert [(g.status, g.reason, g.decided_via) for g in gates] == [
        ("approved", "", "ai_sdk"),
        ("denied", "not this one", "ai_sdk"),
        ("approved", "", "ai_sdk"),
    ]
    results = logged("chatStep", "tool.result", external=True)
    assert [(r["ok"], r["output"][:8]) for r in results] == [
        (True, "appended"),
        (False, "denied: "),
        (True, "appended"),
    ]
    assert results[1]["output"] == "denied: not this one"
    # The live stream says the denial as one (it began after the gate).
    parts = [part for m in report["messages"] for part in m["parts"] if part.get("toolCallId")]
    states = {part["toolCallId"]: part["state"] for part in parts}
    assert [states[g.tool_call_id] for g in gates] == [
        "output-available",
        "output-denied",
        "output-available",
    ]


def test_a_fresh_page_resumes_the_run_from_the_log_exactly_once(server, user):
    """A page closed mid-answer (its fetch aborted) leaves the run going; a
    fresh page loads …/messages (the finished turns) and resumeStream()
    replays the running run's message from the log: the whole answer, once."""
    key = api_key(user)
    first = chat(server, key, "chatCut1", "turn", "/echo One finished turn first")
    assert first["status"] == "ready"
    # Held until the fresh page's resumed stream shows text (its client
    # releases it), however long the second Node client takes to start.
    hold = Hold(pace=120)
    cut = chat(server, key, "chatCut1", "cut", hold.text)
    assert cut["steps"][0]["cut_after"], "the cut came before any text"
    run = Run.objects.order_by("-created_at")[0]
    assert run.status in ("running", "queued")
    resumed = chat(server, key, "chatCut1", "resume", str(hold.path))
    assert resumed["steps"][0]["loaded"] == 3  # the first turn, and the cut turn's question
    assert resumed["errors"] == [] and resumed["status"] == "ready"
    messages = resumed["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert texts(messages[1]) == "One finished turn first"
    assert messages[3]["id"] == run.id
    whole = logged("chatCut1", "assistant.message", external=True)[-1]["text"]
    assert texts(messages[3]) == whole and Hold.answer(whole)


def test_chat_ids_are_per_user_and_nothing_running_is_204(server, user, other_user):
    """The reconnect answers 204 when nothing runs. A chat id is the caller's
    own name for a conversation: another user's chat id, or their session's
    own id, names a new conversation of the caller's, never theirs (nothing
    of theirs is read, written or told apart from an unknown id)."""
    key = api_key(user)
    with httpx.Client(base_url=server.http, timeout=30) as c:
        auth = {"Authorization": f"Token {key}"}
        assert c.get("/api/ai-sdk/chat/nochat/stream", headers=auth).status_code == 204
        chat(server, api_key(other_user), "theirChat", "turn", "/echo theirs")
        theirs = AgentSession.objects.get(external_id="theirChat")
        for name in ("theirChat", theirs.id):
            assert c.get(f"/api/ai-sdk/chat/{name}/messages", headers=auth).json() == []
            assert c.get(f"/api/ai-sdk/chat/{name}/stream", headers=auth).status_code == 204
        mine = chat(server, key, theirs.id, "turn", "/echo mine")
        assert texts(mine["messages"][-1]) == "mine"
        made = AgentSession.objects.get(owner=user)
        assert made.external_id == theirs.id and made.id != theirs.id
        assert [m["text"] for m in logged(theirs.id, "assistant.message")] == ["theirs"]
