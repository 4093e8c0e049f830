"""What the runtime's socket tests share: a session over a socket, a send."""

from __future__ import annotations

from tests.harness import WsClient


async def open_session(server, cookie) -> tuple[WsClient, str]:
    c = await WsClient.connect(server.ws, cookie)
    ok = await c.start()
    return c, ok["session_id"]


def kinds(events, run_id):
    return [e["kind"] for e in events if e["run_id"] == run_id]


async def send_text(c: WsClient, text: str, cmid: str) -> dict:
    reply = await c.request({"type": "send", "client_message_id": cmid, "text": text})
    assert reply["type"] == "send_ok", reply
    return reply
