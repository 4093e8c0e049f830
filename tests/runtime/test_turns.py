"""Conversation control over the socket (sessions_app/runtime/turns.py):
regenerate, edit and resend, switching branches, and what they stop."""

from __future__ import annotations

import pytest

from sessions_app.models import AgentSession, ApprovalRequest, Run
from sessions_app.runtime import turns
from sessions_app.runtime.tools import workspace_for
from tests.harness import WsClient
from tests.support.rig import Hold
from tests.support.sessions import open_session, send_text

pytestmark = pytest.mark.django_db(transaction=True)


def finished(run_id):
    return lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id


async def regenerate(c: WsClient, run_id: str, cmid: str) -> dict:
    reply = await c.request({"type": "send", "client_message_id": cmid, "regenerate": run_id})
    assert reply["type"] == "send_ok", reply
    return reply


async def edit(c: WsClient, run_id: str, text: str, cmid: str) -> dict:
    reply = await c.request(
        {"type": "send", "client_message_id": cmid, "text": text, "edit_of": run_id}
    )
    assert reply["type"] == "send_ok", reply
    return reply


async def test_regenerate_answers_the_same_message_again_as_a_sibling(server, cookie):
    """A regenerate of a finished answer starts a new run that answers the same
    user.message (none is logged again): the old answer stays in the log, the
    two runs are siblings, the new one is the leaf, and a repeat of its id is
    a duplicate that starts nothing."""
    c, sid = await open_session(server, cookie)
    first = await send_text(c, "hello", "m1")
    await c.wait_event(finished(first["run_id"]))
    again = await regenerate(c, first["run_id"], "r1")
    assert again["status"] == "started" and again["seq"] == first["seq"]
    await c.wait_event(finished(again["run_id"]))
    started = next(
        e for e in c.events() if e["kind"] == "run.started" and e["run_id"] == again["run_id"]
    )
    assert started["data"] == {
        "client_message_id": "r1",
        "regenerates": first["run_id"],
        "parent_run_id": None,
    }
    assert [e["data"]["text"] for e in c.events() if e["kind"] == "user.message"] == ["hello"]
    answers = [e["run_id"] for e in c.events() if e["kind"] == "assistant.message"]
    assert answers == [first["run_id"], again["run_id"]]
    tree = turns.tree_of(sid)
    assert tree["leaf_run_id"] == again["run_id"] and tree["path"] == [again["run_id"]]
    assert [(r["run_id"], r["parent_run_id"], r["answers_run_id"]) for r in tree["runs"]] == [
        (first["run_id"], None, first["run_id"]),
        (again["run_id"], None, first["run_id"]),
    ]
    repeat = await regenerate(c, first["run_id"], "r1")
    assert repeat["status"] == "duplicate" and repeat["run_id"] == again["run_id"]
    assert Run.objects.filter(session_id=sid).count() == 2
    await c.close()


async def test_an_edit_branches_and_a_switch_brings_the_original_back(server, cookie):
    """Editing the first message makes a new branch beside it; the turn that
    followed the old message stays on the old branch. A switch back to the
    original shows its newest turn (branch.switched, every socket of the
    session gets it); switching to the path already shown logs nothing."""
    c, sid = await open_session(server, cookie)
    watcher = await WsClient.connect(server.ws, cookie)
    await watcher.resume(sid, 0)
    one = await send_text(c, "one", "m1")
    two = await send_text(c, "two", "m2")
    await c.wait_event(finished(two["run_id"]))
    edited = await edit(c, one["run_id"], "uno", "m3")
    await c.wait_event(finished(edited["run_id"]))
    message = next(
        e for e in c.events() if e["kind"] == "user.message" and e["run_id"] == edited["run_id"]
    )
    assert message["data"] == {
        "client_message_id": "m3",
        "text": "uno",
        "edits": one["run_id"],
        "parent_run_id": None,
    }
    assert (turns.tree_of(sid))["path"] == [edited["run_id"]]
    back = await c.request({"type": "switch", "run_id": one["run_id"]})
    assert back == {
        "type": "switch_ok",
        "request_id": back["request_id"],
        "run_id": one["run_id"],
        "leaf_run_id": two["run_id"],
    }
    switched = await watcher.wait_event(lambda f: f["kind"] == "branch.switched")
    assert switched["data"] == {"leaf_run_id": two["run_id"]} and switched["run_id"] is None
    assert (turns.tree_of(sid))["path"] == [one["run_id"], two["run_id"]]
    head = AgentSession.objects.get(id=sid).head
    same = await c.request({"type": "switch", "run_id": two["run_id"]})
    assert same["leaf_run_id"] == two["run_id"]
    assert AgentSession.objects.get(id=sid).head == head
    # The next input continues the path shown: it follows "two".
    three = await send_text(c, "three", "m4")
    await c.wait_event(finished(three["run_id"]))
    assert (turns.tree_of(sid))["path"] == [one["run_id"], two["run_id"], three["run_id"]]
    missing = await c.request({"type": "switch", "run_id": "run_nope"})
    assert missing["type"] == "error" and missing["code"] == "not_found"
    await watcher.close()
    await c.close()


async def test_regenerating_during_a_stream_stops_it_first(server, cookie):
    """A regenerate while the answer still streams stops that run, saying why,
    and the new run starts at once: never two runs of a session at once."""
    c, sid = await open_session(server, cookie)
    streaming = await send_text(c, Hold().text, "m1")
    await c.wait_event(lambda f: f["kind"] == "assistant.delta")
    again = await regenerate(c, streaming["run_id"], "r1")
    assert again["status"] == "started"
    end = await c.wait_event(finished(streaming["run_id"]))
    assert end["data"] == {"stop_reason": "cancelled", "message": "stopped for a newer message"}
    await c.wait_event(lambda f: f["kind"] == "run.started" and f["run_id"] == again["run_id"])
    kinds = [(e["kind"], e["run_id"]) for e in c.events()]
    assert kinds.index(("run.finished", streaming["run_id"])) + 1 == kinds.index(
        ("run.started", again["run_id"])
    )
    await c.request({"type": "cancel", "run_id": again["run_id"]})
    await c.close()


async def test_a_gate_on_a_branch_left_is_cancelled_and_its_tool_never_runs(server, cookie):
    """Editing a message whose run waits at a gate closes the gate as
    cancelled (approval.decided "cancelled", its tool.result, run.finished),
    the edit's run starts, and a later approval is refused with
    approval_cancelled: the tool never ran."""
    c, sid = await open_session(server, cookie)
    gated = await send_text(c, "/write branch.txt never", "m1")
    await c.wait_event(lambda f: f["kind"] == "run.paused")
    approval_id = next(e for e in c.events() if e["kind"] == "approval.requested")["data"][
        "approval_id"
    ]
    edited = await edit(c, gated["run_id"], "hello instead", "m2")
    assert edited["status"] == "started"
    await c.wait_event(finished(edited["run_id"]))
    closing = [e for e in c.events() if e["run_id"] == gated["run_id"]][-3:]
    assert [e["kind"] for e in closing] == ["approval.decided", "tool.result", "run.finished"]
    assert closing[0]["data"] == {
        "approval_id": approval_id,
        "decision": "cancelled",
        "decided_by": "alice",
    }
    assert closing[1]["data"]["ok"] is False
    assert closing[2]["data"]["stop_reason"] == "cancelled"
    late = await c.request({"type": "decide", "approval_id": approval_id, "decision": "approve"})
    assert late["type"] == "error" and late["code"] == "approval_cancelled"
    approval = ApprovalRequest.objects.get(id=approval_id)
    assert approval.status == "cancelled" and approval.executed_at is not None
    assert not (workspace_for(sid) / "branch.txt").exists()
    await c.close()


async def test_a_switch_away_from_a_parked_run_cancels_its_gate(server, cookie):
    """Switching to an earlier branch while the shown one waits at a gate
    closes that gate as cancelled, with the switch's own reason."""
    c, sid = await open_session(server, cookie)
    first = await send_text(c, "hello", "m1")
    await c.wait_event(finished(first["run_id"]))
    gated = await edit(c, first["run_id"], "/write left.txt x", "m2")
    await c.wait_event(lambda f: f["kind"] == "run.paused")
    ok = await c.request({"type": "switch", "run_id": first["run_id"]})
    assert ok["leaf_run_id"] == first["run_id"]
    end = await c.wait_event(finished(gated["run_id"]))
    assert end["data"]["message"] == "stopped: the conversation moved to another branch"
    await c.wait_event(lambda f: f["kind"] == "branch.switched")
    decided = next(e for e in c.events() if e["kind"] == "approval.decided")
    assert decided["data"]["decision"] == "cancelled"
    kinds = [e["kind"] for e in c.events()]
    assert kinds.index("branch.switched") > kinds.index("approval.decided")
    await c.close()


async def test_the_agent_sees_only_its_own_path(server, cookie):
    """The history a run's agent is given is the path it continues: a branch
    left behind is not part of it."""
    c, sid = await open_session(server, cookie)
    one = await send_text(c, "one", "m1")
    two = await send_text(c, "two", "m2")
    await c.wait_event(finished(two["run_id"]))
    edited = await edit(c, two["run_id"], "deux", "m3")
    await c.wait_event(finished(edited["run_id"]))

    def history():
        from sessions_app.runtime.context import Context

        run = Run.objects.get(id=edited["run_id"])
        return Context(run, "w").history()

    seen = history()
    assert [m["role"] for m in seen] == ["user", "assistant"]
    assert seen[0]["content"] == "one"
    assert one["run_id"] != edited["run_id"]
    await c.close()


async def test_the_handshake_says_branches_are_honoured(server, cookie):
    """A client offering "branches" is told the server uses it."""
    c = await WsClient.connect(server.ws, cookie)
    ok = await c.request({"type": "start", "protocol": 1, "features": ["branches"]})
    assert ok["features"] == ["branches"]
    bad = await c.request(
        {"type": "send", "client_message_id": "x", "regenerate": "r", "text": "t"}
    )
    assert bad["type"] == "error" and bad["code"] == "bad_frame"
    await c.close()


@pytest.mark.django_db
def test_the_gate_rule_is_the_transports_one_object(user):
    """``BehindGate``: with a gate waiting, the chat dialects' rule refuses a
    new input (``ApprovalPending``, their 409) unless it is a stop and send;
    the socket's and the REST API's queues it; with no gate both let it in."""
    from sessions_app.log.sessions import create_session
    from sessions_app.wire.errors import ApprovalPending

    session = create_session(user)
    turns.BehindGate.REFUSE.check(session.id, interrupt=False)
    Run.objects.create(
        id="r_gated",
        session=session,
        client_message_id="m-gated",
        text="write",
        message_seq=1,
        status=Run.Status.AWAITING_APPROVAL,
    )
    with pytest.raises(ApprovalPending):
        turns.BehindGate.REFUSE.check(session.id, interrupt=False)
    turns.BehindGate.REFUSE.check(session.id, interrupt=True)
    turns.BehindGate.QUEUE.check(session.id, interrupt=False)
