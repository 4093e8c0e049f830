"""Gates (runtime/gates.py): the declared model (kinds, one table of moves,
one function that moves a gate, who decided through which channel), and a
step of several gates (``/parallel N``): opened together, each decided on
its own from any socket, in any order, or all at once; nothing runs before
the last decision, then the approved calls run in the model's order, each
exactly once, the denied ones answer with their reason."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.conf import settings

from sessions_app.models import ApprovalRequest, Run
from sessions_app.runtime import gates
from sessions_app.runtime.gates import Gate
from sessions_app.runtime.tools import workspace_for
from sessions_app.wire import protocol as p
from tests.harness import WsClient
from tests.support.clients import connect
from tests.support.sessions import open_session, send_text
from tests.support.waiting import wait_until
from tests.web.test_stream import client_for

Status = ApprovalRequest.Status


def test_the_table_lets_a_pending_gate_move_once_and_a_decided_one_never():
    """pending → approved / edited / denied / answered / expired /
    cancelled; every decided status is final."""
    assert gates.MOVES[Status.PENDING] == {
        Status.APPROVED,
        Status.EDITED,
        Status.DENIED,
        Status.ANSWERED,
        Status.EXPIRED,
        Status.CANCELLED,
    }
    for status in set(Status.values) - {Status.PENDING}:
        assert not gates.MOVES[status]
        assert not any(gates.can_move(status, to) for to in Status.values)
    assert set(gates.MOVES) == set(Status.values)
    said = {gates.DECISION_OF[gates.STATUS_OF[w]] for w in gates.STATUS_OF}
    assert said == set(gates.STATUS_OF) - {p.ANSWER}  # a question answered: word_of
    answered = ApprovalRequest(kind="question", status=Status.ANSWERED, answer={"n": 1})
    assert gates.word_of(answered) == p.ANSWER
    assert gates.word_of(ApprovalRequest(status=Status.ANSWERED)) == p.RESPOND


def test_kinds_are_the_protocols():
    """The model's kinds are the wire's approval.requested kinds."""
    assert tuple(ApprovalRequest.Kind.values) == p.GATE_KINDS


@pytest.mark.django_db
def test_move_is_a_compare_and_set_that_records_who_how_and_why(user):
    """The first decision stands, with its decider, channel and (for a denial)
    reason; a second is refused and the row says what stands."""
    row = _gate_row(user)
    again = ApprovalRequest.objects.get(id=row.id)
    assert gates.move(row, gates.Decision(p.DENY, "alice", gates.VIA_TAB, "  not now")) is True
    assert gates.move(again, gates.Decision(p.APPROVE, "bob", gates.VIA_ADMIN)) is False
    assert (again.status, again.decided_by, again.decided_via) == (Status.DENIED, "alice", "tab")
    assert again.reason == "  not now"
    with pytest.raises(ValueError, match="channel"):
        gates.move(_gate_row(user, "call_b"), gates.Decision(p.APPROVE, "alice", "carrier pigeon"))


@pytest.mark.django_db
def test_a_reason_is_kept_for_a_denial_only(user):
    """An approval carries no reason, whatever was passed."""
    row = _gate_row(user)
    assert gates.move(row, gates.Decision(p.APPROVE, "alice", gates.VIA_API, "because"))
    assert ApprovalRequest.objects.get(id=row.id).reason == ""


def test_a_question_is_known_by_its_kind_or_by_its_old_prefix():
    """Rows written before kinds (a rolling deploy) are questions by prefix."""
    assert gates.is_question(ApprovalRequest(tool_call_id="call_x", kind="question"))
    assert gates.is_question(ApprovalRequest(tool_call_id="ask_x", kind="approval"))
    assert not gates.is_question(ApprovalRequest(tool_call_id="call_x", kind="approval"))


def test_the_running_call_of_a_checkpoint_is_its_gate_or_its_steps_first():
    """``current_call``: a gate alone, the first of a step's, or none."""
    assert gates.current_call({"gate": "call_a"}) == "call_a"
    assert gates.current_call({"gates": ["call_b", "call_c"], "gate": "x"}) == "call_b"
    assert gates.current_call({"gates": []}) is None
    assert gates.current_call({}) is None


def _gate_row(user, tool_call_id: str = "call_a") -> ApprovalRequest:
    from sessions_app.log.sessions import create_session

    session = create_session(user, "t")
    run = Run.objects.create(
        session=session, client_message_id=tool_call_id, text="x", message_seq=1
    )
    row = Gate(tool_call_id, "write_file", {"path": "a", "text": "b"}).row(session.id, run.id)
    row.save()
    return row


# --- a step of several gates, over sockets ------------------------------------------


async def _step(c: WsClient, n: int, cmid: str = "m1") -> tuple[str, list[dict], dict]:
    """Ask for ``/parallel n``: the run, its approval.requested events and
    its one run.paused."""
    run_id = (await send_text(c, f"/parallel {n} out.txt", cmid))["run_id"]
    paused = await c.wait_event(lambda f: f["kind"] == "run.paused" and f["run_id"] == run_id)
    asked = [e for e in c.events() if e["kind"] == "approval.requested" and e["run_id"] == run_id]
    return run_id, asked, paused


async def _decide(c: WsClient, approval_id: str, decision: str, **more) -> dict:
    reply = await c.request(
        {"type": "decide", "approval_id": approval_id, "decision": decision, **more}
    )
    assert reply["type"] == "decide_ok", reply
    return reply


def _status(run_id: str) -> str:
    return Run.objects.get(id=run_id).status


def _lines(sid: str) -> list[str]:
    path = workspace_for(sid) / "out.txt"
    return path.read_text().splitlines() if path.exists() else []


async def test_a_step_opens_together_and_runs_after_its_last_decision(server, cookie):
    """/parallel 4 from one tab, decided from two: all four cards at once (one
    step, one pause), decisions interleaved across sockets leave the run
    parked until the last; then the approved writes run in the model's order,
    once each, the denial answers with its reason, and both sockets hold the
    same log, every seq once."""
    a, sid = await open_session(server, cookie)
    b = await connect(server, cookie)
    await b.resume(sid, 0)
    run_id, asked, paused = await _step(a, 4)
    ids = [e["data"]["approval_id"] for e in asked]
    calls = [e["data"]["tool_call_id"] for e in asked]
    assert [e["data"]["args"] for e in asked] == [
        {"path": "out.txt", "text": f"write {i}"} for i in range(1, 5)
    ]
    assert {e["data"]["kind"] for e in asked} == {"approval"}
    assert {e["data"]["step"] for e in asked} == {calls[0]}
    assert paused["data"] == {
        "stop_reason": "requires_approval",
        "approval_id": ids[0],
        "approval_ids": ids,
    }
    kinds = [e["kind"] for e in a.events() if e["run_id"] == run_id]
    assert kinds == ["user.message", "run.started"] + [
        "tool.call",
        "approval.requested",
    ] * 4 + ["run.paused"]
    await _decide(a, ids[0], "approve")
    await _decide(b, ids[3], "deny", reason="not that one")
    await _decide(a, ids[2], "approve")
    # Three of four decided: nothing has run, the run still waits.
    assert await database_sync_to_async(_status)(run_id) == Run.Status.AWAITING_APPROVAL
    assert _lines(sid) == []
    await _decide(b, ids[1], "approve")
    for c in (a, b):
        end = await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
        assert end["data"] == {"stop_reason": "end_turn"}
    results = [e["data"] for e in a.events() if e["kind"] == "tool.result"]
    assert [r["tool_call_id"] for r in results] == calls
    assert [r["ok"] for r in results] == [True, True, True, False]
    assert results[3]["output"] == "denied: not that one"
    assert _lines(sid) == ["write 1", "write 2", "write 3"]
    [message] = [e["data"]["text"] for e in a.events() if e["kind"] == "assistant.message"]
    assert message.splitlines()[3] == "4. The write to out.txt was denied (not that one)."
    assert [line.split(" ", 1)[1][:8] for line in message.splitlines()[:3]] == ["Wrote to"] * 3
    decided = [e["data"] for e in a.events() if e["kind"] == "approval.decided"]
    assert [d["approval_id"] for d in decided] == [ids[0], ids[3], ids[2], ids[1]]
    assert decided[1]["reason"] == "not that one" and "reason" not in decided[0]
    assert a.seqs() == b.seqs() == list(range(1, end["seq"] + 1))
    rows = await database_sync_to_async(_rows)(run_id)
    assert [(r.status, r.decided_via, r.reason, r.step) for r in rows] == [
        ("approved", "tab", "", calls[0]),
        ("approved", "tab", "", calls[0]),
        ("approved", "tab", "", calls[0]),
        ("denied", "tab", "not that one", calls[0]),
    ]
    await a.close()
    await b.close()


def _rows(run_id: str) -> list[ApprovalRequest]:
    order = {"write 1": 0, "write 2": 1, "write 3": 2, "write 4": 3}
    return sorted(
        ApprovalRequest.objects.filter(run_id=run_id), key=lambda r: order[r.args["text"]]
    )


async def test_approve_all_decides_every_gate_still_waiting_in_one_commit(server, cookie):
    """One gate denied alone, then Approve all on another: the rest are
    approved together (their approval.decided consecutive, each naming the
    step), the denied one stands; a second Approve all is already_decided."""
    c, sid = await open_session(server, cookie)
    run_id, asked, _ = await _step(c, 3)
    ids = [e["data"]["approval_id"] for e in asked]
    step = asked[0]["data"]["tool_call_id"]
    await _decide(c, ids[1], "deny")
    await _decide(c, ids[0], "approve", all=True)
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    decided = [e for e in c.events() if e["kind"] == "approval.decided"]
    assert [e["data"]["approval_id"] for e in decided] == [ids[1], ids[0], ids[2]]
    assert "step" not in decided[0]["data"]
    assert [e["data"]["step"] for e in decided[1:]] == [step, step]
    assert decided[2]["seq"] == decided[1]["seq"] + 1
    assert _lines(sid) == ["write 1", "write 3"]
    again = await c.request(
        {"type": "decide", "approval_id": ids[2], "decision": "deny", "all": True}
    )
    assert again["type"] == "error" and again["code"] == p.E_ALREADY_DECIDED
    await c.close()


async def test_deny_all_with_a_reason_runs_nothing_and_tells_the_model_why(server, cookie):
    """Deny all: every gate denied with the reason, no write, each result says it."""
    c, sid = await open_session(server, cookie)
    run_id, asked, _ = await _step(c, 2)
    await _decide(c, asked[1]["data"]["approval_id"], "deny", all=True, reason="wrong file")
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    results = [e["data"] for e in c.events() if e["kind"] == "tool.result"]
    assert [(r["ok"], r["output"]) for r in results] == [(False, "denied: wrong file")] * 2
    assert _lines(sid) == []
    await c.close()


@pytest.mark.parametrize(
    ("more", "says"),
    [
        ({"decision": "approve", "reason": "fine"}, "with a denial only"),
        ({"decision": "deny", "reason": 7}, "'reason' must be a string"),
        ({"decision": "deny", "reason": "x" * (p.MAX_REASON_CHARS + 1)}, "at most"),
        ({"decision": "deny", "all": "yes"}, "'all' must be a boolean"),
    ],
)
async def test_a_bad_decision_is_refused_and_decides_nothing(server, cookie, more, says):
    """A bad reason or all: an error reply, the gate still waits, the socket lives."""
    c, _ = await open_session(server, cookie)
    run_id, asked, _ = await _step(c, 2)
    approval_id = asked[0]["data"]["approval_id"]
    reply = await c.request({"type": "decide", "approval_id": approval_id, **more})
    assert reply["type"] == "error" and reply["code"] == p.E_BAD_FRAME
    assert says in reply["message"]
    assert await database_sync_to_async(_status)(run_id) == Run.Status.AWAITING_APPROVAL
    assert (await c.request({"type": "ping"}))["type"] == "pong"
    await c.close()


async def test_every_worker_killed_between_two_decisions_loses_neither(own_server, cookie):
    """kill -9 of every process that runs runs (embedded: the server) between
    the first and the last decision of a step, then one started: both
    decisions stand, nothing ran before the last, and the approved writes
    run once each."""
    start, procs = own_server
    server = start()
    c, sid = await open_session(server, cookie)
    run_id, asked, _ = await _step(c, 2)
    ids = [e["data"]["approval_id"] for e in asked]
    await _decide(c, ids[0], "approve")
    if settings.AGENT_RUNNER == "worker":
        workers = [proc for proc in procs if proc is not server]
        for proc in workers:
            proc.kill()
        await _decide(c, ids[1], "approve")  # the daphne takes it; no worker runs it yet
        assert await database_sync_to_async(_status)(run_id) == Run.Status.RUNNING
        assert _lines(sid) == []
        workers[0].start()
    else:
        await c.close()
        for proc in procs:
            proc.kill()
        procs.clear()
        server = start()
        c = await connect(server, cookie)
        await c.resume(sid, 0)
        await _decide(c, ids[1], "approve")
    end = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id, timeout=40
    )
    assert end["data"] == {"stop_reason": "end_turn"}
    assert _lines(sid) == ["write 1", "write 2"]
    oks = [e for e in c.events() if e["kind"] == "tool.result" and e["data"]["ok"]]
    assert len(oks) == 2
    await c.close()


async def test_the_api_decides_a_whole_step_and_says_so_in_the_row(server, cookie, user):
    """POST …/decide/ with all and a reason: every gate denied through the API."""
    c, sid = await open_session(server, cookie)
    run_id, asked, _ = await _step(c, 2)

    def post() -> int:
        with client_for(server, user) as http:
            url = f"/api/approvals/{asked[0]['data']['approval_id']}/decide/"
            return http.post(
                url, json={"decision": "deny", "all": True, "reason": "no"}
            ).status_code

    assert await asyncio.to_thread(post) == 200
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    rows = await database_sync_to_async(_rows)(run_id)
    assert [(r.status, r.decided_via, r.reason) for r in rows] == [("denied", "api_key", "no")] * 2
    await c.close()


async def test_edit_and_respond_over_the_socket(server, cookie):
    """An edit the tool refuses is a bad_frame and decides nothing; a good
    one runs the person's arguments, its approval.decided saying which; a
    response answers the second call of a step instead of running it."""
    c, sid = await open_session(server, cookie)
    run_id, asked, _ = await _step(c, 2)
    first, second = (e["data"]["approval_id"] for e in asked)
    bad = await c.request(
        {"type": "decide", "approval_id": first, "decision": "edit", "args": {"path": "x"}}
    )
    assert bad["type"] == "error" and bad["code"] == p.E_BAD_FRAME
    assert "not write_file's" in bad["message"]
    edited = {"path": "out.txt", "text": "edited by a person"}
    await _decide(c, first, "edit", args=edited)
    await _decide(c, second, "respond", response="Skip it: already there.")
    await c.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id)
    decided = [e["data"] for e in c.events() if e["kind"] == "approval.decided"]
    assert [(d["decision"], d.get("args"), d.get("response")) for d in decided] == [
        ("edit", edited, None),
        ("respond", None, "Skip it: already there."),
    ]
    assert _lines(sid) == ["edited by a person"]
    results = [e["data"] for e in c.events() if e["kind"] == "tool.result"]
    assert [(r["ok"], r["output"]) for r in results][1] == (True, "Skip it: already there.")
    await c.close()


async def test_a_deadline_passing_while_every_process_is_down_is_kept(own_server, cookie):
    """A gate with a 2 s deadline; every process killed -9; the deadline
    passes with nobody up; started again, the first sweep decides it expired
    and the run goes on to its end, the model told; the card's deadline was
    on its approval.requested."""
    from datetime import datetime

    start, procs = own_server
    env = {"AGENT_GATE_DEADLINE_SECONDS": "2"}
    server = start(**env)
    c, sid = await open_session(server, cookie)
    run_id = (await send_text(c, "/write d.txt x", "m1"))["run_id"]
    asked = await c.wait_event(lambda f: f["kind"] == "approval.requested")
    expires = datetime.fromisoformat(asked["data"]["expires_at"].replace("Z", "+00:00"))
    await c.close()
    for proc in procs:
        proc.kill()
    procs.clear()
    await wait_until(lambda: datetime.now(expires.tzinfo) > expires, timeout=10)
    server = start(**env)
    c = await connect(server, cookie)
    await c.resume(sid, 0)
    end = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id, timeout=40
    )
    assert end["data"] == {"stop_reason": "end_turn"}
    decided = [e["data"] for e in c.events() if e["kind"] == "approval.decided"]
    assert [(d["decision"], d["decided_by"]) for d in decided] == [("expired", "deadline")]
    [result] = [e["data"] for e in c.events() if e["kind"] == "tool.result"]
    assert result["ok"] is False and result["output"].startswith("expired: ")
    assert not (workspace_for(sid) / "d.txt").exists()
    await c.close()
