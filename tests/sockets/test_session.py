"""The WebSocket protocol against a real daphne: handshake, replay, live, commands."""

from __future__ import annotations

import asyncio

import pytest
import websockets

from sessions_app.log.events import append_event
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, Connection, Event, Run
from tests.harness import WsClient, session_cookie
from tests.support.clients import connect
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


async def test_start_creates_session_and_replays_session_created(server, cookie, user):
    """start_ok names a new session owned by the user; seq 1 session.created follows."""
    c = await connect(server, cookie)
    ok = await c.start(title="hello")
    assert ok["type"] == "start_ok" and ok["head"] == 1 and ok["connection_id"]
    ev = await c.wait_event(lambda f: f["seq"] == 1)
    assert ev["kind"] == "session.created" and ev["data"] == {"title": "hello"}
    assert ev["run_id"] is None and ev["ts"].endswith("Z")
    session = AgentSession.objects.get(id=ok["session_id"])
    assert session.owner == user and session.epoch == ok["epoch"]
    assert ok["session_id"] != ok["connection_id"]
    await c.close()


@pytest.mark.parametrize(
    "frame, reason",
    [
        ({"protocol": 2, "after": 0}, "unsupported_protocol"),
        ({"protocol": 1, "after": -1}, "bad_request"),
        ({"protocol": 1, "after": "3"}, "bad_request"),
        ({"protocol": 1, "after": 3}, "bad_request"),  # no epoch
        ({"protocol": 1, "after": 0, "session_id": 7}, "bad_request"),
        ({"protocol": 1, "after": 0, "session_id": "s_missing"}, "not_found"),
        ({"protocol": 1, "after": 0, "session_id": "OTHER"}, "not_found"),
        ({"protocol": 1, "after": 1, "epoch": "wrong"}, "epoch_mismatch"),
        ({"protocol": 1, "after": 99, "epoch": "EPOCH"}, "cursor_ahead"),
        ({"protocol": 1, "after": 1, "epoch": "EPOCH", "purged": 5}, "cursor_expired"),
    ],
)
async def test_resume_rejections(server, cookie, user, other_user, frame, reason):
    """Each rejection reason, in the documented order; none creates a session."""
    mine = create_session(user, "mine")
    theirs = create_session(other_user, "theirs")
    frame = dict(frame)
    purged = frame.pop("purged", None)
    if purged:
        for _ in range(purged):
            append_event(mine.id, "assistant.delta", {"text": "x"})
        AgentSession.objects.filter(id=mine.id).update(earliest=purged)
    if "session_id" not in frame:
        frame["session_id"] = mine.id
    elif frame["session_id"] == "OTHER":
        frame["session_id"] = theirs.id
    if frame.get("epoch") == "EPOCH":
        frame["epoch"] = mine.epoch
    before = AgentSession.objects.count()
    c = await connect(server, cookie)
    reply = await c.request({"type": "resume", **frame})
    assert reply["type"] == "resume_rejected" and reply["reason"] == reason, reply
    if reason == "cursor_ahead":
        assert reply["head"] == 1
    if reason == "cursor_expired":
        assert reply["earliest"] == purged
    assert AgentSession.objects.count() == before
    # The socket stays open for another handshake.
    mine.refresh_from_db()
    ok = await c.resume(mine.id, mine.head, epoch=mine.epoch)
    assert ok["type"] == "resume_ok"
    await c.close()


async def test_start_errors_keep_socket_open(server, cookie):
    """An invalid start gets an error frame; the socket can still start."""
    c = await connect(server, cookie)
    bad = await c.request({"type": "start", "protocol": 9})
    assert bad["type"] == "error" and bad["code"] == "unsupported_protocol"
    bad = await c.request({"type": "start", "protocol": 1, "tab_id": "x" * 65})
    assert bad["type"] == "error" and bad["code"] == "bad_frame"
    ok = await c.start()
    assert ok["type"] == "start_ok"
    again = await c.start()
    assert again["type"] == "error" and again["code"] == "bad_frame"
    await c.close()


@pytest.mark.parametrize(
    "raw",
    [b"\x00binary", "not json", "[1,2]", '{"no":"type"}', '{"type":"ping"}', '{"type":5}'],
)
async def test_pre_handshake_violation_closes_4400(server, cookie, raw):
    """Anything but start/resume as the first frame closes with 4400."""
    c = await connect(server, cookie)
    await c.send_raw(raw)
    assert await c.wait_closed() == 4400


async def test_not_logged_in_closes_4401(server):
    """A socket without a logged-in user is closed with 4401 after accept."""
    c = await WsClient.connect(server.ws, None)
    assert await c.wait_closed() == 4401


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        None,
        "null",
        "http://127.0.0.1",  # the right host on another port
        "http://127.0.0.1:1",
        "https://127.0.0.1:PORT",  # the right host and port, another scheme
        "http://localhost:PORT",  # an allowed host, but not the one asked for
    ],
)
async def test_origin_checked_at_upgrade(server, cookie, origin):
    """Only this site's own origin (scheme, host and port) may open a socket: anything
    else, a missing Origin included, is refused at the upgrade with HTTP 403."""
    if origin:
        origin = origin.replace("PORT", str(server.port))
    with pytest.raises(websockets.InvalidStatus) as info:
        await websockets.connect(server.ws, origin=origin, additional_headers={"Cookie": cookie})
    assert info.value.response.status_code == 403
    own = await websockets.connect(
        server.ws,
        origin=f"http://127.0.0.1:{server.port}",
        additional_headers={"Cookie": cookie},
    )
    await own.close()


async def test_resume_replays_after_cursor_then_live(server, cookie, user):
    """Resume after N gets N+1..head, then later events live, no gap, no repeat."""
    s = create_session(user)
    for i in range(9):
        append_event(s.id, "assistant.delta", {"text": f"d{i}"})
    c = await connect(server, cookie)
    ok = await c.resume(s.id, after=4, epoch=s.epoch)
    assert ok["type"] == "resume_ok" and ok["after"] == 4 and ok["head"] == 10
    await c.wait_event(lambda f: f["seq"] == 10)
    presence = await c.wait(lambda f: f["type"] == "presence")
    assert presence["viewers"] == 1 and presence["running"] is False
    # Live events come from the server itself (the in-memory layer is per process).
    await c.request({"type": "send", "client_message_id": "m", "text": "/stream 3 0"})
    finished = await c.wait_event(lambda f: f["kind"] == "run.finished")
    assert c.seqs() == list(range(5, finished["seq"] + 1))
    kinds = [f["kind"] for f in c.events() if f["seq"] > 10]
    assert kinds == ["user.message", "run.started"] + ["assistant.delta"] * 3 + [
        "assistant.message",
        "run.finished",
    ]
    await c.close()


async def test_connection_row_records_diagnostics(server, cookie, user):
    """The Connection row keeps tab, first frame, resume cursor, last ack, close code."""
    s = create_session(user)
    c = await connect(server, cookie)
    ok = await c.resume(s.id, 0)
    await c.wait_event(lambda f: f["seq"] == 1)
    await c.send({"type": "ack", "seq": 1})
    pong = await c.request({"type": "ping"})
    assert pong["type"] == "pong"
    await c.ws.close(code=1000)
    await c.wait_closed()
    row = await wait_until(
        lambda: Connection.objects.filter(id=ok["connection_id"], closed_at__isnull=False).first()
    )
    assert (row.tab_id, row.first_frame_type, row.resume_after) == ("t-test", "resume", 0)
    assert row.last_ack == 1 and row.close_code == 1000 and row.clean is True
    assert row.session_id == s.id


async def test_send_is_idempotent_per_client_message_id(server, cookie, user):
    """Re-sending a client_message_id returns the first result as duplicate, appends nothing."""
    c = await connect(server, cookie)
    ok = await c.start()
    first = await c.request({"type": "send", "client_message_id": "m1", "text": "hi"})
    assert first["type"] == "send_ok" and first["status"] == "started"
    await c.wait_event(lambda f: f["kind"] == "run.finished")
    head = AgentSession.objects.get(id=ok["session_id"]).head
    again = await c.request({"type": "send", "client_message_id": "m1", "text": "other"})
    assert again["status"] == "duplicate"
    assert (again["seq"], again["run_id"]) == (first["seq"], first["run_id"])
    assert AgentSession.objects.get(id=ok["session_id"]).head == head
    assert Run.objects.filter(session_id=ok["session_id"]).count() == 1
    await c.close()


async def test_concurrent_duplicate_send_from_two_sockets(server, cookie, user):
    """The same client_message_id sent at once on two sockets makes one user.message."""
    s = create_session(user)
    a, b = await connect(server, cookie), await connect(server, cookie)
    await a.resume(s.id, 0)
    await b.resume(s.id, 0)
    frame = {"type": "send", "client_message_id": "same", "text": "/stream 2 0"}
    ra, rb = await asyncio.gather(a.request(dict(frame)), b.request(dict(frame)))
    assert sorted([ra["status"], rb["status"]]) == ["duplicate", "started"]
    assert ra["run_id"] == rb["run_id"] and ra["seq"] == rb["seq"]
    assert Event.objects.filter(session_id=s.id, kind="user.message").count() == 1
    await a.close()
    await b.close()


async def test_another_users_session_is_not_found(server, user, other_user):
    """Another user's session is not_found, indistinguishable from a missing one."""
    s = create_session(user)
    c = await WsClient.connect(server.ws, session_cookie(other_user))
    reply = await c.resume(s.id, 0)
    assert reply["type"] == "resume_rejected" and reply["reason"] == "not_found"
    missing = await c.resume("s_doesnotexist", 0)
    assert missing["message"] == reply["message"]
    await c.close()


async def test_sync_replays_and_live_continues_after_head(server, cookie, user):
    """sync_ok then the events after N up to head; live goes on after head, no repeats."""
    s = create_session(user)
    for i in range(4):
        append_event(s.id, "assistant.delta", {"text": str(i)})
    c = await connect(server, cookie)
    await c.resume(s.id, 0)
    await c.wait_event(lambda f: f["seq"] == 5)
    reply = await c.request({"type": "sync", "after": 2})
    assert reply["type"] == "sync_ok" and reply["head"] == 5 and reply["after"] == 2
    await c.wait_event(lambda f: f["seq"] == 5 and c.seqs().count(5) == 2)
    await c.request({"type": "send", "client_message_id": "m", "text": "/stream 0 0"})
    finished = await c.wait_event(lambda f: f["kind"] == "run.finished")
    assert c.seqs() == [1, 2, 3, 4, 5, 3, 4, 5] + list(range(6, finished["seq"] + 1))
    await c.close()


async def test_a_sync_past_the_head_skips_nothing_that_follows(server, cookie, user):
    """A sync whose cursor is past the head sends nothing, and live delivery
    still goes on after the head: the events after it are not taken for
    repeats (a review found the cursor moving to the client's 'after')."""
    s = create_session(user)
    c = await connect(server, cookie)
    await c.resume(s.id, 0)
    await c.wait_event(lambda f: f["seq"] == 1)
    reply = await c.request({"type": "sync", "after": 9})
    assert reply["type"] == "sync_ok" and reply["head"] == 1
    await c.request({"type": "send", "client_message_id": "m", "text": "/stream 12 0"})
    finished = await c.wait_event(lambda f: f["kind"] == "run.finished")
    assert c.seqs() == list(range(1, finished["seq"] + 1))
    await c.close()


async def test_graceful_shutdown_closes_with_1012(cookie, tmp_path, transactional_db):
    """SIGTERM to daphne closes open sockets with 1012 (service restart), and
    the server waits for their consumers: each socket's row records the close."""
    from sessions_app.models import Connection
    from tests.harness import Daphne

    own = Daphne(tmp_path).start()
    try:
        c = await WsClient.connect(own.ws, cookie)
        sid = (await c.start())["session_id"]
        await asyncio.to_thread(own.stop)
        assert await c.wait_closed() == 1012
    finally:
        own.kill()
    row = await asyncio.to_thread(lambda: Connection.objects.get(session_id=sid))
    assert (row.close_code, row.clean, row.closed_at is not None) == (1012, True, True)


async def test_resume_across_a_purge(server, cookie, user):
    """After a purge, a cursor before what is kept is cursor_expired; one at the edge resumes."""
    from django.core.management import call_command

    s = create_session(user)
    for i in range(9):
        append_event(s.id, "assistant.delta", {"text": str(i)})
    await asyncio.to_thread(call_command, "purge_events", s.id, "--before", "6")
    c = await connect(server, cookie)
    expired = await c.resume(s.id, 3, epoch=s.epoch)
    assert expired["reason"] == "cursor_expired" and expired["earliest"] == 6
    ok = await c.resume(s.id, 5, epoch=s.epoch)
    assert ok["type"] == "resume_ok"
    await c.wait_event(lambda f: f["seq"] == 10)
    assert c.seqs() == [6, 7, 8, 9, 10]
    await c.close()


async def test_rejected_resume_never_leaks_another_users_events(server, cookie, user, other_user):
    """A resume refused as not_found receives nothing of that session, even while it streams,
    and the socket's next session is delivered whole."""
    owner = await WsClient.connect(server.ws, session_cookie(other_user))
    ok = await owner.start()
    sent = await owner.request({"type": "send", "client_message_id": "m", "text": "/stream 400 0"})
    spy = await connect(server, cookie)
    for _ in range(20):
        reply = await spy.resume(ok["session_id"], 0)
        assert reply["reason"] == "not_found"
    mine = await spy.start()
    await owner.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == sent["run_id"])
    own = await spy.request({"type": "send", "client_message_id": "x", "text": "/stream 2 0"})
    await spy.wait_event(lambda f: f["kind"] == "run.finished" and f["run_id"] == own["run_id"])
    assert {f["session_id"] for f in spy.events()} == {mine["session_id"]}
    assert spy.seqs() == list(range(1, spy.seqs()[-1] + 1))
    assert not [
        f for f in spy.frames if f["type"] == "presence" and f["session_id"] != mine["session_id"]
    ]
    await spy.close()
    await owner.close()


@pytest.mark.parametrize("session_id", ["a b", "s_é", "x" * 100, "s_../x"])
async def test_impossible_session_ids_are_not_found(server, cookie, session_id):
    """An id that cannot be a session id is not_found, and the socket lives on."""
    c = await connect(server, cookie)
    reply = await c.resume(session_id, 0)
    assert reply["type"] == "resume_rejected" and reply["reason"] == "not_found"
    assert (await c.start())["type"] == "start_ok"
    await c.close()


async def test_huge_cursors_are_refused_cleanly(server, cookie, user):
    """Cursors past what the log can hold are bad_request / bad_frame, never a crash."""
    s = create_session(user)
    c = await connect(server, cookie)
    reply = await c.resume(s.id, 2**63, epoch=s.epoch)
    assert reply["reason"] == "bad_request"
    await c.resume(s.id, 0)
    await c.send({"type": "ack", "seq": 2**63})
    err = await c.wait(lambda f: f["type"] == "error")
    assert err["code"] == "bad_frame"
    assert (await c.request({"type": "ping"}))["type"] == "pong"
    await c.close()


def _append_unpublished(session_id: str, kind: str, data: dict) -> int:
    """Commit an event whose publication is lost: written like append_events, never
    published (what a full channel or a Redis error does to the last event of a burst)."""
    from django.db import transaction
    from django.utils import timezone

    with transaction.atomic():
        session = AgentSession.objects.select_for_update().get(id=session_id)
        seq = session.head + 1
        AgentSession.objects.filter(id=session_id).update(head=seq)
        Event.objects.create(
            session_id=session_id, seq=seq, kind=kind, data=data, created_at=timezone.now()
        )
    return seq


async def test_lost_publication_at_the_end_of_a_burst_is_refilled(server, cookie, user):
    """The last event of a burst whose publication was lost reaches the quiet socket
    by the tail check, in order, once."""
    c = await connect(server, cookie)
    ok = await c.start()
    sid = ok["session_id"]
    await c.request({"type": "send", "client_message_id": "m", "text": "/stream 5 0"})
    await c.wait_event(lambda f: f["kind"] == "run.finished")
    lost = await asyncio.to_thread(_append_unpublished, sid, "assistant.message", {"text": "x"})
    got = await c.wait_event(lambda f: f["seq"] == lost, timeout=10)
    assert got["kind"] == "assistant.message"
    assert c.seqs() == list(range(1, lost + 1))
    await c.close()


async def test_idle_socket_probe_refills_a_lone_lost_event(
    cookie, user, tmp_path, transactional_db
):
    """A socket that saw no live event still learns of a lost one by its idle probe."""
    from tests.harness import Daphne

    daphne = Daphne(tmp_path, AGENT_TAIL_SETTLE_SECONDS="0.2", AGENT_TAIL_PROBE_SECONDS="0.5")
    daphne.start()
    try:
        s = create_session(user)
        c = await connect(daphne, cookie)
        await c.resume(s.id, 1, epoch=s.epoch)
        await c.wait(lambda f: f["type"] == "presence")
        lost = await asyncio.to_thread(_append_unpublished, s.id, "approval.decided", {})
        got = await c.wait_event(lambda f: f["seq"] == lost, timeout=10)
        assert got["kind"] == "approval.decided" and c.seqs() == [lost]
        await c.close()
    finally:
        daphne.stop()


async def test_a_session_deleted_under_a_socket_closes_it_1013(
    cookie, user, tmp_path, transactional_db
):
    """The session is deleted where no message tells its socket (a command
    beside the server): its tail check finds it gone and closes 1013, and the
    resume that follows is told not_found, never a silent empty session."""
    from tests.harness import Daphne

    daphne = Daphne(tmp_path, AGENT_TAIL_PROBE_SECONDS="0.3").start()
    try:
        s = create_session(user)
        c = await connect(daphne, cookie)
        await c.resume(s.id, 1, epoch=s.epoch)
        await c.wait(lambda f: f["type"] == "presence")
        await asyncio.to_thread(AgentSession.objects.filter(id=s.id).delete)
        assert await c.wait_closed() == 1013
        again = await connect(daphne, cookie)
        assert (await again.resume(s.id, 1, epoch=s.epoch))["reason"] == "not_found"
        await again.close()
    finally:
        daphne.stop()


async def test_presence_of_many_joining_sockets_is_coalesced(server, cookie, user):
    """40 sockets joining one session at once: every socket ends with viewers == 40,
    and the presence frames sent are far fewer than one broadcast per join (820)."""
    s = create_session(user)
    socks = await asyncio.gather(*(connect(server, cookie) for _ in range(40)))
    await asyncio.gather(*(c.resume(s.id, 0) for c in socks))
    for c in socks:
        await c.wait(lambda f: f["type"] == "presence" and f["viewers"] == 40, timeout=20)
        assert all(f["head"] == 1 for f in c.frames if f["type"] == "presence")
    total = sum(1 for c in socks for f in c.frames if f["type"] == "presence")
    assert total < 400, total
    await asyncio.gather(*(c.close() for c in socks))


@pytest.mark.slow
async def test_a_socket_outlives_the_channel_layers_group_expiry(
    cookie, user, tmp_path, transactional_db
):
    """With group memberships expiring after 2 s, a socket open longer still gets live
    events at once (it renews its membership), not only from a later tail probe."""
    from tests.harness import Daphne

    daphne = Daphne(tmp_path, CHANNEL_GROUP_EXPIRY="2", AGENT_TAIL_PROBE_SECONDS="600").start()
    try:
        c = await connect(daphne, cookie)
        await c.start()
        await c.wait(lambda f: f["type"] == "presence")
        # Time passing is what is under test: outlive the expiry twice over.
        await asyncio.sleep(4.5)  # sleep-ok: past the layer's group expiry, twice over
        await c.request({"type": "send", "client_message_id": "late", "text": "/stream 2 0"})
        end = await c.wait_event(lambda f: f["kind"] == "run.finished", timeout=5)
        assert c.seqs() == list(range(1, end["seq"] + 1))
        await c.close()
    finally:
        daphne.stop()
