"""Both dialects survive what the native stream does (docs/integrations.md):
kill -9 of every server process mid-answer (the run is taken over, the
answer rebuilt from the log), a cancelled run, and two tabs, one on each
protocol, answering the same gate at the same instant (exactly one decision
stands, the tool runs at most once)."""

from __future__ import annotations

import json
import subprocess
import threading

import httpx
import pytest
from django.conf import settings

from sessions_app.models import ApprovalRequest, Event, Run
from tests.harness import api_key
from tests.node_clients import CLIENTS, clients_installed
from tests.support.log import logged
from tests.support.rig import Hold
from tests.support.waiting import wait_for
from tests.web.test_ag_ui import assistant_text, shown, through_snapshot, validate
from tests.web.test_ai_sdk import chat, texts

pytestmark = pytest.mark.django_db(transaction=True)


def taken_over(session_id: str) -> list[str]:
    """The reasons of the session's ``run.resumed`` events, in order."""
    return [e["reason"] for e in logged(session_id, "run.resumed", external=True)]


def deltas(session_id: str) -> int:
    return Event.objects.filter(session__external_id=session_id, kind="assistant.delta").count()


def kill_all_and_start_again(start, procs):
    for proc in procs:
        proc.kill()
    procs.clear()
    return start(**ENV)


# Embedded, the restart takes the run over at once, whatever its lease: a long
# one keeps a slow machine's late renewal from a second takeover.
ENV = {} if settings.AGENT_RUNNER == "worker" else {"AGENT_LEASE_SECONDS": "15"}


def test_ai_sdk_resumes_the_answer_after_every_server_process_is_killed(own_server, user):
    """useChat's client is mid-answer when every server process dies (kill -9);
    the run is taken over, and a fresh page's resumeStream() shows the whole
    answer once (the log, not a process's memory, is what is replayed)."""
    clients_installed("ai")
    start, procs = own_server
    server = start(**ENV)
    key = api_key(user)
    hold = Hold(pace=50)
    chat_turn = [str(CLIENTS / "ai_sdk_chat.mjs"), server.http, key, "crashChat", "turn"]
    node = subprocess.Popen(
        ["node", *chat_turn, hold.text],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: deltas("crashChat") >= 10)
        server = kill_all_and_start_again(start, procs)
        wait_for(lambda: taken_over("crashChat"))
    finally:
        hold.release()
        node.wait(timeout=60)
    run = Run.objects.get(session__external_id="crashChat")
    resumed = chat(server, key, "crashChat", "resume")
    assert resumed["errors"] == [] and resumed["status"] == "ready"
    user_msg, answer = resumed["messages"]
    [message] = logged("crashChat", "assistant.message", external=True)
    assert answer["id"] == run.id and texts(answer) == message["text"]
    Hold.answer(message["text"])
    run.refresh_from_db()
    assert run.stop_reason == "end_turn"
    assert taken_over("crashChat") == ["takeover"]


def test_ag_ui_join_after_every_server_process_is_killed(own_server, user, tmp_path):
    """An AG-UI run cut by kill -9 of every server process: a client that
    joins afterwards gets RUN_STARTED, the snapshot, and the run taken over,
    whole and once; the validator finds nothing."""
    start, procs = own_server
    server = start(**ENV)
    key = api_key(user)
    auth = {"Authorization": f"Token {key}"}
    hold = Hold(pace=50)
    body = {
        "threadId": "crashThread",
        "runId": "r1",
        "messages": [{"id": "q", "role": "user", "content": hold.text}],
    }
    with (
        httpx.Client(base_url=server.http, timeout=30) as c,
        c.stream("POST", "/api/ag-ui/", json=body, headers=auth) as started,
    ):
        assert started.status_code == 200
        wait_for(lambda: deltas("crashThread") >= 10)
        server = kill_all_and_start_again(start, procs)
    wait_for(lambda: taken_over("crashThread"))
    with (
        httpx.Client(base_url=server.http, timeout=60) as c,
        c.stream("GET", "/api/ag-ui/crashThread/stream", headers=auth) as joined,
    ):
        lines = joined.iter_lines()
        text = through_snapshot(lines)
        hold.release()  # the taken-over run ends after the join
        text += "\n".join(lines) + "\n"
    events = [json.loads(x[6:]) for x in text.splitlines() if x.startswith("data: ")]
    [message] = logged("crashThread", "assistant.message", external=True)
    assert assistant_text(shown(events)) == message["text"] and Hold.answer(message["text"])
    assert [e["type"] for e in events][-1] == "RUN_FINISHED"
    found = validate(text, tmp_path, "crash")
    assert found["summary"] == {"errors": 0, "warnings": 0, "info": 0}, found["diagnostics"]


def test_a_cancelled_run_ends_both_dialects_as_cancelled(server, user, tmp_path):
    """Stopped from REST while streaming: the AG-UI run ends RUN_FINISHED with
    the cancelled outcome (the validator agrees), the UI message stream ends
    with finish."""
    key = api_key(user)
    auth = {"Authorization": f"Token {key}"}
    body = {
        "threadId": "stopThread",
        "runId": "r1",
        "messages": [{"id": "q", "role": "user", "content": Hold(pace=50).text}],  # to the cancel
    }
    with httpx.Client(base_url=server.http, timeout=30) as c:
        with c.stream("POST", "/api/ag-ui/", json=body, headers=auth) as started:
            wait_for(lambda: deltas("stopThread") >= 3)
            run = Run.objects.get(session__external_id="stopThread")
            assert c.post(f"/api/runs/{run.id}/cancel/", headers=auth).status_code == 200
            text = "".join(started.iter_text())
        events = [json.loads(x[6:]) for x in text.splitlines() if x.startswith("data: ")]
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1]["outcome"] == {"type": "cancelled"}
        found = validate(text, tmp_path, "cancelled")
        assert found["summary"] == {"errors": 0, "warnings": 0, "info": 0}, found["diagnostics"]
        resumed = c.get("/api/ai-sdk/chat/stopThread/stream", headers=auth)
        assert resumed.status_code == 204  # nothing runs any more


def test_two_tabs_on_two_protocols_decide_one_gate_once(server, user):
    """An AI SDK tab approves and an AG-UI tab denies the same gate at the same
    instant, 10 times: one decision stands each time, the tool runs at most
    once, and both responses go on from the decision that stood."""
    key = api_key(user)
    auth = {"Authorization": f"Token {key}"}
    with httpx.Client(base_url=server.http, timeout=60) as c:
        for round_ in range(10):
            chat_id = f"race{round_}"
            ask = {
                "id": chat_id,
                "messages": [
                    {
                        "id": "u1",
                        "role": "user",
                        "parts": [{"type": "text", "text": f"/write r.txt {round_}"}],
                    }
                ],
                "trigger": "submit-message",
            }
            first = c.post("/api/ai-sdk/chat", json=ask, headers=auth)
            assert first.status_code == 200
            chunks = [json.loads(x[6:]) for x in first.text.splitlines() if x.startswith("data: {")]
            gate = next(x for x in chunks if x["type"] == "tool-approval-request")
            answer_ai = {
                "id": chat_id,
                "messages": [
                    ask["messages"][0],
                    {
                        "id": "a1",
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool-write_file",
                                "toolCallId": gate["toolCallId"],
                                "state": "approval-responded",
                                "approval": {"id": gate["approvalId"], "approved": True},
                            }
                        ],
                    },
                ],
            }
            answer_ag = {
                "threadId": chat_id,
                "runId": "r2",
                "messages": [],
                "resume": [
                    {
                        "interruptId": gate["approvalId"],
                        "status": "resolved",
                        "payload": {"approved": False},
                    }
                ],
            }
            replies: dict[str, str] = {}
            go = threading.Barrier(2)

            def post(name, path, body, go=go, replies=replies):
                go.wait()
                with httpx.Client(base_url=server.http, timeout=60) as mine:
                    replies[name] = mine.post(path, json=body, headers=auth).text

            threads = [
                threading.Thread(target=post, args=("ai", "/api/ai-sdk/chat", answer_ai)),
                threading.Thread(target=post, args=("ag", "/api/ag-ui/", answer_ag)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            approval = ApprovalRequest.objects.get(session__external_id=chat_id)
            decided = list(
                Event.objects.filter(
                    session__external_id=chat_id, kind="approval.decided"
                ).values_list("data__decision", flat=True)
            )
            assert decided == ["approve" if approval.status == "approved" else "deny"]
            results = Event.objects.filter(session__external_id=chat_id, kind="tool.result")
            assert results.count() == 1
            ok = results.get().data["ok"]
            assert ok is (approval.status == "approved")
            ai = [json.loads(x[6:]) for x in replies["ai"].splitlines() if x.startswith("data: {")]
            said = [x for x in ai if x["type"] == "tool-approval-response"]
            assert [x["approved"] for x in said] == [approval.status == "approved"]
            ag = [json.loads(x[6:]) for x in replies["ag"].splitlines() if x.startswith("data: ")]
            result = [x for x in ag if x["type"] == "TOOL_CALL_RESULT"]
            assert [x["content"] == "denied" for x in result] == [approval.status == "denied"]
