"""list_consumer.py: the session list socket pushes the user's sessions as they
change, never another user's, and takes no commands."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from sessions_app.log.sessions import create_session
from tests.harness import WsClient
from tests.support.rig import Hold

pytestmark = pytest.mark.django_db(transaction=True)

_create = database_sync_to_async(create_session, thread_sensitive=False)


async def _list(server, cookie) -> WsClient:
    c = await WsClient.connect(server.ws.replace("/ws/sessions/", "/ws/list/"), cookie)
    await c.wait(lambda f: f.get("type") == "sessions")
    return c


async def test_snapshot_then_pushes_for_new_sessions_titles_and_status(
    server, cookie, user, other_user
):
    """The snapshot lists the user's sessions only; a new session, its title from
    the first message, and its run starting and ending are pushed as they happen."""
    mine = await _create(user, "mine")
    await _create(other_user, "theirs")
    lister = await _list(server, cookie)
    snapshot = lister.frames[0]["sessions"]
    assert [s["title"] for s in snapshot] == ["mine"]
    assert set(snapshot[0]) >= {"id", "status", "status_label", "updated_at", "pending_approvals"}
    assert snapshot[0]["id"] == mine.id

    tab = await WsClient.connect(server.ws, cookie)
    started = await tab.start()
    sid = started["session_id"]
    new = await lister.wait(lambda f: f.get("type") == "session" and f["session"]["id"] == sid)
    assert new["session"]["title"] == "" and new["session"]["status"] == "idle"
    # The list pushes the session as it is when the push is read: the run must
    # still be going then, so it is held until cancelled once seen.
    hold = Hold()
    sent = await tab.request({"type": "send", "client_message_id": "m1", "text": hold.text})
    running = await lister.wait(
        lambda f: f.get("type") == "session" and f["session"]["status"] == "running"
    )
    assert running["session"]["title"] == hold.text and running["session"]["active_runs"] == 1
    await tab.request({"type": "cancel", "run_id": sent["run_id"]})
    finished = await tab.wait_event(lambda f: f["kind"] == "run.finished")
    assert finished["data"]["stop_reason"] == "cancelled"
    await lister.wait(
        lambda f: (
            f.get("type") == "session"
            and f["session"]["id"] == sid
            and f["session"]["status"] == "idle"
            and f["session"]["active_runs"] == 0
        )
    )
    assert all(
        f["session"]["id"] in (sid, mine.id) for f in lister.frames if f.get("type") == "session"
    )
    await tab.close()
    await lister.close()


async def test_an_approval_waiting_and_a_deleted_session_are_pushed(
    server, cookie, user, django_user_model
):
    """A run parked at a gate shows as awaiting approval with one pending; a
    session deleted in the admin is session_gone."""
    admin = await database_sync_to_async(django_user_model.objects.create_superuser)(
        "root", password="root-pass-1"
    )
    lister = await _list(server, cookie)
    tab = await WsClient.connect(server.ws, cookie)
    sid = (await tab.start())["session_id"]
    await tab.request({"type": "send", "client_message_id": "m1", "text": "/write a.txt hi"})
    parked = await lister.wait(
        lambda f: f.get("type") == "session" and f["session"]["pending_approvals"] == 1
    )
    assert parked["session"]["status"] == "awaiting_approval"
    from tests.runtime.test_runtime import _admin_post

    await database_sync_to_async(_admin_post)(
        server,
        admin,
        "/admin/sessions_app/agentsession/",
        {"action": "delete_selected", "_selected_action": sid, "post": "yes"},
    )
    gone = await lister.wait(lambda f: f.get("type") == "session_gone")
    assert gone["session_id"] == sid
    await tab.close()
    await lister.close()


async def test_the_list_socket_takes_no_commands_and_needs_a_login(server, cookie):
    """ping gets pong, anything else an error, and the socket stays; no login: 4401."""
    lister = await _list(server, cookie)
    assert (await lister.request({"type": "ping"}))["type"] == "pong"
    err = await lister.request({"type": "resume", "session_id": "x"})
    assert err["type"] == "error" and err["code"] == "unknown_type"
    assert (await lister.request({"type": "ping"}))["type"] == "pong"
    await lister.close()
    anonymous = await WsClient.connect(server.ws.replace("/ws/sessions/", "/ws/list/"), None)
    assert await anonymous.wait_closed() == 4401


async def test_the_snapshot_says_when_it_is_cut_short(server, cookie, user):
    """With more than MAX_LISTED sessions the snapshot holds the most recent
    MAX_LISTED and ``truncated: true``; with fewer, no such field."""
    from channels.db import database_sync_to_async

    from sessions_app.log.sessions import MAX_LISTED
    from sessions_app.models import AgentSession
    from tests.harness import WsClient

    url = server.ws.replace("/ws/sessions/", "/ws/list/")
    lister = await WsClient.connect(url, cookie)
    first = await lister.wait(lambda f: f.get("type") == "sessions")
    assert "truncated" not in first
    await lister.close()
    await database_sync_to_async(AgentSession.objects.bulk_create)(
        [AgentSession(owner=user) for _ in range(MAX_LISTED + 1)]
    )
    lister = await WsClient.connect(url, cookie)
    full = await lister.wait(lambda f: f.get("type") == "sessions")
    assert full["truncated"] is True and len(full["sessions"]) == MAX_LISTED
    await lister.close()
