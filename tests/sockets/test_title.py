"""The session's title by push (sessions_app/sockets/session.py, fanout)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.harness import WsClient
from tests.support.sessions import send_text

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_title_follows_by_push_to_every_tab_of_theopen_session(server, cookie, user):
    """The first message names the session: every socket following it gets a
    ``title`` frame at once, and a later resume_ok carries the title; a rename
    over REST reaches them the same way."""
    c = await WsClient.connect(server.ws, cookie)
    started = await c.start()
    sid = started["session_id"]
    assert started["title"] == ""
    watcher = await WsClient.connect(server.ws, cookie)
    await watcher.resume(sid, 0)
    await send_text(c, "Plan the trip\nwith details", "m1")
    for sock in (c, watcher):
        frame = await sock.wait(lambda f: f.get("type") == "title")
        assert frame == {"type": "title", "session_id": sid, "title": "Plan the trip"}
    late = await WsClient.connect(server.ws, cookie)
    ok = await late.resume(sid, 0)
    assert ok["title"] == "Plan the trip"
    status = await asyncio.to_thread(_patch_title, server, cookie, sid, "Renamed")
    assert status == 200
    for sock in (c, watcher, late):
        await sock.wait(lambda f: f.get("type") == "title" and f["title"] == "Renamed")
    for sock in (c, watcher, late):
        await sock.close()


def _patch_title(server, cookie, session_id: str, title: str) -> int:
    """PATCH the title as the page's rename does (cookie, CSRF token, same origin)."""
    token = "t" * 32
    request = urllib.request.Request(
        f"{server.http}/api/sessions/{session_id}/",
        data=json.dumps({"title": title}).encode(),
        method="PATCH",
        headers={
            "Content-Type": "application/json",
            "Cookie": f"{cookie}; csrftoken={token}",
            "X-CSRFToken": token,
            "Origin": server.http,
            "Referer": server.http + "/",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status
