"""Sessions over a socket, as the tests drive them: open one, send a text,
see a run taken over once."""

from __future__ import annotations

from tests.harness import WsClient
from tests.support.clients import connect
from tests.support.rig import Hold


async def open_session(server, cookie) -> tuple[WsClient, str]:
    """A socket on ``server`` that started a new session: it and the session's id."""
    c = await connect(server, cookie)
    ok = await c.start()
    return c, ok["session_id"]


def kinds(events, run_id):
    """The kinds of ``run_id``'s events, in order."""
    return [e["kind"] for e in events if e["run_id"] == run_id]


async def send_text(c: WsClient, text: str, cmid: str) -> dict:
    """Send ``text`` as ``cmid``; its ``send_ok``."""
    reply = await c.request({"type": "send", "client_message_id": cmid, "text": text})
    assert reply["type"] == "send_ok", reply
    return reply


async def taken_over_once(c: WsClient, run_id: str, hold: Hold) -> None:
    """Run ``run_id`` (``hold.text``) is taken over exactly once: the test
    releases it after its ``run.resumed``, and it ends ``end_turn`` with its
    answer whole once, and the socket has every seq once."""
    resumed = await c.wait_event(
        lambda f: f["kind"] == "run.resumed" and f["run_id"] == run_id, timeout=40
    )
    assert resumed["data"]["reason"] == "takeover"
    hold.release()
    end = await c.wait_event(
        lambda f: f["kind"] == "run.finished" and f["run_id"] == run_id, timeout=40
    )
    assert end["data"] == {"stop_reason": "end_turn"}
    mine = [e for e in c.events() if e["run_id"] == run_id]
    assert [e["data"]["reason"] for e in mine if e["kind"] == "run.resumed"] == ["takeover"]
    [message] = [e for e in mine if e["kind"] == "assistant.message"]
    Hold.answer(message["data"]["text"])
    assert c.seqs() == list(range(1, end["seq"] + 1))
