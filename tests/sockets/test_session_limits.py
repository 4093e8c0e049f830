"""The session socket's limits (sessions_app/sockets/session.py, base.py): a bad
frame gets an error and the socket lives; size, rate, slow readers and the
per-user cap close with their codes."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from sessions_app.models import AgentSession, Connection
from tests.harness import WsClient, rss_kib, session_cookie
from tests.logs_made import session_with_deltas
from tests.raw_http import client_frame, raw_socket_that_never_reads
from tests.support.clients import connect
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


BAD_FRAMES = [
    ("not json", "bad_json"),
    ("[]", "bad_frame"),
    ('{"type":"nope"}', "unknown_type"),
    ('{"type":"ack","seq":-1}', "bad_frame"),
    ('{"type":"ack","seq":"1"}', "bad_frame"),
    ('{"type":"send","client_message_id":"m","text":""}', "bad_frame"),
    ('{"type":"send","text":"hi"}', "bad_frame"),
    ('{"type":"send","client_message_id":5,"text":"hi"}', "bad_frame"),
    (json.dumps({"type": "send", "client_message_id": "m", "text": "x" * 32001}), "too_large"),
    ('{"type":"decide","approval_id":"ap_x","decision":"maybe"}', "bad_frame"),
    ('{"type":"decide","approval_id":"ap_x","decision":"approve"}', "not_found"),
    ('{"type":"cancel","run_id":"run_x"}', "not_found"),
    ('{"type":"cancel"}', "bad_frame"),
    ('{"type":"sync","after":-2}', "bad_frame"),
    ('{"type":"resume","protocol":1,"session_id":"x","after":0}', "bad_frame"),
    ('{"type":"ping","request_id":{"a":1}}', "bad_frame"),
    # Lone surrogates: valid JSON, not valid Unicode.
    ('{"type":"send","client_message_id":"m","text":"a\\ud800b"}', "bad_frame"),
    ('{"type":"send","client_message_id":"\\udfff","text":"hi"}', "bad_frame"),
    ('{"type":"decide","approval_id":"\\ud800","decision":"approve"}', "bad_frame"),
    ('{"type":"ping","request_id":"\\ud800"}', "bad_frame"),
    ('{"type":"\\ud800"}', "unknown_type"),
    # NUL: valid JSON and Unicode, but no PostgreSQL text column can hold it.
    ('{"type":"send","client_message_id":"m","text":"a\\u0000b"}', "bad_frame"),
]


@pytest.mark.parametrize("raw, code", BAD_FRAMES)
async def test_bad_frames_get_error_and_socket_lives(server, cookie, raw, code):
    """Each bad frame gets its documented error code; the socket still answers ping."""
    c = await connect(server, cookie)
    await c.start()
    await c.send_raw(raw)
    err = await c.wait(lambda f: f["type"] == "error")
    assert err["code"] == code, err
    pong = await c.request({"type": "ping"})
    assert pong["type"] == "pong"
    await c.close()


@pytest.mark.parametrize(
    "raw, reply_type",
    [
        ('{"type":"start","protocol":1,"title":"\\ud800"}', "error"),
        ('{"type":"start","protocol":1,"tab_id":"t\\udc00"}', "error"),
        ('{"type":"resume","protocol":1,"session_id":"\\ud800","after":0}', "resume_rejected"),
        (
            '{"type":"resume","protocol":1,"session_id":"s","after":0,"tab_id":"\\ud800"}',
            "resume_rejected",
        ),
    ],
)
async def test_lone_surrogates_in_a_handshake_are_refused_and_socket_lives(
    server, cookie, raw, reply_type
):
    """A handshake with a string that is not valid Unicode gets bad_frame/bad_request;
    the socket stays open for a good handshake."""
    c = await connect(server, cookie)
    await c.send_raw(raw)
    reply = await c.wait(lambda f: f["type"] in ("error", "resume_rejected"))
    assert reply["type"] == reply_type
    assert reply.get("code", reply.get("reason")) in ("bad_frame", "bad_request"), reply
    ok = await c.start()
    assert ok["type"] == "start_ok"
    await c.close()


async def test_frame_over_64k_closes_4413_and_new_socket_works(server, cookie):
    """A frame over 64 KiB closes with 4413 unprocessed; a new socket works at once."""
    c = await connect(server, cookie)
    await c.start()
    await c.send_raw(json.dumps({"type": "ping", "pad": "é" * 33000}))  # 66 KB of UTF-8
    assert await c.wait_closed() == 4413
    d = await connect(server, cookie)
    assert (await d.start())["type"] == "start_ok"
    await d.close()


async def test_rate_limit_closes_4429_after_burst(server, cookie):
    """A burst of 60 frames is fine; far more than 30/s sustained closes with 4429."""
    c = await connect(server, cookie)
    await c.start()
    for _ in range(55):
        await c.send({"type": "ping"})
    pong = await c.request({"type": "ping"})
    assert pong["type"] == "pong"
    for _ in range(100):
        try:
            await c.send({"type": "ping"})
        except websockets.ConnectionClosed:
            break
    assert await c.wait_closed() == 4429
    d = await connect(server, cookie)
    assert (await d.start())["type"] == "start_ok"
    await d.close()


def _big_log(user, events: int, size: int) -> AgentSession:
    """A session whose log holds ``events`` deltas of ``size`` characters each."""
    text = "x" * size
    return session_with_deltas(user, events + 1, text=lambda seq: text)


@pytest.mark.slow
async def test_a_client_that_stops_reading_is_closed_4408_with_bounded_memory(
    cookie, user, tmp_path, transactional_db
):
    """Resume plus repeated syncs of a 16 MB log on a socket that reads nothing: the
    server buffers at most about its limit, closes the socket 4408 (retryable), and a
    client that reads gets the whole replay through the same limit."""
    from tests.harness import Daphne

    daphne = Daphne(
        tmp_path, AGENT_SEND_BUFFER_BYTES="262144", AGENT_SLOW_CONSUMER_SECONDS="1"
    ).start()
    try:
        s = await asyncio.to_thread(_big_log, user, 16_000, 1000)
        before = rss_kib(daphne.proc.pid)
        sock = await asyncio.to_thread(raw_socket_that_never_reads, daphne.port, cookie)
        resume = {"type": "resume", "protocol": 1, "session_id": s.id, "after": 0}
        sock.sendall(client_frame(json.dumps(resume)))
        for i in range(5):
            sock.sendall(client_frame(json.dumps({"type": "sync", "after": 0, "request_id": i})))

        def closed():
            return Connection.objects.filter(session_id=s.id, close_code=4408).exists()

        await wait_until(closed, timeout=60)
        grown_mib = (rss_kib(daphne.proc.pid) - before) / 1024
        assert grown_mib < 40, f"daphne grew by {grown_mib:.0f} MiB"
        sock.close()

        reader = await WsClient.connect(daphne.ws, cookie)
        await reader.resume(s.id, 0)
        await reader.wait_event(lambda f: f["seq"] == s.head, timeout=60)
        assert reader.seqs() == list(range(1, s.head + 1))
        await reader.close()
    finally:
        daphne.stop()


async def test_per_user_socket_limit_closes_4429_and_others_are_unaffected(
    cookie, user, other_user, tmp_path, transactional_db
):
    """Past AGENT_USER_MAX_SOCKETS one user's next socket is closed 4429 (retryable);
    another user connects as usual, and a freed place can be taken again."""
    from tests.harness import Daphne

    daphne = Daphne(tmp_path, AGENT_USER_MAX_SOCKETS="3").start()
    try:
        mine = [await connect(daphne, cookie) for _ in range(3)]
        for c in mine:
            assert (await c.request({"type": "start", "protocol": 1}))["type"] == "start_ok"
        extra = await connect(daphne, cookie)
        assert await extra.wait_closed() == 4429
        theirs = await connect(daphne, session_cookie(other_user))
        assert (await theirs.start())["type"] == "start_ok"
        first = mine[0].frames[0]["connection_id"]
        await mine[0].close()
        # The place is freed when the server handles the close (before the row is).
        await wait_until(
            lambda: Connection.objects.filter(id=first, closed_at__isnull=False).exists()
        )
        again = await connect(daphne, cookie)
        assert (await again.start())["type"] == "start_ok"
        for c in [*mine[1:], theirs, again]:
            await c.close()
    finally:
        daphne.stop()
