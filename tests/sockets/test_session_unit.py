"""SessionConsumer in-process (Channels' WebsocketCommunicator): the delivery paths
that only load reaches against a real server, driven one message at a time."""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import transaction
from django.utils import timezone

from sessions_app import fanout
from sessions_app.log.events import append_event
from sessions_app.log.sessions import create_session
from sessions_app.models import AgentSession, Event
from sessions_app.sockets.session import SessionConsumer
from sessions_app.wire.frames import dumps, event_frame
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _commit_unpublished(session_id: str, n: int) -> list[Event]:
    """Commit ``n`` events without publishing them (the test publishes by hand)."""
    with transaction.atomic():
        s = AgentSession.objects.select_for_update().get(id=session_id)
        events = [
            Event(
                session_id=session_id,
                seq=s.head + i + 1,
                kind="assistant.delta",
                data={"text": f"t{s.head + i + 1}"},
                created_at=timezone.now(),
            )
            for i in range(n)
        ]
        Event.objects.bulk_create(events)
        AgentSession.objects.filter(id=session_id).update(head=s.head + n)
    return events


def _message(event: Event) -> dict:
    return {
        "type": fanout.EVENT_MESSAGE,
        "session_id": event.session_id,
        "seq": event.seq,
        "text": dumps(event_frame(event)),
    }


async def _resumed(user, session_id: str, after: int, epoch: str) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(SessionConsumer.as_asgi(), "/ws/sessions/")
    comm.scope["user"] = user
    connected, _ = await comm.connect()
    assert connected
    frame = {"type": "resume", "protocol": 1, "session_id": session_id, "after": after}
    if after:
        frame["epoch"] = epoch
    await comm.send_json_to(frame)
    reply = await comm.receive_json_from(timeout=10)
    assert reply["type"] == "resume_ok", reply
    return comm


async def _events_until(comm, last_seq: int) -> list[int]:
    seqs: list[int] = []
    while not seqs or seqs[-1] < last_seq:
        frame = await comm.receive_json_from(timeout=10)
        if frame["type"] == "event":
            seqs.append(frame["seq"])
    return seqs


async def test_a_hole_in_live_delivery_is_refilled_from_the_log_in_order(user):
    """Live seq N+2 arriving before N+1 (lost or overtaken): the socket gets N+1 from
    the log, then N+2; a late N+1 is dropped; nothing repeats."""
    s = await database_sync(create_session, user)
    comm = await _resumed(user, s.id, 1, s.epoch)
    first, second = await database_sync(_commit_unpublished, s.id, 2)
    layer = get_channel_layer()
    await layer.group_send(fanout.group_name(s.id), _message(second))
    assert await _events_until(comm, second.seq) == [first.seq, second.seq]
    await layer.group_send(fanout.group_name(s.id), _message(first))  # late duplicate
    third = (await database_sync(_commit_unpublished, s.id, 1))[0]
    await layer.group_send(fanout.group_name(s.id), _message(third))
    assert await _events_until(comm, third.seq) == [third.seq]
    await comm.disconnect()


async def test_live_events_during_a_replay_are_held_then_delivered_once(user):
    """Events published while a long replay is under way (some of them also inside
    the replayed range, some out of order) reach the socket exactly once, in order."""
    s = await database_sync(create_session, user)
    await database_sync(_commit_unpublished, s.id, 3000)
    comm = await _resumed(user, s.id, 0, s.epoch)
    extra = await database_sync(_commit_unpublished, s.id, 5)
    layer = get_channel_layer()
    for event in [extra[2], extra[0], extra[1], extra[4], extra[3], extra[0]]:
        await layer.group_send(fanout.group_name(s.id), _message(event))
    seqs = await _events_until(comm, extra[-1].seq)
    assert seqs == list(range(1, extra[-1].seq + 1))
    await comm.disconnect()


async def test_merged_publications_are_delivered_in_order(user):
    """A session.events message (a busy publisher's merge) is delivered frame by
    frame, deduplicated against what the socket already sent."""
    s = await database_sync(create_session, user)
    comm = await _resumed(user, s.id, 1, s.epoch)
    events = await database_sync(_commit_unpublished, s.id, 4)
    layer = get_channel_layer()
    await layer.group_send(fanout.group_name(s.id), _message(events[0]))
    await layer.group_send(
        fanout.group_name(s.id),
        {
            "type": fanout.EVENTS_MESSAGE,
            "session_id": s.id,
            "events": [[e.seq, dumps(event_frame(e))] for e in events],
        },
    )
    assert await _events_until(comm, events[-1].seq) == [e.seq for e in events]
    await comm.disconnect()


async def test_another_sessions_messages_never_reach_the_socket(user, other_user):
    """A message for another session arriving through this socket's group (a stale
    membership, a mixed-up publication) is ignored."""
    mine = await database_sync(create_session, user)
    theirs = await database_sync(create_session, other_user)
    comm = await _resumed(user, mine.id, 1, mine.epoch)
    secret = await database_sync(append_event, theirs.id, "assistant.delta", {"text": "no"})
    await get_channel_layer().group_send(fanout.group_name(mine.id), _message(secret))
    ours = await database_sync(append_event, mine.id, "assistant.delta", {"text": "yes"})
    frames = []
    while not frames or frames[-1].get("seq") != ours.seq:
        frames.append(await comm.receive_json_from(timeout=10))
    assert all(f.get("session_id") in (mine.id, None) for f in frames)
    await comm.disconnect()


async def database_sync(fn, *args):
    from asgiref.sync import sync_to_async

    return await sync_to_async(fn, thread_sensitive=False)(*args)


async def test_a_purge_under_a_replay_closes_1013_instead_of_skipping(user, monkeypatch):
    """The log is purged while a replay is between two pages: the socket gets the
    first page, then a close 1013 (resume later: cursor_expired), never a skip."""
    import asyncio

    from sessions_app.delivery import reads
    from sessions_app.log.events import purge_events

    s = await database_sync(create_session, user)
    await database_sync(_commit_unpublished, s.id, 1200)
    real_page = reads.events_page
    calls = 0
    purged = asyncio.Event()

    async def page_after_the_purge(*args):
        # The first page comes with the resume check; the second is read here.
        nonlocal calls
        calls += 1
        if calls == 1:
            await purged.wait()
        return await real_page(*args)

    monkeypatch.setattr(reads, "events_page", page_after_the_purge)
    comm = await _resumed(user, s.id, 0, s.epoch)
    assert await _events_until(comm, reads.FIRST_PAGE) == list(range(1, reads.FIRST_PAGE + 1))
    await database_sync(lambda: purge_events(s.id, keep=10))
    purged.set()
    out = await comm.receive_output(timeout=10)
    assert out == {"type": "websocket.close", "code": 1013}


async def test_live_events_past_the_buffer_during_a_replay_come_from_the_log(user, monkeypatch):
    """More live events arrive during a replay than the socket holds in memory: only
    LIVE_BUFFER_LIMIT are kept, and every event still reaches it once, in order."""
    from sessions_app.sockets import session as consumers

    monkeypatch.setattr(consumers, "LIVE_BUFFER_LIMIT", 3)
    s = await database_sync(create_session, user)
    await database_sync(_commit_unpublished, s.id, 3000)
    comm = await _resumed(user, s.id, 0, s.epoch)
    extra = await database_sync(_commit_unpublished, s.id, 20)
    layer = get_channel_layer()
    for event in extra:
        await layer.group_send(fanout.group_name(s.id), _message(event))
    seqs = await _events_until(comm, extra[-1].seq)
    assert seqs == list(range(1, extra[-1].seq + 1))
    await comm.disconnect()


async def test_a_log_ending_short_of_a_live_seq_closes_1013_instead_of_a_hole(user):
    """A publication names a seq the log cannot supply up to (deleted under it): the
    socket is closed 1013 (resume later), never sent an event past a hole."""
    s = await database_sync(create_session, user)
    comm = await _resumed(user, s.id, 1, s.epoch)
    message = {
        "type": fanout.EVENT_MESSAGE,
        "session_id": s.id,
        "seq": 5,
        "text": '{"type":"event","seq":5}',
    }
    await get_channel_layer().group_send(fanout.group_name(s.id), message)
    out = await comm.receive_output(timeout=10)
    while out["type"] == "websocket.send":
        assert '"seq":5' not in out.get("text", "")
        out = await comm.receive_output(timeout=10)
    assert out == {"type": "websocket.close", "code": 1013}


async def test_a_reply_to_a_client_that_already_left_is_no_error(user, monkeypatch, caplog):
    """The client closes while its pong is on the way (daphne raises Disconnected on
    the send): nothing is logged as an error, and no 1011 close is attempted."""
    from autobahn.exception import Disconnected

    from sessions_app.delivery import transport
    from sessions_app.server.patches import daphne_buffer

    transport.plug(gone=daphne_buffer.PEER_GONE)  # as the ASGI module does

    handled = asyncio.Event()
    real_dispatch = SessionConsumer.dispatch

    async def dispatch(self, message):
        await real_dispatch(self, message)
        if '"p1"' in (message.get("text") or ""):
            handled.set()  # the ping's handling, its except branches included, is over

    monkeypatch.setattr(SessionConsumer, "dispatch", dispatch)
    s = await database_sync(create_session, user)
    comm = await _resumed(user, s.id, 1, s.epoch)
    real_send = SessionConsumer.send

    async def send(self, text_data=None, bytes_data=None, close=False):
        if text_data and '"pong"' in text_data:
            raise Disconnected("Attempt to send on a closed protocol")
        return await real_send(self, text_data, bytes_data, close)

    monkeypatch.setattr(SessionConsumer, "send", send)
    with caplog.at_level("ERROR"):
        await comm.send_json_to({"type": "ping", "request_id": "p1"})
        await asyncio.wait_for(handled.wait(), 10)
    sent = []
    while not comm.output_queue.empty():
        sent.append(comm.output_queue.get_nowait())
    # No 1011 close and no pong (a presence may come and go meanwhile).
    assert not [m for m in sent if m["type"] == "websocket.close" or "pong" in m.get("text", "")]
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
    await comm.disconnect()


async def test_resume_ok_does_not_wait_for_the_connection_row(user, monkeypatch):
    """The handshake writes nothing before its answer: resume_ok arrives while the
    diagnostic Connection row's write is held back, and the row appears after,
    with what the socket asked for."""
    import asyncio

    from sessions_app.models import Connection
    from sessions_app.sockets import rows as connection_rows

    s = await database_sync(create_session, user)
    release = asyncio.Event()
    real_write = connection_rows._write_in_pool

    async def held_write(*args, **kwargs):
        await release.wait()
        return await real_write(*args, **kwargs)

    monkeypatch.setattr(connection_rows, "_write_in_pool", held_write)
    comm = await _resumed(user, s.id, 0, s.epoch)  # asserts resume_ok
    answered = timezone.now()
    assert await database_sync(lambda: Connection.objects.count()) == 0
    release.set()
    await comm.receive_json_from(timeout=10)  # the replay went on meanwhile
    row = await wait_until(lambda: Connection.objects.filter(session_id=s.id).first())
    assert (row.first_frame_type, row.resume_after, row.user_id) == ("resume", 0, user.pk)
    assert row.opened_at <= answered  # when the socket opened, not when the row was written
    await comm.disconnect()


async def test_a_socket_closed_before_its_handshake_still_leaves_a_row(user):
    """A socket that never sent a handshake is recorded when it closes (the admin
    shows every socket)."""
    from sessions_app.models import Connection

    comm = WebsocketCommunicator(SessionConsumer.as_asgi(), "/ws/sessions/")
    comm.scope["user"] = user
    connected, _ = await comm.connect()
    assert connected
    await comm.disconnect(code=1001)
    row = await database_sync(lambda: Connection.objects.get())
    assert (row.user_id, row.close_code, row.closed_at is not None) == (user.pk, 1001, True)
    assert row.opened_at <= row.closed_at
