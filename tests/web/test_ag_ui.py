"""AG-UI (sessions_app/web/ag_ui.py), driven by @ag-ui/client's own HttpAgent
in node (tests/clients/ag_ui_agent.mjs, unchanged) against a real daphne,
every response it received checked by ``ag-ui-validate``, AG-UI's public
conformance validator: a turn, an approval, a denial, a cut resumed with
Last-Event-ID, and a late joiner's snapshot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sessions_app.models import AgentSession, ApprovalRequest, Run
from tests.harness import api_key
from tests.node_clients import clients_installed, run_node
from tests.support.log import logged
from tests.support.rig import Hold
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

VALIDATOR = Path(sys.executable).with_name("ag-ui-validate")


def agent(server, key: str, thread: str, scenario: str, text: str = "") -> dict:
    """Run one scenario of the node client; its JSON report."""
    clients_installed("@ag-ui")
    return run_node("ag_ui_agent.mjs", server.http, key, thread, scenario, text)


def validate(body: str, tmp_path, name: str) -> dict:
    """ag-ui-validate's JSON report on one recorded response."""
    path = tmp_path / f"{name}.sse"
    path.write_text(body)
    done = subprocess.run(
        [str(VALIDATOR), str(path), "--json"], capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def clean(report: dict, tmp_path, name: str) -> None:
    """The responses the agent received, in order (one thread's recording: a
    resumed run's TOOL_CALL_RESULT answers the call of the run before it),
    pass the validator: no error, no warning, no info."""
    body = "".join(response["body"] for response in report["recorded"])
    found = validate(body, tmp_path, name)
    assert found["summary"] == {"errors": 0, "warnings": 0, "info": 0}, found["diagnostics"]


def assistant_text(messages: list[dict]) -> str:
    return "".join(m.get("content") or "" for m in messages if m["role"] == "assistant")


def test_a_turn_is_one_valid_ag_ui_run(server, user, tmp_path):
    """RUN_STARTED, the answer as one text message, RUN_FINISHED success; the
    validator finds nothing; the text is the logged assistant.message."""
    report = agent(server, api_key(user), "thread1", "turn", "/echo Hello AG-UI world")
    (run,) = report["runs"]
    assert run.get("thrown") is None and run["outcome"] == "success"
    assert assistant_text(report["messages"]) == "Hello AG-UI world"
    assert logged("thread1", "assistant.message", external=True)[-1]["text"] == "Hello AG-UI world"
    clean(report, tmp_path, "turn")


def test_a_gate_is_an_interrupt_and_its_resume_runs_the_tool_once(server, user, tmp_path):
    """The gate ends the AG-UI run with an interrupt outcome (the approval's id,
    its tool call); the next run's resume entry decides it once and the tool's
    result and the rest of the answer follow."""
    report = agent(server, api_key(user), "thread2", "approve", "/write notes.txt hi")
    first, second = report["runs"]
    gate = ApprovalRequest.objects.get()
    assert first["outcome"] == "interrupt" and report["interrupt"]["id"] == gate.id
    assert report["interrupt"]["toolCallId"] == gate.tool_call_id
    assert report["interrupt"]["reason"] == "tool_approval"
    assert second.get("thrown") is None and second["outcome"] == "success"
    assert gate.status == "approved" or ApprovalRequest.objects.get().status == "approved"
    results = logged("thread2", "tool.result", external=True)
    assert len(results) == 1 and results[0]["ok"] is True
    tools = [m for m in report["messages"] if m["role"] == "tool"]
    assert [t["toolCallId"] for t in tools] == [gate.tool_call_id]
    calls = [c for m in report["messages"] for c in (m.get("toolCalls") or [])]
    assert [(c["id"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (gate.tool_call_id, {"path": "notes.txt", "text": "hi"})
    ]
    assert Run.objects.get().stop_reason == "end_turn"
    clean(report, tmp_path, "approve")


def test_a_denied_interrupt_runs_nothing(server, user, tmp_path):
    """A resume entry with approved false denies the gate: the tool result says so."""
    report = agent(server, api_key(user), "thread3", "deny", "/write notes.txt hi")
    assert [r["outcome"] for r in report["runs"]] == ["interrupt", "success"]
    assert ApprovalRequest.objects.get().status == "denied"
    assert logged("thread3", "tool.result", external=True)[0]["output"] == "denied"
    clean(report, tmp_path, "deny")


def test_a_step_is_one_interrupt_a_gate_and_one_resume_answers_them_all(server, user, tmp_path):
    """/parallel 3: the AG-UI run ends with three interrupts (one per gate,
    in the order asked); one resume with three entries decides each once
    (approved, denied, approved) and the run goes on: two writes, one denial."""
    report = agent(server, api_key(user), "thread9", "several", "/parallel 3 out.txt")
    first, second = report["runs"]
    gates = sorted(ApprovalRequest.objects.all(), key=lambda g: g.args["text"])
    assert first["outcome"] == "interrupt"
    assert [i["id"] for i in report["interrupts"]] == [g.id for g in gates]
    assert second.get("thrown") is None and second["outcome"] == "success"
    decided = {g.id: (g.status, g.reason) for g in ApprovalRequest.objects.all()}
    assert [decided[g.id] for g in gates] == [
        ("approved", ""),
        ("denied", "not number 2"),
        ("approved", ""),
    ]
    assert {g.decided_via for g in ApprovalRequest.objects.all()} == {"ag_ui"}
    results = logged("thread9", "tool.result", external=True)
    assert [(r["ok"], r["output"][:8]) for r in results] == [
        (True, "appended"),
        (False, "denied: "),
        (True, "appended"),
    ]
    assert results[1]["output"] == "denied: not number 2"
    clean(report, tmp_path, "several")


def test_a_step_answered_in_part_ends_with_the_interrupts_left(server, user, tmp_path):
    """A resume that answers one of a step's three interrupts (HttpAgent
    refuses to send one; another client may): the response ends with the two
    gates left as interrupts again, nothing run yet, and a resume answering
    those runs all three, each once."""
    report = agent(server, api_key(user), "thread10", "turn", "/parallel 3 out.txt")
    ids = [i["id"] for i in report["runs"][0]["interrupts"]]
    assert len(ids) == 3

    def resume(run_id: str, answered: list[str]) -> list[dict]:
        body = {
            "threadId": "thread10",
            "runId": run_id,
            "messages": [],
            "resume": [
                {"interruptId": i, "status": "resolved", "payload": {"approved": True}}
                for i in answered
            ],
        }
        auth = {"Authorization": f"Token {api_key(user)}"}
        with httpx.Client(base_url=server.http, timeout=30) as c:
            sent = c.post("/api/ag-ui/", json=body, headers=auth)
        assert sent.status_code == 200, sent.text
        data = [ln[6:] for ln in sent.text.splitlines() if ln.startswith("data: ")]
        return [json.loads(d) for d in data]

    [finished] = [e for e in resume("r2", ids[:1]) if e["type"] == "RUN_FINISHED"]
    assert finished["outcome"]["type"] == "interrupt"
    assert [i["id"] for i in finished["outcome"]["interrupts"]] == ids[1:]
    assert logged("thread10", "tool.result", external=True) == []
    [finished] = [e for e in resume("r3", ids[1:]) if e["type"] == "RUN_FINISHED"]
    assert finished["outcome"]["type"] == "success"
    results = logged("thread10", "tool.result", external=True)
    assert [r["ok"] for r in results] == [True, True, True]


def test_a_cut_stream_resumes_with_last_event_id_exactly(server, user, tmp_path):
    """An aborted run sent again with Last-Event-ID gets exactly what followed:
    the agent's message is the whole answer, each token once, and both
    responses pass the validator."""
    report = agent(server, api_key(user), "thread4", "cut", "/stream 40 30")
    assert report["cutAt"], "no id before the cut"
    assert report["runs"][-1].get("thrown") is None
    assert report["runs"][-1]["outcome"] == "success"
    whole = "".join(f"tok{i} " for i in range(40))
    assert assistant_text(report["messages"]) == whole
    assert logged("thread4", "user.message", external=True)[0]["text"] == "/stream 40 30"
    assert len(logged("thread4", "user.message", external=True)) == 1
    clean({"recorded": report["recorded"][1:]}, tmp_path, "cut")


def test_a_late_joiner_gets_a_snapshot_then_the_run_going(server, user, tmp_path):
    """GET …/stream: RUN_STARTED, MESSAGES_SNAPSHOT of the finished turns (and
    the question of the run going), then that run from the log to its end."""
    key = api_key(user)
    agent(server, key, "thread5", "turn", "/echo first answer")
    hold = Hold(pace=100)
    with httpx.Client(base_url=server.http, timeout=30) as c:
        auth = {"Authorization": f"Token {key}"}
        run_input = {
            "threadId": "thread5",
            "runId": "r9",
            "messages": [{"id": "q2", "role": "user", "content": hold.text}],
        }
        with c.stream("POST", "/api/ag-ui/", json=run_input, headers=auth) as started:
            assert started.status_code == 200
            wait_for(lambda: logged("thread5", "assistant.delta", external=True))  # going
            with c.stream("GET", "/api/ag-ui/thread5/stream", headers=auth) as joined:
                lines = joined.iter_lines()
                text = through_snapshot(lines)
                hold.release()  # the run goes on, and ends, after the join
                text += "\n".join(lines)
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"] and kinds[-1] == "RUN_FINISHED"
    snapshot = [(m["role"], m.get("content")) for m in events[1]["messages"]]
    assert snapshot == [
        ("user", "/echo first answer"),
        ("assistant", "first answer"),
        ("user", hold.text),
    ]
    said = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    [message] = logged("thread5", "assistant.message", external=True)[1:]
    assert said == message["text"] and Hold.answer(said)
    found = validate(text + "\n", tmp_path, "join")
    assert found["summary"] == {"errors": 0, "warnings": 0, "info": 0}, found["diagnostics"]


def shown(events: list[dict]) -> list[dict]:
    """The messages an AG-UI client holds after ``events``: a
    MESSAGES_SNAPSHOT replaces them all (a take-back among them), a text
    message's START opens it (or continues one it holds), CONTENT adds."""
    messages: dict[str, dict] = {}
    for e in events:
        if e["type"] == "MESSAGES_SNAPSHOT":
            messages = {m["id"]: dict(m) for m in e["messages"]}
        elif e["type"] == "TEXT_MESSAGE_START":
            messages.setdefault(e["messageId"], {"role": "assistant", "content": ""})
        elif e["type"] == "TEXT_MESSAGE_CONTENT":
            held = messages[e["messageId"]]
            held["content"] = (held.get("content") or "") + e["delta"]
    return list(messages.values())


def through_snapshot(lines) -> str:
    """The stream's lines up to and with its MESSAGES_SNAPSHOT (the join's
    picture of the thread is taken), each followed by its newline."""
    text = ""
    for line in lines:
        text += line + "\n"
        if line.startswith("data: ") and json.loads(line[6:])["type"] == "MESSAGES_SNAPSHOT":
            return text
    raise AssertionError(f"no MESSAGES_SNAPSHOT in {text!r}")


def test_bad_input_is_refused_and_thread_ids_are_per_user(server, user, other_user):
    """A body that is not a RunAgentInput is 400 bad_frame, a Last-Event-ID not
    of ours 400; another user's thread id (or their session's own id) is not
    theirs to this caller: a join is 404 like an unknown id, and a run makes a
    thread of the caller's own, theirs untouched."""
    key = api_key(user)
    agent(server, api_key(other_user), "theirs", "turn", "/echo theirs")
    theirs = AgentSession.objects.get(external_id="theirs")
    with httpx.Client(base_url=server.http, timeout=30) as c:
        auth = {"Authorization": f"Token {key}"}
        bad = c.post("/api/ag-ui/", json={"threadId": "x"}, headers=auth)
        assert bad.status_code == 400 and bad.json()["code"] == "bad_frame"
        for name in ("theirs", theirs.id, "nosuch"):
            assert c.get(f"/api/ag-ui/{name}/stream", headers=auth).status_code == 404
        body = {
            "threadId": theirs.id,
            "runId": "r",
            "messages": [{"id": "m", "role": "user", "content": "/echo mine"}],
        }
        odd = c.post("/api/ag-ui/", json=body, headers={**auth, "Last-Event-ID": "7"})
        assert odd.status_code == 400
        ran = c.post("/api/ag-ui/", json=body, headers=auth)
        assert ran.status_code == 200 and '"threadId":"' + theirs.id + '"' in ran.text
    assert AgentSession.objects.get(owner=user).external_id == theirs.id
    assert logged("theirs", "user.message", external=True) == [
        {
            "client_message_id": logged("theirs", "user.message", external=True)[0][
                "client_message_id"
            ],
            "text": "/echo theirs",
        }
    ]


def taken_over(user, thread: str, first: list[str], keep: int, redo: list[str], whole: str):
    """A run whose deltas said ``first``, then was taken over (``keep``
    characters kept) and said ``redo``, then its message ``whole``, parked at
    a gate (so that a join streams it, and ends): written to the log as a
    worker would have."""
    from sessions_app.log.events import NewEvent, append_events
    from sessions_app.log.sessions import create_session
    from sessions_app.models import ApprovalRequest, Run
    from sessions_app.wire import protocol as p

    session = create_session(user, "", external_id=thread)
    run = Run.objects.create(
        session=session,
        client_message_id="u1",
        text="say hello",
        message_seq=session.head + 1,
        status=Run.Status.AWAITING_APPROVAL,
    )
    gate = ApprovalRequest.objects.create(
        session=session, run=run, tool_call_id=f"call_{thread}", tool="write_file", args={}
    )
    call = {"tool_call_id": gate.tool_call_id, "tool": gate.tool, "args": gate.args}
    said = [
        (p.K_USER_MESSAGE, {"client_message_id": "u1", "text": run.text}),
        (p.K_RUN_STARTED, {"client_message_id": "u1"}),
        *((p.K_ASSISTANT_DELTA, {"text": t}) for t in first),
        (p.K_RUN_RESUMED, {"reason": p.RESUMED_TAKEOVER, "keep": keep}),
        *((p.K_ASSISTANT_DELTA, {"text": t}) for t in redo),
        (p.K_ASSISTANT_MESSAGE, {"text": whole}),
        (p.K_TOOL_CALL, call),
        (p.K_APPROVAL_REQUESTED, {"approval_id": gate.id, **call}),
        (p.K_RUN_PAUSED, {"stop_reason": p.STOP_REQUIRES_APPROVAL, "approval_id": gate.id}),
    ]
    append_events(session.id, [NewEvent(kind, data, run.id) for kind, data in said])
    return run.id


@pytest.mark.parametrize(
    ("first", "redo", "whole", "cut"),
    [
        # the redo's deltas say something else
        (
            ["Hello ", "wor", "ld, ", "how"],
            ["wo", "nderful", " day"],
            "Hello wonderful day",
            "Hello wo",
        ),
        # the redo says it only in its message, with no delta
        (["Hello ", "world, friend"], [], "Hello there", "Hello "),
        # the redo says the start again, then stops short
        (["Hello ", "world, friend"], ["world"], "Hello world", "Hello world"),
    ],
    ids=["in-deltas", "in-the-message", "stops-short"],
)
def test_a_redo_that_says_something_else_is_taken_back_in_the_client(
    server, user, tmp_path, first, redo, whole, cut
):
    """A takeover whose redo says something else than the first attempt (a
    model asked again): HttpAgent, joining late, ends with the text the log
    says, not the first attempt's tail. The stream takes it back with a
    snapshot (the open message in it cut back to what the log still says),
    goes on with the redo, and passes the validator."""
    thread = f"redo-{len(redo)}-{len(whole)}"
    run_id = taken_over(user, thread, first, 6, redo, whole)
    report = agent(server, api_key(user), thread, "join")
    assert report["runs"][0].get("thrown") is None, report["runs"]
    assert report["runs"][0]["outcome"] == "interrupt"
    assert assistant_text(report["messages"]) == whole
    body = report["recorded"][0]["body"]
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    at = kinds.index("MESSAGES_SNAPSHOT", 2)  # the second: the first opens the join
    assert [m["content"] for m in events[at]["messages"] if m["id"] == f"{run_id}:t0"] == [cut]
    assert [m["role"] for m in events[at]["messages"]] == ["user", "assistant"]
    clean(report, tmp_path, thread)


def test_a_resume_with_one_bad_edit_decides_none_of_its_answers(server, user):
    """Two interrupts answered, one an edit its tool refuses: 400, and the
    other, a plain approval, is not decided either (all checked first)."""
    report = agent(server, api_key(user), "thread11", "turn", "/parallel 2 out.txt")
    first, second = (i["id"] for i in report["runs"][0]["interrupts"])
    body = {
        "threadId": "thread11",
        "runId": "r2",
        "messages": [],
        "resume": [
            {"interruptId": first, "status": "resolved", "payload": {"approved": True}},
            {
                "interruptId": second,
                "status": "resolved",
                "payload": {"approved": True, "args": {"path": "x"}},
            },
        ],
    }
    with httpx.Client(base_url=server.http, timeout=30) as c:
        sent = c.post("/api/ag-ui/", json=body, headers={"Authorization": f"Token {api_key(user)}"})
    assert sent.status_code == 400 and "not write_file's" in sent.json()["message"]
    assert set(ApprovalRequest.objects.values_list("status", flat=True)) == {"pending"}


def test_a_form_is_an_interrupt_and_its_resume_answers_it(server, user, tmp_path):
    """/ask: the response ends with the question as an interrupt; a resume
    whose payload carries a bad ``answer`` is refused (400, the gate still
    pending), and one with a good answer goes on to the agent's thanks,
    the answer its call's result."""
    report = agent(server, api_key(user), "thread11", "turn", "/ask")
    [asked] = report["runs"][0]["interrupts"]
    auth = {"Authorization": f"Token {api_key(user)}"}

    def resume(run_id: str, answer: dict) -> httpx.Response:
        payload = {"approved": True, "answer": answer}
        entry = {"interruptId": asked["id"], "status": "resolved", "payload": payload}
        body = {"threadId": "thread11", "runId": run_id, "messages": [], "resume": [entry]}
        with httpx.Client(base_url=server.http, timeout=30) as c:
            return c.post("/api/ag-ui/", json=body, headers=auth)

    refused = resume("r2", {"name": "Ada", "email": "ada", "plan": "free"})
    assert refused.status_code == 400
    assert "email: must be an email address" in refused.json()["message"]
    good = {"name": "Ada", "email": "ada@example.org", "plan": "free"}
    sent = resume("r3", good)
    assert sent.status_code == 200, sent.text
    events = [json.loads(ln[6:]) for ln in sent.text.splitlines() if ln.startswith("data: ")]
    [finished] = [e for e in events if e["type"] == "RUN_FINISHED"]
    assert finished["outcome"]["type"] == "success"
    results = logged("thread11", "tool.result", external=True)
    assert [r["output"] for r in results] == [
        "accepted",
        "answered: " + json.dumps(good, sort_keys=True),
    ]
